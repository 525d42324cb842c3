"""The change log: durable, append-only Avro segments with an SCN manifest and a checkpoint.

``changelog.ChangeLog`` is the entry point (a source's log in the lake); ``writer.LogWriter`` its
single writer; ``manifest`` the commit points (segments, sealed parts, checkpoint, epoch lineage);
``segments`` what a segment holds and the one way to decode it; ``reader`` events and windows read
back; ``columns`` one table's changes as Arrow batches for the merge; ``avro`` the segment file
format; ``schemas`` and ``ddl`` the versioned row schemas and DDL beside it; ``retention`` drops
the oldest segments.
"""
