"""The change log: durable, append-only Avro segments with an SCN manifest and a checkpoint.

``changelog.ChangeLog`` is the entry point (a source's log in the lake), and the only module here
that other packages need to open a log; it builds the log's ``layout.LogLayout`` (the lake's objects,
the key prefix, the source, listings) and hands that to the modules that do the work, none of which
imports ``changelog``: ``manifest`` the commit points (segments, sealed parts, checkpoint, epoch
lineage); ``segments`` what a segment holds and the one way to decode it; ``reader`` events and
windows read back; ``integrity`` damage checks; ``writer.LogWriter`` the single writer. Above them:
``columns`` one table's changes as Arrow batches for the merge; ``retention`` drops the oldest
segments through the writer. ``avro`` is the segment file format; ``schemas`` and ``ddl`` the
versioned row schemas and DDL beside it.
"""
