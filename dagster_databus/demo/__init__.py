"""The embedded demo: a SQLite shop database, a realistic workload, and a full pipeline run."""
