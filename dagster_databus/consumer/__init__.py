"""Consumers of the change log: Databus-style callbacks, a Canal-style pull API, partition filters,
and bootstrap from the Delta snapshots followed by catch-up from the log.

``ordering``: routing by key over a consumer group, and a sink guard that discards stale or
duplicate changes by log position (as Kafka key partitioning with a sink-side guard does).
``logical``: one stream for a table sharded over several sources, with a per-part checkpoint vector
(as Canal's group event parser and sink read sharded databases)."""
