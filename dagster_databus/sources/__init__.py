"""Capture sources: one module per database kind, all behind ``base.CaptureSource``."""

from __future__ import annotations

from typing import Any

from dagster_databus.config import SourceConfig
from dagster_databus.sources.base import CaptureSource


def open_source(config: SourceConfig) -> CaptureSource:
    if config.kind == "sqlite":
        from dagster_databus.sources.sqlite import SqliteSource

        return SqliteSource(config)
    if config.kind == "mysql":
        from dagster_databus.sources.mysql import MysqlSource

        return MysqlSource(config)
    if config.kind == "oracle":
        from dagster_databus.sources.oracle import OracleSource

        return OracleSource(config)
    raise ValueError(f"unsupported source kind {config.kind!r}")  # config validation prevents this


def read_rows(source: CaptureSource, table: str) -> list[dict[str, Any]]:
    """Every row of a table as capture would type it, from one consistent read (checks, demo, tests)."""
    return [row for batch in source.snapshot(table).batches
            for row in batch.select(source.schemas()[table].column_names).to_pylist()]
