"""Consumers of the change log: Databus-style callbacks, a Canal-style pull API, partition filters,
and bootstrap from the Delta snapshots followed by catch-up from the log.

From the bottom up: ``filters`` (partition filters) and ``groups`` (routing by key over a consumer
group) are pure values; ``coverage`` is what a position covers; ``checkpoints`` the stores positions
are kept in; ``ordering`` a sink guard that discards stale or duplicate changes by log position (as
Kafka key partitioning with a sink-side guard does); ``delivery`` the callbacks, their dispatch and a
window's rollback-and-retry; then the clients: ``client`` (one source's log), ``pull`` (get / ack /
rollback) and ``logical`` (one stream for a table sharded over several sources, with a per-part
checkpoint vector, as Canal's group event parser and sink read sharded databases); ``history`` reads
history tables as of an SCN or a time."""
