"""The thin Dagster layer: resources, asset factories and schedules over the core packages."""
