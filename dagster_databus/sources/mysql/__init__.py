"""MySQL / MariaDB capture from the binary log (Databus for MySQL).

SCN = (binlog file number << 32) | end offset of the transaction's commit event, so the
checkpoint is also the resume position. The epoch is the server's identity and binlog base
name; the checkpoint also keeps the creation time of its binlog file, so binlogs renumbered
by ``RESET MASTER`` are recognised even when the same file names come back. A source with a
standby captures from whichever server its checkpoint names; after a failover SCNs carry the
next *era* in their high bits (``failover.py``, docs/ha.md). Rows are
decoded with the column names and types of the binlog's table map (``binlog_row_metadata=FULL``),
that is, the table's shape at the time of the event.

The package follows the jobs of a source, each module a layer of ``source.MysqlSource``:
``servers`` (roles, connections), ``schema`` (introspection), ``positions`` (epoch, binlog
positions), ``verify`` (server settings, install), ``binlog`` (polling), ``bootstrap``
(consistent reads, key ranges for tasks), ``fingerprint`` (reconciliation); ``failover``
switches servers, ``types`` maps column types and values, ``connect`` shares a TLS context.
"""
