"""Logical tables: sharded physical tables merged into one Delta snapshot (as Canal's group event sink merges shards).

``<lake>/logical/<name>`` holds the rows of every part (a configured table of a configured source)
under the logical key ``(shard_column, *primary key)``, with ``__part`` naming the part each row
comes from and the usual ``__scn``, ``__op``, ``__commit_ts``. When the physical tables have no
column called ``shard_column`` it is added, filled with each part's label, so equal keys on
different shards never collide; when they have one, its values are used and a key that two parts
both hold is refused (``ShardCollisionError``).

Each part keeps its own applied SCN, a Delta transaction id ``databus:logical.<name>@<label>``,
because SCNs of different shards come from different logs (other servers, other epochs) and must
never be compared. All parts' ids move in the same commit as the rows they cover. The first sync
loads every part from its physical snapshot at that snapshot's applied SCN; later syncs read each
part's change log after the part's own SCN and merge the union in one commit.

The modules: ``sync`` (``sync_logical``), ``compare`` (parts against their sources); the model and key rules
are ``dataplane.logical``, the local engine's loads and merges ``engines.local_logical``, the Spark
engine's ``spark.logical``.
"""
