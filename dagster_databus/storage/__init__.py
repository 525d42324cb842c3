"""Where the lake lives: a local folder or an object store (S3, GCS, Azure), behind one small interface.

``location`` parses the ``lake:`` setting into a ``LakeLocation`` and resolves its storage options
(secrets only from environment variables); ``objects`` gives the byte-level operations the change
log, the snapshots' metadata and the consumers' state need, with the one primitive a lock-free commit
rests on: create-if-absent, atomic on a local disk (a hard link) and on object stores (a conditional
put), so of two writers racing for the same name exactly one wins. ``documents`` builds numbered,
create-if-absent versions on it (the log's manifest, consumers' checkpoints); ``durable`` holds the
local durable-write primitives (atomic writes, locks, a full disk named, crash points); ``lake`` is
what the rest of the code holds (``Lake``), and probes whether it can be written.

The modules depend one way: ``durable`` and ``location`` import nothing of this package; ``objects``
builds on both; ``documents`` and ``lake`` on ``objects``.
"""
