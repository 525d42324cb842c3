"""MySQL / MariaDB capture from the binary log (Databus for MySQL).

SCN = (binlog file number << 32) | end offset of the transaction's commit event, so the
checkpoint is also the resume position. The epoch is the server's identity and binlog base
name; the checkpoint also keeps the creation time of its binlog file, so binlogs renumbered
by ``RESET MASTER`` are recognised even when the same file names come back. A source with a
standby captures from whichever server its checkpoint names; after a failover SCNs carry the
next *era* in their high bits (``failover.py``, docs/ha.md). Rows are
decoded with the column names and types of the binlog's table map (``binlog_row_metadata=FULL``),
that is, the table's shape at the time of the event.

``source.MysqlSource`` is a record of its four parts, each a module named after it: ``catalog`` (the tables'
schemas), ``setup`` (server settings and privileges), ``stream`` (the binlog polled) and ``reads``
(consistent reads, key ranges, fingerprints; one key range read in a task). They are built over
collaborators of the layer below, never from each other's insides: ``servers`` (roles, connections, the
binlog reader lock), ``positions`` (epoch, binlog positions) and ``failover`` (switching servers).
``types`` maps column types and values, ``versions`` picks statements by server version,
``connect`` is the one module that imports pymysql (typed cursors, a shared TLS context), and
``wire`` decodes the binlog.
"""
