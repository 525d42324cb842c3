"""Snapshot store: Delta tables with the latest row per key, merged from the change log by Spark."""
