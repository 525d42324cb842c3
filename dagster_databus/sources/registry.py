"""The source kinds: one ``SourceKind`` entry per kind, and nothing else knows the list.

An entry names, as ``module:attribute`` text, the kind's adapter (a class implementing ``base.Source``, made
with the source's config) and its range reader (``read_range(read, index) -> TableSnapshot``: one key range of
a ``RangeRead`` on a connection of its own, run where a task runs). Both are imported when first used, so a
process imports only the drivers of the kinds it meets (no MySQL or Oracle driver where only SQLite is read).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from dagster_databus.sources.base import RangeRead, Source, TableSnapshot

if TYPE_CHECKING:
    from dagster_databus.config import SourceConfig
    from dagster_databus.sources.mysql.source import MysqlSource
    from dagster_databus.sources.oracle.source import OracleSource
    from dagster_databus.sources.postgres.source import PostgresSource
    from dagster_databus.sources.sqlite.source import SqliteSource

RangeReader = Callable[[RangeRead, int], TableSnapshot]


@dataclass(frozen=True, slots=True)
class SourceKind:
    """A kind of source (``kind:`` in the config) and where its code lives."""

    name: str
    adapter: str  # "module:Class": the Source, called with the source's config
    range_reader: str  # "module:function": a RangeReader

    def open(self, config: SourceConfig) -> Source:
        """The adapter of a source of this kind."""
        source = cast(Callable[["SourceConfig"], object], _load(self.adapter))(config)
        if not isinstance(source, Source):
            raise TypeError(f"{self.adapter} does not implement the Source protocol (sources.base.Source)")
        return source

    def read_range(self, read: RangeRead, index: int) -> TableSnapshot:
        """Range ``index`` of ``read``, on a connection of its own, at the SCN it reports."""
        return cast(RangeReader, _load(self.range_reader))(read, index)


def _load(reference: str) -> object:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


KINDS: Mapping[str, SourceKind] = {kind.name: kind for kind in (
    SourceKind("sqlite", "dagster_databus.sources.sqlite.source:SqliteSource",
               "dagster_databus.sources.sqlite.bootstrap:read_range"),
    SourceKind("mysql", "dagster_databus.sources.mysql.source:MysqlSource",
               "dagster_databus.sources.mysql.bootstrap:read_range"),
    SourceKind("oracle", "dagster_databus.sources.oracle.source:OracleSource",
               "dagster_databus.sources.oracle.bootstrap:read_range"),
    SourceKind("postgres", "dagster_databus.sources.postgres.source:PostgresSource",
               "dagster_databus.sources.postgres.bootstrap:read_range"),
)}


if TYPE_CHECKING:  # mypy holds each registered adapter to the Source protocol (the registry imports it by name)
    _ADAPTERS: tuple[type[Source], ...] = (SqliteSource, MysqlSource, OracleSource, PostgresSource)


def source_kind(name: str) -> SourceKind:
    """The registered kind ``name``."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unsupported source kind {name!r}") from None  # config validation prevents this
