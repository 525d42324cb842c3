"""Capture sources: one package per database kind (``sqlite``, ``mysql``, ``oracle``), all behind
``base.CaptureSource``; ``base`` holds what they share (key ranges, keyset paging, the install check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster_databus.config import SourceConfig
from dagster_databus.sources.base import CaptureSource, RangeRead, TableSnapshot


def open_source(config: SourceConfig, lake: Path | None = None) -> CaptureSource:
    """The source's capture adapter. With ``lake``, a source with a standby reads from the server
    its change log's checkpoint names (the standby after a failover)."""
    if config.kind == "sqlite":
        from dagster_databus.sources.sqlite.source import SqliteSource

        return SqliteSource(config)
    if config.kind == "mysql":
        from dagster_databus.log.changelog import ChangeLog
        from dagster_databus.sources.mysql.source import MysqlSource

        mysql = MysqlSource(config)
        checkpoint = ChangeLog(lake, config.name).checkpoint() if lake is not None else None
        if checkpoint is not None:
            mysql.attach(checkpoint.state)
        return mysql
    if config.kind == "oracle":
        from dagster_databus.sources.oracle.source import OracleSource

        return OracleSource(config)
    raise ValueError(f"unsupported source kind {config.kind!r}")  # config validation prevents this


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, on a connection of its own (in a Spark task, say), at the SCN it reports."""
    if read.kind == "sqlite":
        from dagster_databus.sources.sqlite.bootstrap import read_range as read_sqlite

        return read_sqlite(read, index)
    if read.kind == "mysql":
        from dagster_databus.sources.mysql.bootstrap import read_range as read_mysql

        return read_mysql(read, index)
    if read.kind == "oracle":
        from dagster_databus.sources.oracle.bootstrap import read_range as read_oracle

        return read_oracle(read, index)
    raise ValueError(f"unsupported source kind {read.kind!r}")


def read_rows(source: CaptureSource, table: str) -> list[dict[str, Any]]:
    """Every row of a table as capture would type it, from one consistent read (checks, demo, tests)."""
    return [row for batch in source.snapshot(table).batches
            for row in batch.select(source.schemas()[table].column_names).to_pylist()]
