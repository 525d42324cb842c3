"""Key-range reads, written once for every SQL dialect: a table's key space cut into ranges (``KeyedReads.ranges``),
a selection checked on no rows (``check``), a range read a page at a time by key (``pages``), and the fingerprints
computed in this process from a consistent read (``StreamedFingerprints``). A kind describes what differs in its
``dialect.py`` as a ``ReadDialect``: quoting, placeholders, the paging forms, its driver's errors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dagster_databus.core.progress import Progress, quiet
from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import (
    ALL_KEYS,
    KeyRange,
    RangeRead,
    RangeSpec,
    RowSelection,
    SourceFingerprint,
    TableRead,
)
from dagster_databus.sources.filters import Filter, FilterDialect, filter_for, select_clause
from dagster_databus.sources.fingerprints import in_buckets, streamed_fingerprint
from dagster_databus.sources.keys import keyset_pages, ranges_between, split_keys

# A query's parameters: positional (a driver that marks them "?" or "%s") or named (":name").
Params = list[Any] | dict[str, Any]
# A selection's WHERE clause ("WHERE ... " or "") for quoted key columns, a key range and a checked filter.
Selection = Callable[[Sequence[str], KeyRange, Filter | None], tuple[str, Params]]

# The most rows a range's task reads in one query: a page's memory stays bounded whatever the range's size.
MAX_PAGE_ROWS = 10_000

# Cut points from a sample of the table's pages (``KeyedReads.sampled_cuts``), where the dialect samples pages: a
# walk through the key index reads every key before any range is read (0.1 s a million keys), the sample about
# SAMPLED_PAGES pages a range. A range's rows are then within about 1/sqrt(SAMPLED_PAGES) of rows_per_range, less
# close where a page holds neighbouring keys. A sample of more than SAMPLE_MAX_SHARE of the table's pages costs
# about what the walk does; under SAMPLE_MIN_RANGES ranges the walk's few lookups are cheap anyway.
SAMPLED_PAGES = 50
SAMPLE_MAX_SHARE = 0.2
SAMPLE_MIN_RANGES = 4

S = TypeVar("S", bound=RangeSpec)


def page_rows(rows_per_range: int) -> int:
    """The rows a range's task reads a page (``RangeSpec.page_rows``)."""
    return min(rows_per_range, MAX_PAGE_ROWS)


def spec_of(read: RangeRead, kind: type[S]) -> S:
    """``read.spec`` as the kind's own spec type (a range reader is handed only its own kind's reads)."""
    if not isinstance(read.spec, kind):
        raise TypeError(f"a {read.kind} range read carries a {type(read.spec).__name__}, not a {kind.__name__}")
    return read.spec


def _not_the_drivers(_: Exception) -> str | None:
    return None


@dataclass(frozen=True)
class PageSample:
    """How a dialect samples a table's pages: ``clause`` follows the table in FROM, its one parameter the
    percentage of pages to read; ``size`` loads the query of the table's estimated rows and pages (one row,
    or none), its one parameter the quoted table."""

    clause: str
    size: Callable[[], str]


@dataclass(frozen=True)
class ReadDialect:
    """What one kind's SQL does differently in key-range reads. The paging forms end a query ordered by key:
    ``offset_row`` reads one row at offset ``{n}``, ``first_rows`` the first ``{n}`` rows, ``no_rows`` none
    (``{n}`` is where the dialect's mark for that parameter goes)."""

    label: str  # the SQL as messages name it (as in "<label> cannot select ...")
    filters: FilterDialect
    quote: Callable[[str], str]  # a validated name as an identifier
    placeholder: str | None  # a positional parameter's mark; None: named binds (":n")
    offset_row: str = "LIMIT 1 OFFSET {n}"
    first_rows: str = "LIMIT {n}"
    no_rows: str = "LIMIT 0"
    # The WHERE clause of a selection; None: row-value comparison of the key (``filters.select_clause``).
    selection: Selection | None = None
    # The driver error's text as a refusal gives it, or None for an exception that is not the driver's.
    error_text: Callable[[Exception], str | None] = _not_the_drivers
    columns_named: str = "naming the table's columns"  # the refusal's fix: how the filter names them
    # Held while a query with a filter runs: the dialect's own name for a filter failing on a row.
    running: Callable[[str, Filter | None], AbstractContextManager[object]] = lambda _table, _chosen: nullcontext()
    sample: PageSample | None = None  # None: cut points are found by walking the key index only

    def quoted(self, columns: Sequence[str]) -> dict[str, str]:
        """Each of ``columns`` mapped to its quoted name (what a filter may name)."""
        return {c: self.quote(c) for c in columns}

    def filter(self, table: str, columns: Mapping[str, str], where: str | None) -> Filter | None:
        """A selection's filter checked and rendered in this dialect, naming ``columns`` (name -> quoted) of
        ``table`` (None: no filter)."""
        return filter_for(where, self.filters, table, columns)

    def where(self, keys: Sequence[str], bounds: KeyRange, chosen: Filter | None) -> tuple[str, Params]:
        """"WHERE ... " (or "") selecting ``bounds`` of the quoted ``keys`` and ``chosen``, with its parameters."""
        if self.selection is not None:
            return self.selection(keys, bounds, chosen)
        assert self.placeholder is not None
        return select_clause(", ".join(keys), ", ".join([self.placeholder] * len(keys)), bounds, chosen)

    def bound(self, form: str, params: Params, value: int) -> tuple[str, Params]:
        """A paging ``form`` with ``value`` as its parameter ``n``, added to ``params``."""
        if isinstance(params, dict):  # named binds: the dialect has no placeholder
            return form.format(n=":n"), {**params, "n": value}
        return form.format(n=self.placeholder), [*params, value]


@dataclass(frozen=True)
class KeyedTable:
    """One table as a dialect's queries name it: ``table`` quoted (with what else its FROM needs, such as
    a flashback clause, and the named ``binds`` that needs), its key columns quoted, and the checked filter."""

    name: str  # the table's own name
    table: str
    keys: tuple[str, ...]
    chosen: Filter | None = None
    binds: Mapping[str, Any] = field(default_factory=dict)
    shown: str | None = None  # as a refusal names it (None: the name, quoted as Python quotes text)


class KeyedReads:
    """The key-range queries of one table on one cursor (a DB-API cursor: ``execute(sql, params)``, ``fetch*``)."""

    def __init__(self, dialect: ReadDialect, cursor: Any, table: KeyedTable) -> None:
        self.dialect = dialect
        self.cursor = cursor
        self.table = table
        self.order = ", ".join(table.keys)

    def select(self, what: str, keys: KeyRange, form: str, n: int) -> tuple[str, Params]:
        """SELECT ``what`` of the rows of ``keys`` (and the filter) in key order, paged by ``form``."""
        clause, params = self.dialect.where(self.table.keys, keys, self.table.chosen)
        if isinstance(params, dict):
            params = {**self.table.binds, **params}
        limit, params = self.dialect.bound(form, params, n)
        return f"SELECT {what} FROM {self.table.table} {clause.strip()}{' ' if clause else ''}ORDER BY " \
               f"{self.order} {limit}", params

    def key_at(self, after: tuple[Any, ...] | None, through: tuple[Any, ...] | None, n: int
               ) -> tuple[Any, ...] | None:
        """The key ``n`` places (0: the first) after ``after`` and at or before ``through``, or None."""
        query, params = self.select(self.order, KeyRange(after, through), self.dialect.offset_row, n)
        with self.dialect.running(self.table.name, self.table.chosen):
            self.cursor.execute(query, params)
        found = self.cursor.fetchone()
        return tuple(found) if found is not None else None

    def ranges(self, rows_per_range: int, bounds: KeyRange = ALL_KEYS, first: int | None = None
               ) -> tuple[KeyRange, ...]:
        """Ranges of about ``rows_per_range`` of the selected rows within ``bounds``: cut at keys of a sample of
        a large table's pages (``sampled_cuts``), else at every ``rows_per_range``-th key (``keys.split_keys``).
        Only the boundary keys leave the database."""
        if first is None and bounds == ALL_KEYS and (cuts := self.sampled_cuts(rows_per_range)) is not None:
            return ranges_between(cuts)
        return split_keys(lambda after, n: self.key_at(after, bounds.through, n), rows_per_range, bounds, first)

    def sampled_cuts(self, rows_per_range: int) -> list[tuple[Any, ...]] | None:
        """Keys about ``rows_per_range`` selected rows apart, in key order: every k-th key of a sample of the
        table's pages, sized by the table's estimated rows and pages and sorted where the database is. None
        where the dialect samples no pages, the table has no estimate (never analyzed, a partitioned parent) or
        is too small for a sample to save time; a stale estimate changes only the sample's cost, since k is
        the sample's share of ``rows_per_range``."""
        sample, table = self.dialect.sample, self.table
        if sample is None or self.dialect.placeholder is None:
            return None
        self.cursor.execute(sample.size(), [table.table])
        found = self.cursor.fetchone()
        if found is None or None in found:
            return None
        rows, pages = float(found[0]), int(found[1])
        ranges = rows / rows_per_range
        share = SAMPLED_PAGES * ranges / pages if pages > 0 else 1.0
        if ranges < SAMPLE_MIN_RANGES or share > SAMPLE_MAX_SHARE:
            return None
        clause, params = self.dialect.where(table.keys, ALL_KEYS, table.chosen)
        assert isinstance(params, list)  # a dialect with a placeholder binds by position
        mark, keys = self.dialect.placeholder, ", ".join(table.keys)
        number = next(n for n in (f"databus_sample_{i}" for i in range(len(table.keys) + 1))
                      if self.dialect.quote(n) not in table.keys)
        with self.dialect.running(table.name, table.chosen):
            self.cursor.execute(
                f"SELECT {keys} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS {number} FROM "
                f"{table.table} {sample.clause} {clause.strip()}) s WHERE mod({number}, {mark}) = 0 ORDER BY {keys}",
                [100 * share, *params, max(1, round(rows_per_range * share))])
            return [tuple(row) for row in self.cursor.fetchall()]

    def check(self, rows: RowSelection) -> None:
        """Run the selection's query on no rows: the database names what its own check finds."""
        clause, params = self.dialect.where(self.table.keys, rows.keys, self.table.chosen)
        if isinstance(params, dict):
            params = {**self.table.binds, **params}
        try:
            self.cursor.execute(f"SELECT 1 FROM {self.table.table} {clause.strip()}{' ' if clause else ''}"
                                f"{self.dialect.no_rows}", params)
            self.cursor.fetchall()
        except Exception as exc:
            text = self.dialect.error_text(exc)
            if text is None:
                raise
            label = self.dialect.label
            raise ConfigError("snapshot.where", f"{label} cannot select {rows.describe()} of "
                              f"{self.table.shown or repr(self.table.name)}: "
                              f"{text}", f"write the condition in {label}'s SQL, {self.dialect.columns_named}"
                              ) from None

    def fetch(self, select: str, page: int) -> Callable[[KeyRange], list[Any]]:
        """A page reader for ``keys.keyset_pages``: at most ``page`` rows of ``select`` in a key range."""
        def rows(keys: KeyRange) -> list[Any]:
            query, params = self.select(select, keys, self.dialect.first_rows, page)
            with self.dialect.running(self.table.name, self.table.chosen):
                self.cursor.execute(query, params)
            return list(self.cursor.fetchall())

        return rows

    def pages(self, select: str, page: int, keys: KeyRange, last_key: Callable[[Any], tuple[Any, ...]]
              ) -> Iterator[list[Any]]:
        """The rows of ``select`` in key range ``keys`` (and the filter), ``page`` a query, in key order;
        ``last_key(row)``: a row's key, the next page's lower bound."""
        return keyset_pages(self.fetch(select, page), keys, last_key, page)


class StreamedFingerprints(ABC):
    """A kind's fingerprints computed in this process from its own consistent read (``sources.fingerprints``),
    for a database that does not compute them."""

    @abstractmethod
    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead: ...

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.read_table(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableRead:
        return in_buckets(self.read_table(table), buckets)
