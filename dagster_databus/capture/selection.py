"""``row_selection``: the rows an on-demand snapshot reads again, from what a user typed (the CLI's and the Dagster
refresh's key bounds and filter), checked against the source's schema."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster_databus.config import DatabusConfig
from dagster_databus.errors import ConfigError
from dagster_databus.sources import open_source
from dagster_databus.sources.base import ALL_ROWS, RowSelection
from dagster_databus.sources.keys import selection_for


def row_selection(config: DatabusConfig, source: str, tables: Sequence[str], after: Sequence[Any] | None = None,
                  through: Sequence[Any] | None = None, where: str | None = None) -> RowSelection:
    """The rows an on-demand snapshot reads again, from what a user typed: key bounds (one value per key
    column, in key order) and a filter in the source's SQL. Either needs exactly one table."""
    if after is None and through is None and where is None:  # a blank filter is refused, not widened to every row
        return ALL_ROWS
    if len(tables) != 1:
        raise ConfigError("snapshot.tables", f"a key range or a filter names rows of one table, but {len(tables)} "
                          f"tables were chosen ({', '.join(tables) or 'all of them'})", "choose exactly one table")
    schema = open_source(config.source(source)).catalog.schemas()[tables[0]]
    return selection_for(schema, after, through, where)
