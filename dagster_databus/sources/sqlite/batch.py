"""SQLite capture by column: a chunk of txlog rows becomes one ``ChangeBatch`` without per-event objects.

The chunk arrives as one row of joined columns (``sql/sqlite/poll_chunk.sql``): SQLite joins the
values in C, so no Python tuple or string exists per change. Windows, sequence numbers and keys are
computed over the whole chunk with numpy and Arrow. Each table's JSON row images are parsed
together by Arrow's JSON reader against the JSON shape the capture triggers write for the column's
type (``$r``-tagged text for REAL values, ``$b`` hex for BLOBs), so the common columns (INTEGER,
TEXT, REAL, BLOB, BOOLEAN) never pass through per-value Python. A table whose images do not parse
to that shape (a DECIMAL column holding both integers and reals, text in an INTEGER column, ...) or
a column type that needs a per-value conversion falls back to ``sqlite.types`` value by value, the
exact conversion and refusal the row path always used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from dagster_databus.core.batch import ChangeBatch, table_rows
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.sources.sqlite.scan import BLOB, ESCAPED, NULL, REAL, TEXT, Spans, scan
from dagster_databus.sources.sqlite.types import sqlite_value

# The JSON each trigger writes per column type (sources/sqlite/render.py, render_triggers): the fast shapes.
_REAL = pa.struct([("$r", pa.string())])
_BLOB = pa.struct([("$b", pa.string())])
_JSON_SHAPE: dict[str, pa.DataType] = {"long": pa.int64(), "boolean": pa.int64(), "string": pa.string(),
                                       "double": _REAL, "binary": _BLOB}
# Columns whose stored values are located by ``sqlite.scan`` and converted from their text.
_SCANNED = frozenset({"decimal", "date", "timestamp_ntz", "timestamp", "time"})
_OPS = pa.array(["i", "u", "d"])
_NEWLINE = pa.scalar("\n")


class _Fallback(Exception):
    """The table's images in this chunk need the value-by-value conversion."""


@dataclass(frozen=True, slots=True)
class TxlogChunk:
    """Txlog rows by column, in SCN order: what ``poll_chunk.sql`` returns as one row of joined values."""

    scns: np.ndarray  # int64
    windows: np.ndarray  # int64: the cut that ends each change's window (the first cut at or above it)
    tables: pa.Array  # string
    ops: pa.Array  # string: i, u, d, or m (a marker, not a change)
    images: pa.Array  # string: each change's row image as the trigger wrote it (JSON)
    commits: np.ndarray  # int64: the trigger's commit-time stamp (ms)
    # Rows whose image is not UTF-8 (text the application stored with other bytes), with the image's bytes; in
    # ``images`` such a row holds U+FFFD in their place. The poll refuses those of captured tables by name, unless
    # the text is in columns carried as bytes (``invalid_utf8: binary``): then the batch reads their own bytes.
    invalid: tuple[tuple[int, bytes], ...] = ()

    def __len__(self) -> int:
        return len(self.scns)

    @classmethod
    def parse(cls, row: Sequence[Any], cuts: np.ndarray) -> TxlogChunk | None:
        """One result row of ``poll_chunk.sql`` / ``poll_window_rest.sql``, its changes placed in windows by
        ``cuts`` (ascending, the last at or above every change); None for no changes. The images come as bytes
        (text that is not UTF-8 would fail the sqlite3 module's decoding, naming nothing) and are decoded here."""
        count, scns, tables, ops, images, commits = row
        if not count:
            return None
        invalid: tuple[tuple[int, bytes], ...] = ()
        if isinstance(images, bytes):
            images, invalid = _decoded(images)
        op_bytes = ops.encode()
        scn_values = joined_ints(scns)
        at = np.searchsorted(cuts, scn_values, side="left")
        if len(cuts) == 0 or at.max() >= len(cuts):
            raise ValueError(f"txlog changes up to SCN {scn_values.max()} lie beyond the poll's last cut "
                             f"{cuts[-1] if len(cuts) else 0}: the cuts must cover every change read")
        chunk = cls(scns=scn_values, windows=cuts[at], tables=_split(tables, ","),
                    ops=pa.StringArray.from_buffers(count, pa.py_buffer(np.arange(count + 1, dtype=np.int32)),
                                                    pa.py_buffer(op_bytes)),
                    images=_split(images, "\n"), commits=joined_ints(commits), invalid=invalid)
        lengths = {len(chunk.scns), len(chunk.tables), len(op_bytes), len(chunk.images), len(chunk.commits)}
        if lengths != {count}:
            raise ValueError(f"a txlog chunk of {count} rows split into columns of {sorted(lengths)} values: "
                             "a value holds a separator the capture triggers never write")
        if not np.all(np.diff(chunk.scns) > 0):
            # SQLite joined the rows out of SCN order: put every column in order.
            order = np.argsort(chunk.scns, kind="stable")
            at = np.empty_like(order)
            at[order] = np.arange(len(order))  # where each row went
            chunk = cls(chunk.scns[order], chunk.windows[order], chunk.tables.take(order), chunk.ops.take(order),
                        chunk.images.take(order), chunk.commits[order], tuple((int(at[i]), b) for i, b in invalid))
        return chunk

    def __add__(self, other: TxlogChunk) -> TxlogChunk:
        return TxlogChunk(np.concatenate([self.scns, other.scns]), np.concatenate([self.windows, other.windows]),
                          pa.concat_arrays([self.tables, other.tables]), pa.concat_arrays([self.ops, other.ops]),
                          pa.concat_arrays([self.images, other.images]),
                          np.concatenate([self.commits, other.commits]),
                          self.invalid + tuple((i + len(self), b) for i, b in other.invalid))


def chunk_batch(chunk: TxlogChunk, schemas: Mapping[str, TableSchema],
                decode_row: Callable[[str], dict[str, Any]]) -> ChangeBatch | None:
    """The changes of configured tables in a chunk of txlog rows (whole windows, in SCN order) as a change
    batch; None when none of them is a configured table's. The caller has refused changes in drift ranges.

    ``decode_row`` parses one row image (the value-by-value path's JSON decoder).
    """
    tables = chunk.tables
    keep = np.asarray(pc.is_in(tables, value_set=pa.array(list(schemas), pa.string())))
    keep &= np.asarray(pc.not_equal(chunk.ops, "m"))  # markers place a loss in the stream; they change nothing
    kept: np.ndarray | None = None
    if not keep.all():
        if not keep.any():
            return None
        kept = np.flatnonzero(keep)
    scns = chunk.scns if kept is None else chunk.scns[kept]
    windows = chunk.windows if kept is None else chunk.windows[kept]
    tables = tables if kept is None else tables.take(kept)
    ops = chunk.ops if kept is None else chunk.ops.take(kept)
    if not pc.all(pc.is_in(ops, value_set=_OPS)).as_py():
        bad = ops.filter(pc.invert(pc.is_in(ops, value_set=_OPS)))[0].as_py()
        raise ValueError(f"the txlog holds an operation {bad!r}; the capture triggers write only i, u and d")
    # A window is the changes up to one cut; its SCN is its last event's, and seq numbers its events from 0.
    count = len(scns)
    last_of_window = np.flatnonzero(np.append(windows[1:] != windows[:-1], True))
    starts = np.concatenate([[0], last_of_window[:-1] + 1])
    sizes = last_of_window - starts + 1
    window_scn = np.repeat(scns[last_of_window], sizes)
    seq = (np.arange(count) - np.repeat(starts, sizes)).astype(np.int32)
    images = chunk.images if kept is None else chunk.images.take(kept)
    commit = chunk.commits if kept is None else chunk.commits[kept]
    codes = tables.dictionary_encode()
    out = {}
    for code, table in enumerate(codes.dictionary.to_pylist()):
        at: Any = np.flatnonzero(np.asarray(codes.indices) == code)
        if len(at) == count:
            at = slice(None)  # the only table: every row, without copies
        schema = schemas[table]
        texts = images if isinstance(at, slice) else images.take(at)
        table_scns = scns[at]
        lenient = _lenient_images(chunk, kept, at, texts)
        if lenient is not None:  # text carried as bytes that is not UTF-8: by row, from the images' own bytes
            columns = _columns_by_row(schema, lenient, table_scns, decode_row)
        else:
            try:
                columns = _columns_by_json(schema, texts)
            except _Fallback:
                columns = _columns_by_row(schema, texts, table_scns, decode_row)
        out[table] = table_rows(
            schema, columns, scn=pa.array(table_scns, pa.int64()), window_scn=pa.array(window_scn[at], pa.int64()),
            seq=pa.array(seq[at], pa.int32()), op=ops if isinstance(at, slice) else ops.take(at),
            commit_ts_ms=pa.array(commit[at], pa.int64()),
            where=f"the change events of SCN {int(table_scns.min())} to {int(table_scns.max())}")
    return ChangeBatch(out)


def joined_ints(text: str | None) -> np.ndarray:
    """Integers SQLite joined with commas (group_concat), as int64; empty for none."""
    return np.array(text.split(","), dtype=np.int64) if text else np.zeros(0, np.int64)


def _decoded(images: bytes) -> tuple[str, tuple[tuple[int, bytes], ...]]:
    """The joined images as text, and the rows (by position) whose image is not UTF-8, with their bytes: those
    are decoded with U+FFFD in place of what is not UTF-8 (SQLite's JSON escapes newlines, so a newline
    separates images)."""
    try:
        return images.decode(), ()
    except UnicodeDecodeError:
        pass
    lines, invalid = images.split(b"\n"), []
    for i, line in enumerate(lines):
        try:
            line.decode()
        except UnicodeDecodeError:
            invalid.append((i, line))
    return images.decode("utf-8", "replace"), tuple(invalid)


def _split(text: str, separator: str) -> pa.Array:
    return pc.split_pattern(pa.array([text], pa.string()), separator).flatten()


def _columns_by_json(schema: TableSchema, texts: pa.Array) -> list[pa.Array]:
    """Every column of the images parsed at once; ``_Fallback`` when a value is not of the fast shape.

    Columns of one JSON type (INTEGER, TEXT, REAL, BLOB, BOOLEAN) go through Arrow's JSON reader;
    DECIMAL, date and time columns, whose stored values mix integers, reals and text, are located by
    ``sqlite.scan`` and converted from their text with Arrow.
    """
    columns = schema.columns
    if any((c.type.kind not in _JSON_SHAPE and c.type.kind not in _SCANNED) or c.type.as_text_in_delta
           for c in columns):
        raise _Fallback
    scanned = [i for i, c in enumerate(columns) if c.type.kind in _SCANNED]
    spans = None
    if scanned:
        spans = scan(texts, len(columns), scanned)
        if spans is None:
            raise _Fallback
    parsed = _read_json(texts, [c for c in columns if c.type.kind in _JSON_SHAPE], ignore_others=bool(scanned))
    out = []
    for i, column in enumerate(columns):
        if column.type.kind in _SCANNED:
            assert spans is not None
            out.append(_from_text(column, spans, scanned.index(i)))
        else:
            assert parsed is not None
            out.append(_convert(column, parsed.column(column.name).combine_chunks()))
    return out


def _read_json(texts: pa.Array, columns: Sequence[Column], ignore_others: bool) -> pa.Table | None:
    if not columns:
        return None
    shape = pa.schema([(c.name, _JSON_SHAPE[c.type.kind]) for c in columns])
    ndjson = pc.binary_join_element_wise(texts, _NEWLINE, "")  # one image per line
    offsets = np.frombuffer(ndjson.buffers()[1], np.int32, len(ndjson) + 1, ndjson.offset * 4)
    lines = ndjson.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        parsed = pj.read_json(pa.BufferReader(lines), parse_options=pj.ParseOptions(
            explicit_schema=shape, unexpected_field_behavior="ignore" if ignore_others else "error"),
            read_options=pj.ReadOptions(block_size=max(1 << 20, lines.size + 1)))
    except pa.ArrowInvalid:
        raise _Fallback from None
    if parsed.num_rows != len(texts):
        raise _Fallback
    return parsed


# Stored text each converter takes as it is: ASCII digits only, in the forms the row path reads
# (``sqlite.types``); anything else (whitespace, zone offsets, other digits) takes the row path.
_DATE = r"^\d{4}-\d{2}-\d{2}$"
_DATETIME = r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?$"
_DATETIME_UTC = r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?Z?$"
_TIME = r"^(?P<sign>-?)(?P<h>\d{2,3}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?)?$"


def _from_text(column: Column, spans: Spans, at: int) -> pa.Array:
    """A DECIMAL, date or time column from its values' stored text, as ``sqlite.types`` converts it value
    by value; ``_Fallback`` for anything that conversion would treat otherwise (or refuse)."""
    kinds, texts, kind = spans.kinds[at], spans.texts(at), column.type.kind
    try:
        if kind == "decimal":
            if np.any((kinds == BLOB) | (kinds == ESCAPED)):
                raise _Fallback
            reals = kinds == REAL
            if reals.any():
                # A REAL's decimal is the shortest text that reads back as the stored double (the row
                # path's repr); Arrow's text-to-double is correctly rounded and its double-to-text shortest.
                shortest = pc.cast(pc.cast(texts, pa.float64()), pa.string())
                texts = pc.if_else(pa.array(reals), shortest, texts)
            # Arrow refuses what would need rounding or more digits than the precision: the row path
            # then names the value.
            return pc.cast(texts, column.type.arrow())
        if np.any((kinds != NULL) & (kinds != TEXT)):
            raise _Fallback
        if kind == "time":
            return _times(texts)
        pattern = {"date": _DATE, "timestamp_ntz": _DATETIME, "timestamp": _DATETIME_UTC}[kind]
        if not pc.all(pc.match_substring_regex(texts, pattern)).as_py():
            raise _Fallback
        if kind == "date":
            return pc.cast(texts, pa.date32())
        naive = pc.cast(pc.replace_substring_regex(texts, "Z$", "") if kind == "timestamp" else texts,
                        pa.timestamp("us"))
        # A TIMESTAMP without an offset (or with Z) is UTC, as SQLite's date functions read it.
        return naive if kind == "timestamp_ntz" else naive.cast(column.type.arrow())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Fallback from None


def _times(texts: pa.Array) -> pa.Array:
    """``[-]HH[H]:MM[:SS[.ffffff]]`` as signed microseconds (the snapshot's form of a time)."""
    parts = pc.extract_regex(texts, _TIME)
    if parts.null_count != texts.null_count:
        raise _Fallback

    def field(name: str, empty: str = "0") -> pa.Array:  # a null row stays null; an absent group is ``empty``
        text = pc.struct_field(parts, name)
        return pc.if_else(pc.equal(text, ""), empty, text)

    hours, minutes, seconds = (pc.cast(field(name), pa.int64()) for name in ("h", "m", "s"))
    micros = pc.cast(pc.utf8_rpad(field("f"), 6, "0"), pa.int64())
    if pc.any(pc.greater(minutes, 59)).as_py() or pc.any(pc.greater(seconds, 59)).as_py():
        raise _Fallback  # the row path refuses it, naming the value
    span = pc.add(pc.multiply(pc.add(pc.multiply(pc.add(pc.multiply(hours, 60), minutes), 60), seconds), 1_000_000),
                  micros)
    return pc.if_else(pc.equal(pc.struct_field(parts, "sign"), "-"), pc.negate(span), span)


def _convert(column: Column, values: pa.Array) -> pa.Array:
    kind = column.type.kind
    if kind in ("long", "string"):
        return values
    if kind == "double":
        # Arrow's text-to-double is correctly rounded, as Python's float() the row path uses.
        return pc.cast(values.field("$r"), pa.float64())
    if kind == "binary":
        return pa.array([None if h is None else bytes.fromhex(h) for h in values.field("$b").to_pylist()],
                        pa.binary())
    if kind == "boolean":
        if not pc.all(pc.is_in(values.drop_null(), value_set=pa.array([0, 1]))).as_py():
            raise _Fallback  # the row path names the value it refuses
        return values.cast(pa.bool_())
    raise AssertionError(kind)


def _lenient_images(chunk: TxlogChunk, kept: np.ndarray | None, at: Any, texts: pa.Array) -> list[str] | None:
    """When some of a table's images in the chunk are not UTF-8 (the poll let them through: their text is in
    columns carried as bytes), all its images as text, those decoded with surrogate escapes, which the row path
    turns back into their exact bytes; None when every image is UTF-8."""
    if not chunk.invalid:
        return None
    rows = np.arange(len(chunk)) if kept is None else kept
    rows = rows[at]
    raw = dict(chunk.invalid)
    if not any(int(i) in raw for i in rows):
        return None
    return [raw[int(i)].decode("utf-8", "surrogateescape") if int(i) in raw else text
            for i, text in zip(rows, texts.to_pylist(), strict=True)]


def _columns_by_row(schema: TableSchema, texts: pa.Array | Sequence[str], scns: np.ndarray,
                    decode_row: Callable[[str], dict[str, Any]]) -> list[pa.Array]:
    """The row path's conversion, value by value (and its error, naming the change, for a value it refuses)."""
    convert = schema.converter(sqlite_value)
    images = texts.to_pylist() if isinstance(texts, pa.Array) else texts
    rows = [convert(decode_row(text), f"the change at SCN {scn}") for text, scn in zip(images, scns, strict=True)]
    return [c.type.to_arrow([r[c.name] for r in rows]) for c in schema.columns]

