"""Table schemas: a table's columns with their product types (``core.types``) and key.

A ``TableSchema`` is what a source reports for a table. Its Avro form describes the rows of
that table's change events; versions are kept in the lake by ``log.schemas``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute

from dagster_databus.core.types import ColumnType
from dagster_databus.errors import NaNKeyError, NullKeyError, SchemaMismatchError, TypeValueError

# Metadata columns every snapshot carries beside the source's own columns. Delta's only
# timestamp type has microsecond precision, so commit times are stored that way.
META_COLUMNS: dict[str, pa.DataType] = {
    "__scn": pa.int64(),
    "__op": pa.string(),
    "__commit_ts": pa.timestamp("us", tz="UTC"),
}

VALUE_FIX = ("correct the value in the source, or give the column a type that holds it (docs/types.md lists how each "
             "declared type is captured), then re-run the install asset and `databus bootstrap --source {source}`")


# Row images (driver values by column name) and a "where" of each row's index → snapshot columns.
ColumnsConverter = Callable[[Sequence[Mapping[str, Any]], Callable[[int], str]], list[pa.Array]]


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColumnType
    source_type: str = ""  # the type as the source declares it (its catalog's column type)
    default: str | None = None  # the column's SQL default, as the source reports it


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Columns in source order; ``primary_key`` names a subset of them, in key order."""

    source: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def avro(self) -> dict[str, Any]:
        return {
            "type": "record",
            "name": self.table,
            "namespace": f"databus.{self.source}",
            "fields": [
                {"name": c.name, "type": ["null", c.type.avro()], "default": None} for c in self.columns
            ],
        }

    def arrow(self, with_meta: bool = True) -> pa.Schema:
        fields = [pa.field(c.name, c.type.arrow()) for c in self.columns]
        if with_meta:
            fields += [pa.field(name, typ) for name, typ in META_COLUMNS.items()]
        return pa.schema(fields)

    def fingerprint(self) -> str:
        body = json.dumps(
            # The declared type too: a change of it alone (a longer VARCHAR, fewer fractional seconds) is a new
            # version, from which ``sync.evolve`` tells what the change was.
            {"columns": [[c.name, str(c.type), c.source_type] for c in self.columns], "pk": list(self.primary_key)},
            sort_keys=True,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def value_error(self, column: Column, value: Any, reason: str, where: str,
                    fix: str = VALUE_FIX) -> SchemaMismatchError:
        """The error for a value ``column`` cannot hold: names source, table, column, value and the fix."""
        declared = f"declared {column.source_type}, " if column.source_type else ""
        shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:200] + "..."
        return SchemaMismatchError(
            f"source {self.source!r}, column {self.table}.{column.name} ({declared}captured as {column.type}) "
            f"cannot hold {type(value).__name__} value {shown}: {reason} ({where})",
            fix.format(source=self.source, table=self.table, column=column.name),
            source=self.source, table=self.table, column=column.name,
        )

    def converter(self, convert: Callable[[Column], Callable[[Any], Any]],
                  fix: str = VALUE_FIX) -> Callable[[Mapping[str, Any], str], dict[str, Any]]:
        """A row converter: each column's ``convert(column)`` (driver value → canonical value), then the type's
        check; a value that does not fit raises ``value_error`` saying ``where`` the row came from."""
        steps = [(c, convert(c), c.type.check) for c in self.columns]

        def row(values: Mapping[str, Any], where: str) -> dict[str, Any]:
            out = {}
            for column, to_value, check in steps:
                raw = values.get(column.name)
                try:
                    out[column.name] = None if raw is None else check(to_value(raw))
                except TypeValueError as exc:
                    raise self.value_error(column, raw, str(exc), where, fix) from None
            return out

        return row

    def column_converter(self, convert: Callable[[Column], Callable[[Any], Any]],
                         fix: str = VALUE_FIX) -> ColumnsConverter:
        """A converter of row images (driver values by column name) into this schema's snapshot columns,
        a column at a time; a value that does not fit raises ``value_error`` with ``where(row index)``."""
        steps = [(c, convert(c)) for c in self.columns]

        def columns(rows: Sequence[Mapping[str, Any]], where: Callable[[int], str]) -> list[pa.Array]:
            return [self.convert_column(column, to_value, [r.get(column.name) for r in rows], where, fix)
                    for column, to_value in steps]

        return columns

    def convert_column(self, column: Column, to_value: Callable[[Any], Any], raw: list[Any],
                       where: Callable[[int], str], fix: str = VALUE_FIX) -> pa.Array:
        """``raw`` values of ``column`` as its Arrow array: in one call where they are canonical already (or text
        its converter parses by column), else each converted and checked; the first value that does not fit
        raises ``value_error`` with ``where(its index)``."""
        fast = _as_is(column.type, to_value, raw)
        if fast is not None:
            return fast
        check = column.type.check
        try:
            values = [None if v is None else check(to_value(v)) for v in raw]
        except TypeValueError:
            for i, v in enumerate(raw):  # the first value that does not fit, named with its row
                try:
                    None if v is None else check(to_value(v))
                except TypeValueError as exc:
                    raise self.value_error(column, v, str(exc), where(i), fix) from None
            raise
        return column.type.to_arrow(values)

    def batch(self, convert: Callable[[Column], Callable[[Any], Any]], where: str,
              fix: str = VALUE_FIX) -> Callable[[list[tuple[Any, ...]]], pa.RecordBatch]:
        """A converter of fetched rows (tuples in column order) into one snapshot record batch."""
        steps = [(c, convert(c)) for c in self.columns]
        arrow = self.arrow(with_meta=False)

        def batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
            arrays = [self.convert_column(column, to_value, [r[i] for r in rows], lambda _: where, fix)
                      for i, (column, to_value) in enumerate(steps)]
            self.refuse_null_keys([arrays[self.column_names.index(k)] for k in self.primary_key], where)
            return pa.RecordBatch.from_arrays(arrays, schema=arrow)

        return batch

    def refuse_null_keys(self, keys: Sequence[pa.Array], where: str) -> None:
        """Raise ``NullKeyError`` when a key column holds NULL: such a row cannot be told from another with a
        NULL key (some databases' keys and UNIQUE keys allow several), so a snapshot keyed by it would fold them."""
        nulls = [name for name, array in zip(self.primary_key, keys, strict=True) if array.null_count]
        if not nulls:
            self._refuse_nan_keys(keys, where)
            return
        rows = int(sum(pa.compute.sum(array.is_null()).as_py() or 0 for array in keys if array.null_count))
        raise NullKeyError(
            f"source {self.source!r}, table {self.table!r}: key column(s) {', '.join(nulls)} hold NULL ({where}; "
            f"{rows} NULL value(s)): a NULL key identifies no row, and rows sharing it would be folded into one",
            f"give the rows a key (UPDATE ... SET {nulls[0]} = ... WHERE {nulls[0]} IS NULL) and declare the key "
            f"columns NOT NULL, or configure a key that is never NULL; then run `databus bootstrap --source "
            f"{self.source}` if capture stopped", source=self.source, table=self.table, columns=nulls)

    def _refuse_nan_keys(self, keys: Sequence[pa.Array], where: str) -> None:
        """Raise ``NaNKeyError`` when a float key column holds NaN: the source's ``=`` may call NaN equal to NaN
        where the lake's MERGE does not, so a snapshot keyed by it would hold the row again and again."""
        nans = [name for name, array in zip(self.primary_key, keys, strict=True)
                if pa.types.is_floating(array.type) and pa.compute.any(pa.compute.is_nan(array)).as_py()]
        if nans:
            raise NaNKeyError(
                f"source {self.source!r}, table {self.table!r}: key column(s) {', '.join(nans)} hold NaN ({where}): "
                "a NaN key matches no row in the lake, so the row could never be updated or deleted there",
                f"give the row a number as its key (UPDATE ... SET {nans[0]} = ... WHERE {nans[0]} = 'NaN'), or "
                "configure a key without floating-point columns; then run `databus bootstrap --source "
                f"{self.source}` if capture stopped", source=self.source, table=self.table, columns=nans)

    def rows_from_arrow(self, data: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
        """Snapshot rows with this schema's columns back as canonical values (what consumers receive);
        other columns (metadata, a shard column) as Arrow gives them."""
        types = {c.name: c.type for c in self.columns}
        names = data.schema.names
        columns = [types[n].from_arrow(data.column(n)) if n in types else data.column(n).to_pylist() for n in names]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def same(value: Any) -> Any:
    """The identity converter: the driver already hands over the canonical value (marks the fast path)."""
    return value


def passes_through(kind: type) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Marks a converter that returns any value of type ``kind`` unchanged, so a column holding only
    such values takes the fast path."""
    def mark(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
        convert.passes_through = kind  # type: ignore[attr-defined]
        return convert

    return mark


# Kinds whose canonical value is exactly one Python type that Arrow converts without loss, checking
# integer ranges itself: a column of them needs no per-value ``check``.
_PLAIN = {"byte": int, "short": int, "integer": int, "long": int, "double": float, "string": str}


def parse_texts(to_value: Callable[[Any], Any], texts: pa.Array) -> pa.Array | None:
    """Text values (an Arrow string array) parsed in one call by ``to_value.from_text``, a converter's by-column
    form (an Arrow cast that refuses what the type cannot hold); None where it has none or refuses one (then the
    per-value path converts, checks and names the value that does not fit)."""
    from_text = getattr(to_value, "from_text", None)
    if from_text is None:
        return None
    try:
        parsed: pa.Array = from_text(texts)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return parsed


def _as_is(column_type: ColumnType, to_value: Callable[[Any], Any], raw: list[Any]) -> pa.Array | None:
    """``raw`` as an Arrow array in one call when every value is already canonical; None otherwise
    (then the per-value path converts, checks and names the first value that does not fit)."""
    if getattr(to_value, "from_text", None) is not None:
        return parse_texts(to_value, pa.array(raw, pa.string()))
    expected = _PLAIN.get(column_type.kind)
    if expected is None or not (to_value is same or getattr(to_value, "passes_through", None) is expected):
        return None
    if not set(map(type, raw)) <= {expected, type(None)}:
        return None
    try:
        return pa.array(raw, column_type.arrow())
    except (pa.ArrowInvalid, OverflowError, UnicodeEncodeError):
        return None
