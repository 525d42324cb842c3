"""Capture sources: one package per database kind, each registered in ``registry`` (``KINDS``, the one list of
the kinds) and implementing ``base.Source`` (and ``base.Failover`` where it has servers to switch between).
``base`` holds the contract and its records; ``generic`` (the catalog and the epoch check, written once over each
kind's dialect), ``keys``, ``fingerprints``, ``filters`` and ``sqlfiles`` what the kinds share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_databus.sources.base import Failover, RangeRead, Source, TableRead
from dagster_databus.sources.registry import source_kind

if TYPE_CHECKING:
    from dagster_databus.config import SourceConfig
    from dagster_databus.storage.lake import Lake


def open_source(config: SourceConfig, lake: Lake | None = None) -> Source:
    """The source's capture adapter. With ``lake``, a source with servers to switch between (``Failover``) reads
    from the server its change log's checkpoint names (the standby after a failover)."""
    source = source_kind(config.kind).open(config)
    if lake is not None and isinstance(source, Failover):
        from dagster_databus.log.changelog import ChangeLog

        checkpoint = ChangeLog(lake, config.name).checkpoint()
        if checkpoint is not None:
            source.attach(checkpoint.state)
    return source


def read_range(read: RangeRead, index: int) -> TableRead:
    """Range ``index`` of ``read``, on a connection of its own (in a Spark task, say), at the SCN it reports."""
    return source_kind(read.kind).read_range(read, index)


def read_rows(source: Source, table: str) -> list[dict[str, Any]]:
    """Every row of a table as capture would type it, from one consistent read (checks, demo, tests)."""
    return [row for batch in source.reads.read_table(table).batches
            for row in batch.select(source.catalog.schemas()[table].column_names).to_pylist()]
