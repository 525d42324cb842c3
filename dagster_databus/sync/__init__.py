"""Keeping the snapshots (Delta tables, ``dataplane.delta.DeltaSnapshot``) in step with the change log: a table
bootstrapped and merged (``merge``), its schema changes applied (``evolve``), checked against its source
(``verify``, ``rotation``, ``reconcile``), kept up (``upkeep``), logical tables synced from their parts
(``logical``); ``figures`` are what a sync reports. The engine doing the work is one of ``engines``."""
