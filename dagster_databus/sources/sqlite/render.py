"""The capture triggers of a SQLite source: their names, the script rendered for a table (``table_triggers.sql``),
the JSON row images they write, and where the database has them now.

The triggers do nothing but write one txlog row per change, with the row image. A BLOB travels as
``{"$b": hex}`` (JSON cannot hold one, and the application's write must not fail) and a REAL as ``{"$r": exact
text}`` where the column's affinity can store one (SQLite's JSON keeps 15 digits).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dagster_databus.core.identifiers import quote_literal, quote_sqlite
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.sqlite.types import carried_as_bytes

NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_TEXT_AFFINITY = ("CHAR", "CLOB", "TEXT")


def trigger_names(table: str) -> dict[str, str]:
    """The table's four capture triggers, by their name in ``table_triggers.sql``."""
    return {f"trg_{kind}": f"_databus_{table}_{kind}" for kind in ("insert", "update", "rekey", "delete")}


def render_triggers(schema: TableSchema, rowid_key: str | None) -> str:
    """The table's triggers; ``rowid_key`` names its INTEGER PRIMARY KEY rowid alias, if it has one."""
    key = [schema.column(k) for k in schema.primary_key]
    # Binary-exact: under the column's own collation (NOCASE, RTRIM, ...) 'a' and 'A' may be equal, but the
    # snapshot's keys are the stored values, so a change of case is a new key (a delete and an insert).
    unchanged = " AND ".join(f"OLD.{quote_sqlite(k)} IS NEW.{quote_sqlite(k)} COLLATE BINARY"
                             for k in schema.primary_key)
    names = {k: quote_sqlite(v) for k, v in trigger_names(schema.table).items()}
    return sqlfiles.render(
        "sqlite", "table_triggers.sql", table=quote_sqlite(schema.table),
        table_literal=quote_literal(schema.table), new_row=image("NEW", schema.columns, rowid_key),
        old_key=image("OLD", key, rowid_key),
        key_names=", ".join([*(quote_sqlite(k) for k in schema.primary_key),
                             *(("rowid", "_rowid_", "oid") if rowid_key is not None else ())]),
        key_unchanged=unchanged, now_ms=NOW_MS, **names,
    )


def wanted_triggers(conn: sqlite3.Connection, schema: TableSchema) -> tuple[str, set[str]]:
    """The table's trigger script and the CREATE TRIGGER statements in it."""
    script = render_triggers(schema, rowid_alias(conn, schema.table))
    return script, {stmt for stmt in split(script) if stmt.upper().startswith("CREATE TRIGGER")}


def image(alias: str, columns: Sequence[Column], rowid_key: str | None) -> str:
    """The arguments of ``json_object`` for a row image of ``columns`` (``_image_value`` each)."""
    return ", ".join(f"{quote_literal(c.name)}, {_image_value(alias, c, rowid_key)}" for c in columns)


def _image_value(alias: str, column: Column, rowid_key: str | None) -> str:
    """The column's value in a row image: as it is, but a BLOB as {"$b": hex} (JSON cannot hold one, and the
    application's write must not fail) and a REAL as {"$r": exact text} where the affinity can store one."""
    ref = f"{alias}.{quote_sqlite(column.name)}"
    if column.name == rowid_key:  # always an integer: SQLite refuses anything else
        return ref
    blob = f"WHEN 'blob' THEN json_object('$b', hex({ref}))"
    if carried_as_bytes(column):  # text too, so bytes that are not UTF-8 arrive exactly
        blob = f"WHEN 'blob' THEN json_object('$b', hex({ref})) WHEN 'text' THEN json_object('$b', hex({ref}))"
    if not tagged_affinity(column.source_type):
        return f"CASE typeof({ref}) {blob} ELSE {ref} END"
    real = f"WHEN 'real' THEN json_object('$r', printf('%!.20e', {ref}))"
    return f"CASE typeof({ref}) {blob} {real} ELSE {ref} END"


def tagged_affinity(declared: str) -> bool:
    """Whether the images tag this column's REALs: not for TEXT affinity (stores no REAL), nor INTEGER (stores
    one only if it is not a whole number, which a long column refuses whatever its digits)."""
    upper = declared.upper()
    return "INT" not in upper and not any(a in upper for a in _TEXT_AFFINITY)


def rowid_alias(conn: sqlite3.Connection, table: str) -> str | None:
    """The table's INTEGER PRIMARY KEY column when it is the rowid (which only ever holds an integer)."""
    keys = [row for row in conn.execute(f"PRAGMA table_info({quote_sqlite(table)})") if row[5]]
    listed = conn.execute("SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'", (table,)).fetchone()
    if len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" and listed is not None and not listed[0]:
        return str(keys[0][1])
    return None


def trigger_sql(conn: sqlite3.Connection) -> dict[str, str]:
    """Every trigger of the database by name, with its CREATE statement as SQLite keeps it."""
    rows: list[tuple[str, str | None]] = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return {name: (sql or "").strip() for name, sql in rows}


def trigger_homes(conn: sqlite3.Connection) -> dict[str, str]:
    """Each trigger's name with the table it is attached to (a rename of the table takes its triggers along)."""
    rows: list[tuple[str, str]] = conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"
                                               ).fetchall()
    return dict(rows)


def split(script: str) -> list[str]:
    """Statements of a script, keeping trigger bodies (which contain ';') whole."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip().rstrip(";").strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
