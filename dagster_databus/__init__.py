"""dagster-databus: Databus-style change data capture, orchestrated by Dagster.

Its packages, top layer first (docs/architecture.md has the layers and a map of every module):

- ``definitions``, ``components``: the workspace's Dagster definitions, and the same as a ``dg`` component.
- ``cli``: the ``databus`` command.
- ``demo``: the embedded demo (a shop database, a workload, a full run).
- ``defs``: the thin Dagster layer: assets, checks, schedules, sensors, resources, the executor.
- ``capture``: install, validate, capture and restart: a source's changes appended to its change log.
- ``consumer``: consumers of the change log: callbacks, a pull API, filters, checkpoints.
- ``sync``: keeping the snapshots (Delta tables) in step with the log: merge, verify, reconcile, upkeep.
- ``engines``: the engines that do a sync's work: their interface, the local engine, Spark's.
- ``spark``: the Spark runtime and the Spark jobs the spark engine is built from.
- ``dataplane``: Delta tables, data files, commits and reduces below every engine; no pyspark.
- ``sources``: the capture sources, one package per database kind, and their registry.
- ``log``: the durable change log: Avro segments, versioned manifests, schemas, DDL, retention.
- ``config``: the YAML config, validated.
- ``storage``: the lake: a local folder or an object store.
- ``core``: positions, events, change batches, schemas, types, progress.
- ``errors``: typed errors, each with its problem and fix.

Below ``defs`` nothing imports Dagster.
"""
