"""The contract every capture source implements, and the records it returns."""

from __future__ import annotations

import decimal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.events import Window
from dagster_databus.core.identifiers import RESERVED_PREFIX, is_plain_name
from dagster_databus.core.progress import Progress, Ticker, quiet
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError, ConfigError, UnsupportedTypeError

if TYPE_CHECKING:
    from dagster_databus.core.fingerprint import Fingerprint

T = TypeVar("T")


def require_mapped(source: str, table: str, unmapped: Sequence[str], kind: str, fix: str) -> None:
    """Refuse a table with columns whose declared type has no mapping, naming all of them at once."""
    if unmapped:
        raise UnsupportedTypeError(
            f"source {source!r}, table {table!r}: column(s) {', '.join(unmapped)} have a declared type with no "
            f"mapping to a change-log and snapshot type (docs/types.md lists the {kind} mapping)",
            f"{fix}, or leave the table out of capture", source=source, table=table)


def not_installed(problem: str, problems: Sequence[str], fix: str, *, bulleted: bool = False,
                  **context: Any) -> CaptureNotInstalledError:
    """The error for capture that is not ready: ``problem``, then ``verify()``'s problems (one a line with
    ``bulleted``, else joined with "; "), and ``fix``."""
    listed = "\n  - " + "\n  - ".join(problems) if bulleted else " " + "; ".join(problems)
    return CaptureNotInstalledError(problem + listed, fix, **context)


class Verifiable(Protocol):
    def verify(self) -> list[str]: ...


def require_installed(source: Verifiable, error: Callable[[list[str]], CaptureNotInstalledError]) -> None:
    """Every source's ``require_installed``: raise ``error(problems)`` if ``source.verify()`` finds any."""
    problems = source.verify()
    if problems:
        raise error(problems)


def table_schemas(tables: Sequence[Any], build: Callable[[int, str, tuple[str, ...]], TableSchema]
                  ) -> dict[str, TableSchema]:
    """``build(index, name, key)`` for every configured table; unmapped column types of all tables are
    reported together, so one validate run names every column to change."""
    schemas, unmapped = {}, []
    for i, table in enumerate(tables):
        try:
            schemas[table.name] = build(i, table.name, table.primary_key)
        except UnsupportedTypeError as exc:
            unmapped.append(exc)
    if len(unmapped) == 1:
        raise unmapped[0]
    if unmapped:
        raise UnsupportedTypeError("; ".join(e.problem for e in unmapped), unmapped[0].fix,
                                   source=unmapped[0].context.get("source"))
    return schemas


def check_column_name(name: str, table: str, where: str) -> None:
    """Capture needs plain column names that do not collide with the snapshot's metadata columns."""
    if not is_plain_name(name) or name.startswith(RESERVED_PREFIX):
        raise ConfigError(
            f"{where}.name", f"table {table!r} has a column named {name!r}, which is not a plain identifier "
            f"(or starts with the reserved {RESERVED_PREFIX!r})",
            "rename the column, or leave this table out of capture")


def resolve_key(columns: Sequence[Column], key: Sequence[str], table: str, where: str) -> tuple[str, ...]:
    """The configured key columns as the table spells them (matched case-insensitively)."""
    names = {c.name.lower(): c.name for c in columns}
    missing = [k for k in key if k.lower() not in names]
    if missing:
        raise ConfigError(f"{where}.primary_key", f"table {table!r} has no column {', '.join(map(repr, missing))}",
                          f"name the table's key columns; it has: {', '.join(c.name for c in columns)}")
    return tuple(names[k.lower()] for k in key)


def require_unique_key(key: Sequence[str], unique_column_sets: Iterable[set[str]], table: str, where: str) -> None:
    """Refuse a key no primary key or unique index covers: two rows could share it."""
    wanted = {k.lower() for k in key}
    if not any(cols and {c.lower() for c in cols} <= wanted for cols in unique_column_sets):
        raise ConfigError(
            f"{where}.primary_key", f"columns {list(key)} are not the primary key of {table!r} nor covered by a "
            "UNIQUE index, so two rows could share a key and the snapshot would lose one",
            "name the table's PRIMARY KEY columns, or add a UNIQUE index on the columns you named")


def null_key_problem(schema: TableSchema, found: bool) -> str | None:
    """``validate``'s problem for a table whose key columns hold NULL (``found``), with the fix."""
    if not found:
        return None
    key = ", ".join(schema.primary_key)
    return (f"table {schema.table!r} has rows whose key ({key}) holds NULL: a NULL key identifies no row, and rows "
            f"sharing it would fold into one, so capture and bootstrap refuse them. Fix: give those rows a key and "
            f"declare the key columns NOT NULL, or configure a key that is never NULL")


def null_key_query(table: str, key: Sequence[str]) -> str:
    """SQL finding one row whose key holds NULL; ``table`` and ``key`` already quoted by the caller."""
    return f"SELECT 1 FROM {table} WHERE {' OR '.join(f'{k} IS NULL' for k in key)}"


@dataclass(frozen=True, slots=True)
class InstallReport:
    epoch: str
    version: str
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


@dataclass(slots=True)
class PollStats:
    """Filled in while a poll runs; read after its iterator is exhausted."""

    until: Scn = Scn.BEGINNING
    source_hwm: Scn = Scn.BEGINNING
    chunks: int = 0
    # Checkpoint state for the end of the chunk just yielded (source-specific, may be empty).
    state: dict[str, str] = field(default_factory=dict)
    # DDL statements on captured tables met by this poll, as (SCN after the statement, table, statement).
    ddl: list[tuple[Scn, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class TableSnapshot:
    """A consistent read of one table at ``scn``: every change <= scn is in ``batches``."""

    scn: Scn
    schema: TableSchema
    batches: Iterator[pa.RecordBatch] = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Primary keys after ``after`` (exclusive) through ``through`` (inclusive); None: unbounded."""

    after: tuple[Any, ...] | None
    through: tuple[Any, ...] | None


ALL_KEYS = KeyRange(None, None)


@dataclass(frozen=True, slots=True)
class RowSelection:
    """The rows an on-demand snapshot reads again: keys in ``keys`` and, when ``where`` is set, only rows it
    matches (a predicate in the source's own SQL, checked by the source before anything is read)."""

    keys: KeyRange = ALL_KEYS
    where: str | None = None

    @property
    def whole(self) -> bool:
        return self.keys == ALL_KEYS and self.where is None

    def describe(self) -> str:
        parts = [f"keys after {list(self.keys.after)}" if self.keys.after is not None else "",
                 f"keys through {list(self.keys.through)}" if self.keys.through is not None else "",
                 f"rows where {self.where}" if self.where is not None else ""]
        return ", ".join(p for p in parts if p) or "every row"


ALL_ROWS = RowSelection()

_INTEGER_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_NUMERIC = {*_INTEGER_BITS, "decimal"}  # kinds whose order this process knows as the database does


def selection_for(schema: TableSchema, after: Sequence[Any] | None, through: Sequence[Any] | None,
                  where: str | None) -> RowSelection:
    """A ``RowSelection`` from what a user typed (CLI, Dagster run config): key values in key order, one per
    key column, made the key columns' types (integers and decimals checked to fit the column's type; anything
    else as text, which every database compares with its dates and strings), and not an empty range; ``where``
    kept as typed, refused when empty. The filter itself is checked in the source's dialect by the source
    (``check_selection``, and again wherever it is read: ``sources.filters``), never pasted into SQL."""
    def key(values: Sequence[Any] | None, what: str) -> tuple[Any, ...] | None:
        if values is None:
            return None
        if len(values) != len(schema.primary_key):
            raise ConfigError(f"snapshot.{what}", f"{len(values)} value(s) for table {schema.table!r}, whose key is "
                              f"({', '.join(schema.primary_key)})", "give one value per key column, in key order")
        return tuple(_key_value(schema, name, value, what)
                     for name, value in zip(schema.primary_key, values, strict=True))

    keys = KeyRange(key(after, "after"), key(through, "through"))
    _require_nonempty(schema, keys)
    if where is not None and not where.strip():
        raise ConfigError("snapshot.where", f"the refresh filter {where!r} is empty: it would read every row of "
                          f"{schema.table!r} in the key range instead of the ones meant",
                          "give a condition on the table's columns, such as status = 'new'; or leave the filter out "
                          "(no --where, no where in the run config) to read every row of the key range")
    return RowSelection(keys, where)


def _key_value(schema: TableSchema, name: str, value: Any, what: str) -> Any:
    """A key bound typed as its column: an int in the column's integer range, a finite decimal with no more
    digits before the point than the column holds, or text."""
    column = schema.column(name).type
    kind, bound = column.kind, f"--{what} (key_{what})"
    try:
        if kind in _INTEGER_BITS:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
            low, high = -(2 ** (_INTEGER_BITS[kind] - 1)), 2 ** (_INTEGER_BITS[kind] - 1) - 1
            if not low <= number <= high:
                raise ConfigError(f"snapshot.{what}", f"{bound} {value} is beyond the range of key column {name!r} "
                                  f"({kind}: {low} to {high}), so it cannot be compared with its keys",
                                  f"give {name} a value from {low} to {high}; leave {bound} out to leave the range "
                                  f"open at that end")
            return number
        if kind == "decimal":
            exact = decimal.Decimal(str(value).strip())
            whole = column.precision - column.scale
            if not exact.is_finite() or (exact and exact.adjusted() >= whole):
                raise ConfigError(f"snapshot.{what}", f"{bound} {value} is beyond the range of key column {name!r} "
                                  f"({column}: at most {whole} digit(s) before the point)",
                                  f"give {name} a finite value with at most {whole} digit(s) before the point; "
                                  f"leave {bound} out to leave the range open at that end")
            return exact
    except (ValueError, decimal.InvalidOperation):
        raise ConfigError(f"snapshot.{what}", f"{value!r} is not a value of key column {name!r} ({kind})",
                          f"give {name} as a {kind}") from None
    return str(value)


def _require_nonempty(schema: TableSchema, keys: KeyRange) -> None:
    """Refuse bounds that leave no key between them: (after, through] with after at or past through, where the
    order is known here (numeric key columns, or bounds equal up to the first column where they differ)."""
    if keys.after is None or keys.through is None:
        return
    for name, low, high in zip(schema.primary_key, keys.after, keys.through, strict=True):
        if low == high:
            continue
        if schema.column(name).type.kind not in _NUMERIC or low < high:
            return  # a text key's order is the database's collation: not decided here
        break
    raise ConfigError("snapshot.through", f"keys after {list(keys.after)} through {list(keys.through)} of table "
                      f"{schema.table!r} are an empty range (after is excluded, through included): nothing would "
                      "be read", "give --through (key_through) a key above --after (key_after), or leave one out")


def split_keys(key_at: Callable[[tuple[Any, ...] | None, int], tuple[Any, ...] | None], rows_per_range: int,
               bounds: KeyRange = ALL_KEYS) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` rows within ``bounds``: ``key_at(after, n)`` is the key ``n`` places
    (0: the first) after ``after`` (None: from the start) and at or before ``bounds.through``, in key order,
    or None when there is none. Only the ranges' boundary keys leave the database: the index is skipped
    through where it lives. The last range ends where ``bounds`` does (open-ended when unbounded, so keys
    inserted later land somewhere)."""
    cuts: list[tuple[Any, ...]] = []
    while (key := key_at(cuts[-1] if cuts else bounds.after, rows_per_range - 1)) is not None:
        cuts.append(tuple(key))
    if cuts and key_at(cuts[-1], 0) is None:
        cuts.pop()  # the last full range reached the end: it takes the open end itself
    lowers: list[tuple[Any, ...] | None] = [bounds.after, *cuts]
    uppers: list[tuple[Any, ...] | None] = [*cuts, bounds.through]
    return tuple(KeyRange(lo, hi) for lo, hi in zip(lowers, uppers, strict=True))


def keyset_pages(fetch: Callable[[KeyRange], list[Any]], where: KeyRange, last_key: Callable[[Any], tuple[Any, ...]],
                 page: int) -> Iterator[list[Any]]:
    """The rows of key range ``where`` a page at a time, by keyset pagination, for every dialect:
    ``fetch(keys)`` reads at most ``page`` rows of ``keys`` in key order (MySQL and SQLite select the
    range with ``key_clause``, Oracle with ``oracle.bootstrap.selection_clause``), and ``last_key(row)``
    is a fetched row's key, the next page's lower bound. A short page is the last."""
    after = where.after
    while rows := fetch(KeyRange(after, where.through)):
        yield rows
        if len(rows) < page:
            return
        after = last_key(rows[-1])


def row_key(key_index: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A row's key, from the positions of the key columns in the row (``keyset_pages``'s ``last_key``)."""
    return lambda row: tuple(row[i] for i in key_index)


def key_clause(cols: str, marks: str, keys: KeyRange, predicate: str | None = None) -> tuple[str, list[Any]]:
    """"WHERE ... " (or "") selecting ``keys`` by row-value comparison, and ``predicate``; its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if keys.after is not None:
        clauses.append(f"({cols}) > ({marks})")
        params += keys.after
    if keys.through is not None:
        clauses.append(f"({cols}) <= ({marks})")
        params += keys.through
    if predicate is not None:
        clauses.append(f"({predicate})")
    return (f"WHERE {' AND '.join(clauses)} " if clauses else ""), params


@dataclass(frozen=True)
class RangeRead:
    """A table read in primary-key ranges, each range by its own task (a Spark task, in the spark engine),
    described by plain picklable data: the task opens its own connection from ``spec``.

    With ``scn`` set, every range reads the table at that one SCN (Oracle ``AS OF SCN``). Without it,
    each range reads in its own consistent snapshot at a position it reports (MariaDB, SQLite) and
    stamps on its rows as ``__scn``; the table's snapshot SCN is then the lowest of them, and replaying
    the log from there is exact because the MERGE applies an event only to a row older than it.
    """

    kind: str  # the source kind whose reader reads a range (``sources.read_range``)
    source: str
    schema: TableSchema
    spec: Mapping[str, Any] = field(repr=False)  # connection and query settings; may hold a password
    ranges: tuple[KeyRange, ...]
    scn: Scn | None
    where: str | None = None  # only rows matching this predicate (``RowSelection.where``)


@dataclass(frozen=True)
class SourceFingerprint:
    """A table's reconciliation fingerprint (``core.fingerprint``) read consistently at ``scn``. The SCN
    is known at once; the fingerprint is computed in the background (``fingerprint`` waits for it), so
    the snapshot's side can be computed meanwhile."""

    scn: Scn
    schema: TableSchema
    pending: Future[Fingerprint] = field(repr=False)
    pushed_down: bool  # True: computed by the database; False: its rows streamed through this process

    @property
    def fingerprint(self) -> Fingerprint:
        return self.pending.result()


def in_background(work: Callable[[], T]) -> Future[T]:
    """``work()`` run on its own thread; its result (or its exception) in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the result
            future.set_exception(exc)

    threading.Thread(target=run, name="databus-fingerprint", daemon=True).start()
    return future


def streamed_fingerprint(read: TableSnapshot, progress: Progress = quiet) -> SourceFingerprint:
    """The fingerprint of a consistent read, its rows hashed here batch by batch (bounded memory)."""
    from dagster_databus.core.fingerprint import fingerprint_batches

    def work() -> Fingerprint:
        ticker = Ticker(progress, f"{read.schema.table}: fingerprinting the source", "rows")
        fingerprint = fingerprint_batches(ticker.counted(read.batches, lambda b: b.num_rows), read.schema)
        ticker.finish()
        return fingerprint

    return SourceFingerprint(read.scn, read.schema, in_background(work), False)


def in_buckets(read: TableSnapshot, buckets: Iterable[int]) -> TableSnapshot:
    """The rows of a consistent read whose key falls in fingerprint ``buckets``."""
    from dagster_databus.core.fingerprint import buckets as bucket_of
    from dagster_databus.core.fingerprint import row_texts

    wanted = np.array(sorted(set(buckets)), np.int64)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in read.batches:
            key, _ = row_texts(batch, read.schema, columns=())
            mask = np.isin(bucket_of(key), wanted)
            if mask.any():
                yield batch.filter(pa.array(mask))

    return TableSnapshot(read.scn, read.schema, batches())


class CaptureSource(Protocol):
    kind: str
    name: str
    sees_ddl: bool  # True when DDL statements reach the poll (recorded in the DDL log)

    def preflight(self) -> Mapping[str, TableSchema]:
        """Check the database and the configured tables; raise before anything is written."""

    def install(self) -> InstallReport:
        """Create or update the capture objects, idempotently."""

    def verify(self) -> list[str]:
        """Problems with the installed capture objects, each naming the object; empty when healthy."""

    def installed(self) -> bool:
        """Whether install has run here (its capture objects exist, current or not)."""

    def require_installed(self) -> None:
        """Raise ``CaptureNotInstalledError`` listing ``verify()``'s problems; call before ``poll``."""

    def epoch(self) -> str:
        """The source lineage that positions belong to."""

    def high_water_mark(self) -> Scn:
        """The newest committed SCN the source has allocated."""

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        """Where a brand-new change log starts, with its checkpoint state."""

    def schemas(self) -> Mapping[str, TableSchema]:
        """Table schemas in effect for the chunk the poll yielded last (before polling: the current ones)."""

    def reading(self) -> AbstractContextManager[None]:
        """Held for a whole capture run: where the source itself cannot serve two readers (a binlog per
        replica server id), turns a second run away up front with ``ConcurrentRunError``."""

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[list[Window] | ChangeBatch]:
        """Whole windows after ``since`` up to a bound fixed when the poll starts, in chunks (as
        ``Window`` objects, or by column as a ``ChangeBatch``).

        Precondition: ``require_installed()`` passed.
        """

    def snapshot(self, table: str, batch_rows: int = 50_000) -> TableSnapshot:
        """A consistent, chunked read of one table at a known SCN, in this process (the local engine's
        bootstrap, reconciliation, tests)."""

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS) -> RangeRead:
        """The table (or the ``rows`` selected: ``check_selection`` first) cut into primary-key ranges of about
        ``rows_per_range`` rows, for tasks to read (``sources.read_range``) and write in parallel: the spark
        engine's bootstrap and on-demand snapshots."""

    def check_selection(self, table: str, rows: RowSelection) -> None:
        """Raise ``ConfigError`` naming the problem if the database cannot select ``rows`` of ``table`` (a bad
        predicate, key values of the wrong arity or type); reads no rows."""

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        """The table's reconciliation fingerprint at one SCN, computed by the database where it can, in the
        background once the SCN is fixed."""

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        """A consistent read of the table's rows in some fingerprint buckets (to compare one by one)."""

    def release(self, through: Scn) -> None:
        """The change log durably holds everything up to ``through``; the source may drop it."""
