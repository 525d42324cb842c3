"""Consumers of the change log: Databus-style callbacks, a Canal-style pull API, partition filters,
and bootstrap from the Delta snapshots followed by catch-up from the log."""
