"""``row_selection``: the rows an on-demand snapshot reads again, from what a user typed (the CLI's and the Dagster
refresh's key bounds and filter), checked against the source's schema; ``check_row_choice``: the same checks at a
run's launch, against the schema the change log registered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster_databus.config import DatabusConfig
from dagster_databus.errors import ConfigError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import ALL_ROWS, RowSelection
from dagster_databus.sources.filters import check_filter
from dagster_databus.sources.keys import selection_for
from dagster_databus.sources.registry import source_kind


def row_selection(config: DatabusConfig, source: str, tables: Sequence[str], after: Sequence[Any] | None = None,
                  through: Sequence[Any] | None = None, where: str | None = None) -> RowSelection:
    """The rows an on-demand snapshot reads again, from what a user typed: key bounds (one value per key
    column, in key order) and a filter in the source's SQL. Either needs exactly one table."""
    if after is None and through is None and where is None:  # a blank filter is refused, not widened to every row
        return ALL_ROWS
    _one_table(tables)
    schema = open_source(config.source(source)).catalog.schemas()[tables[0]]
    return selection_for(schema, after, through, where)


def check_row_choice(config: DatabusConfig, source: str, tables: Sequence[str], after: Sequence[Any] | None = None,
                     through: Sequence[Any] | None = None, where: str | None = None) -> None:
    """What ``row_selection`` refuses, found without a database: the key bounds typed as the key columns and the
    filter parsed in the kind's dialect by the same checks (``sources.filters``), against the schema the change
    log registered. For a run's launch (the Dagster refresh job's config), where the source may be slow or away;
    a table with no registered schema yet is left to the run, which checks against the source."""
    if after is None and through is None and where is None:
        return
    _one_table(tables)
    registered = ChangeLog(config.lake, source).schemas.latest(tables[0])
    if registered is None:
        return
    schema = registered[1]
    rows = selection_for(schema, after, through, where)
    if rows.where is not None:  # the rendered text is the run's business; here only what it refuses counts
        check_filter(rows.where, source_kind(config.source(source).kind).filter_dialect(), schema.table,
                     {name: name for name in schema.column_names})


def _one_table(tables: Sequence[str]) -> None:
    if len(tables) != 1:
        raise ConfigError("snapshot.tables", f"a key range or a filter names rows of one table, but {len(tables)} "
                          f"tables were chosen ({', '.join(tables) or 'all of them'})", "choose exactly one table")
