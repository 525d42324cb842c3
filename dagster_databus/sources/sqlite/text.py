"""Text that is not UTF-8. SQLite stores whatever bytes it is given as TEXT (``CAST(x'ff' AS TEXT)``, a client
writing Latin-1), and the sqlite3 module fails to decode such a value with an error that names no table or key.
The triggers copy the bytes into their JSON row images unchanged (they check nothing, so the application's write
never fails), so the change road and the bootstrap road meet the same bytes; both refuse them here, naming the
table, column and key, or, under ``invalid_utf8: binary``, never decode them (their columns are carried as
bytes, ``types.carried_as_bytes``). ``databus validate`` looks for them first (``first_invalid_row``,
``first_invalid_change``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from typing import Any, TypeVar

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import SchemaMismatchError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.sqlite.types import carried_as_bytes

# Any character outside ASCII (or a byte SQLite's GLOB reads as one): only such text can be invalid UTF-8, and
# the pattern is cheaper than the Python check it spares every ASCII value.
NON_ASCII = "*[^" + chr(1) + "-" + chr(127) + "]*"
_DECODE_FAILED = "Could not decode to UTF-8"
_UDF = "databus_bad_utf8"
T = TypeVar("T")


def _bad_utf8(value: bytes | None) -> int:
    if value is None:
        return 0
    try:
        value.decode()
    except UnicodeDecodeError:
        return 1
    return 0


def _with_check(conn: sqlite3.Connection) -> sqlite3.Connection:
    conn.create_function(_UDF, 1, _bad_utf8, deterministic=True)
    return conn


def read_as_text(schema: TableSchema) -> list[Column]:
    """The columns whose text the sqlite3 module decodes: all but those carried as bytes (SQLite lets any column
    store text, whatever its declared type)."""
    return [c for c in schema.columns if not carried_as_bytes(c)]


def invalid_text_error(schema: TableSchema, column: Column, raw: bytes, where: str) -> SchemaMismatchError:
    """The refusal of ``raw`` (not UTF-8) in ``column``: table, column, value, ``where`` (the key), and the fix."""
    if column.name in schema.primary_key:
        fix = ("a key must be UTF-8 text: correct the key in the source (UPDATE {table} SET {column} = ... WHERE "
               "{column} = CAST(x'<its bytes in hex>' AS TEXT)), then run `databus bootstrap --source {source}` "
               "(a refused change stays in the txlog until then)")
    else:
        fix = ("correct the value in the source (UPDATE {table} SET {column} = ... for that key), then run `databus "
               "bootstrap --source {source}` (a refused change stays in the txlog until then)")
        if column.type.kind == "string":
            fix += ("; or, to carry such text byte for byte, set sources.{source}.invalid_utf8: binary: the text "
                    "columns outside the key are then captured as binary (docs/types.md), and the table is read again")
    return schema.value_error(column, raw, "it is not valid UTF-8 text", where, fix)


def shown_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """A key as an error shows it: text as text, bytes that are not UTF-8 as bytes."""
    out = []
    for value in values:
        if isinstance(value, bytes):
            with suppress(UnicodeDecodeError):
                value = value.decode()
        elif isinstance(value, str) and not _encodes(value):  # decoded leniently: its bytes
            value = value.encode("utf-8", "surrogateescape")
        out.append(value)
    return tuple(out)


def first_invalid_row(conn: sqlite3.Connection, schema: TableSchema) -> tuple[Column, tuple[Any, ...], bytes] | None:
    """The first row of the table (any order) whose text in a column read as text is not UTF-8: (column, key,
    the value's bytes); None when every such value is UTF-8. One scan of the table; only values with a byte
    beyond ASCII are checked in Python."""
    checked = read_as_text(schema)
    if not checked:
        return None
    key = ", ".join(f"CASE typeof({quote_ansi(k)}) WHEN 'text' THEN CAST({quote_ansi(k)} AS BLOB) "
                    f"ELSE {quote_ansi(k)} END" for k in schema.primary_key)
    values = ", ".join(f"CASE typeof({quote_ansi(c.name)}) WHEN 'text' THEN CAST({quote_ansi(c.name)} AS BLOB) END"
                       for c in checked)  # text as its bytes; NULL for other values (a BLOB may hold any bytes)
    invalid = " OR ".join(f"(typeof({quote_ansi(c.name)}) = 'text' AND {quote_ansi(c.name)} GLOB :non_ascii "
                          f"AND {_UDF}(CAST({quote_ansi(c.name)} AS BLOB)))" for c in checked)
    sql = sqlfiles.render("sqlite", "invalid_text.sql", table=quote_ansi(schema.table), key=key, values=values,
                          invalid=invalid)
    row = _with_check(conn).execute(sql, {"non_ascii": NON_ASCII}).fetchone()
    if row is None:
        return None
    keys, raws = row[:len(schema.primary_key)], row[len(schema.primary_key):]
    column, raw = next((c, r) for c, r in zip(checked, raws, strict=True) if _bad_utf8(r))
    return column, shown_key(keys), raw


def first_invalid_change(conn: sqlite3.Connection, tables: Sequence[str]) -> tuple[int, str, bytes] | None:
    """The first change of ``tables`` in the txlog whose row image is not UTF-8: (SCN, table, image bytes)."""
    row = _with_check(conn).execute(sqlfiles.load("sqlite", "invalid_txlog.sql"), {
        "tables": json.dumps(list(tables)), "non_ascii": NON_ASCII}).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), bytes(row[2]))


def text_notes(conn: sqlite3.Connection, schemas: Mapping[str, TableSchema], source: str) -> list[str]:
    """``validate``'s scan for text capture and the bootstrap would refuse: text that is not UTF-8 in the columns
    read as text (every captured table scanned once) and in the changes the txlog holds. Raises
    ``SchemaMismatchError`` naming each table, column and key; else says the text is valid."""
    refused: list[SchemaMismatchError] = []
    for schema in schemas.values():
        row = first_invalid_row(conn, schema)
        if row is not None:
            column, key, raw = row
            refused.append(invalid_text_error(schema, column, raw, f"the row of key {key}"))
    change = first_invalid_change(conn, list(schemas))
    if change is not None:
        error = change_error(schemas[change[1]], change[0], change[2])
        refused += [error] if error is not None else []
    if refused:
        raise SchemaMismatchError("; ".join(e.problem for e in refused), refused[0].fix, source=source)
    return [f"text is valid UTF-8 in the {len(schemas)} captured table(s) and in the txlog"]


def change_error(schema: TableSchema, scn: int, image: bytes) -> SchemaMismatchError | None:
    """The refusal of a change whose row image (JSON, as the trigger wrote it) holds text that is not UTF-8 in
    a column read as text; None when such text is only in columns carried as bytes (which take it exactly) or
    the image cannot be read as JSON."""
    try:
        row = json.loads(image.decode("utf-8", "surrogateescape"))
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    for column in read_as_text(schema):  # text carried as bytes may be anything
        value = row.get(column.name)
        if isinstance(value, str) and not _encodes(value):
            key = shown_key([row.get(k) for k in schema.primary_key])
            return invalid_text_error(schema, column, value.encode("utf-8", "surrogateescape"),
                                      f"the change at SCN {scn}, key {key}")
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def decode_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the sqlite3 module's failure to decode stored text as UTF-8."""
    return isinstance(exc, sqlite3.OperationalError) and _DECODE_FAILED in str(exc)


def named_invalid_text(batches: Iterator[T], schema: TableSchema, where: str,
                       connect: Callable[[], sqlite3.Connection]) -> Iterator[T]:
    """``batches`` of a read of ``schema``'s table; when the sqlite3 module fails to decode text in them, the
    refusal naming the table, column and key instead (found on a connection of its own: the read's is closed
    by then)."""
    try:
        yield from batches
    except sqlite3.OperationalError as exc:
        if not decode_failed(exc):
            raise
        with closing(connect()) as conn:
            found = first_invalid_row(conn, schema)
        if found is None:
            raise
        column, key, raw = found
        raise invalid_text_error(schema, column, raw, f"{where}, key {key}") from None


@contextmanager
def naming_invalid_text(conn: sqlite3.Connection, schema: TableSchema, where: str) -> Iterator[None]:
    """Around reads of ``schema``'s table: the sqlite3 module's decode failure becomes the refusal naming the
    table, column and key (found by ``first_invalid_row`` on the same connection)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if not decode_failed(exc):
            raise
        found = first_invalid_row(conn, schema)
        if found is None:
            raise
        column, key, raw = found
        raise invalid_text_error(schema, column, raw, f"{where}, key {key}") from None
