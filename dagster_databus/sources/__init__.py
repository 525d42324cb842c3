"""Capture sources: one module per database kind, all behind ``base.CaptureSource``."""

from __future__ import annotations

from dagster_databus.config import SourceConfig
from dagster_databus.sources.base import CaptureSource


def open_source(config: SourceConfig) -> CaptureSource:
    if config.kind == "sqlite":
        from dagster_databus.sources.sqlite import SqliteSource

        return SqliteSource(config)
    if config.kind == "mysql":
        from dagster_databus.sources.mysql import MysqlSource

        return MysqlSource(config)
    raise ValueError(f"unsupported source kind {config.kind!r}")  # config validation prevents this
