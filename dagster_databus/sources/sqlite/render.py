"""The capture triggers of a SQLite source: their names, the script rendered for a table (``table_triggers.sql``),
the row layouts they write, the JSON row images the poll reads, and where the database has them now.

Capture version 4: the triggers do nothing but write one txlog row per change, holding the row's values as
they are in the value columns ``v0``, ``v1``, ... (no function call on the application's write) and, in
``row``, the marker of the layout that names them (``#<id>`` the row, ``#<id>k`` its key: ``layouts``). The
view ``_databus_images`` turns each row into the JSON image version 3's triggers wrote themselves, which is
what the poll reads, so a version 3 txlog's JSON rows (``row`` holds the image) are read as they are. In an
image a BLOB travels as ``{"$b": hex}`` (JSON cannot hold one) and a REAL as ``{"$r": exact text}`` where the
column's affinity can store one (SQLite's JSON keeps 15 digits).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from dagster_databus.core.identifiers import quote_ansi, quote_literal
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.sqlite.displace import Constraint, displace_names, displace_values
from dagster_databus.sources.sqlite.types import carried_as_bytes

NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_TEXT_AFFINITY = ("CHAR", "CLOB", "TEXT")
# SQLite's default limit of a function's arguments is 127 (3.48 raised it): json_object takes 63 columns.
_PAIRS = 63


def trigger_names(table: str) -> dict[str, str]:
    """The table's four capture triggers, by their name in ``table_triggers.sql``."""
    return {f"trg_{kind}": f"_databus_{table}_{kind}" for kind in ("insert", "update", "rekey", "delete")}


def layout_of(schema: TableSchema, rowid_key: str | None) -> str:
    """The layout the table's triggers write (JSON): each column's name and how its image carries it
    (``value_kind``), and the key's columns by position. Stored in ``_databus_layouts``; the view renders
    images from it alone."""
    columns = [[c.name, value_kind(c, rowid_key)] for c in schema.columns]
    key = [schema.column_names.index(k) for k in schema.primary_key]
    return json.dumps({"columns": columns, "key": key}, separators=(",", ":"))


def value_kind(column: Column, rowid_key: str | None) -> str:
    """How an image carries the column's values: ``rowid`` (always an integer: as it is), ``bytes`` (text too
    as hex, so bytes that are not UTF-8 arrive exactly), ``real`` (a REAL as exact text; a BLOB as hex) or
    ``plain`` (a BLOB as hex)."""
    if column.name == rowid_key:
        return "rowid"
    if carried_as_bytes(column):
        return "bytes"
    return "real" if tagged_affinity(column.source_type) else "plain"


def render_triggers(schema: TableSchema, rowid_key: str | None, layout: int,
                    constraints: Sequence[Constraint] = ()) -> str:
    """The table's triggers writing layout ``layout``; ``rowid_key`` names its INTEGER PRIMARY KEY rowid
    alias, if it has one; ``constraints`` its UNIQUE constraints a REPLACE may delete rows through
    (``displace.displacing``), which add the displace triggers."""
    # Binary-exact: under the column's own collation (NOCASE, RTRIM, ...) 'a' and 'A' may be equal, but the
    # snapshot's keys are the stored values, so a change of case is a new key (a delete and an insert).
    unchanged = " AND ".join(f"OLD.{quote_ansi(k)} IS NEW.{quote_ansi(k)} COLLATE BINARY"
                             for k in schema.primary_key)
    names = {k: quote_ansi(v) for k, v in (trigger_names(schema.table) | displace_names(schema.table)).items()}
    extra = displace_values(schema, constraints, rowid_key) if constraints else {}
    script = "table_triggers_displace.sql" if constraints else "table_triggers.sql"
    return sqlfiles.render(
        "sqlite", script, table=quote_ansi(schema.table),
        table_literal=quote_literal(schema.table), row_marker=marker(layout),
        key_marker=marker(layout, key=True), row_slots=slots(len(schema.columns)),
        key_slots=slots(len(schema.primary_key)),
        new_row=", ".join(f"NEW.{quote_ansi(c.name)}" for c in schema.columns),
        old_key=", ".join(f"OLD.{quote_ansi(k)}" for k in schema.primary_key),
        key_names=", ".join([*(quote_ansi(k) for k in schema.primary_key),
                             *(("rowid", "_rowid_", "oid") if rowid_key is not None else ())]),
        key_unchanged=unchanged, now_ms=NOW_MS, **names, **extra,
    )


def slots(n: int) -> str:
    """The txlog's first ``n`` value columns."""
    return ", ".join(f"v{i}" for i in range(n))


def wanted_triggers(schema: TableSchema, rowid_key: str | None, layout: int | None,
                    constraints: Sequence[Constraint] = ()) -> tuple[str, set[str]]:
    """The table's trigger script for ``layout`` and the CREATE TRIGGER statements in it (none without a
    layout: the table's layout was never stored, so no trigger can be current)."""
    if layout is None:
        return "", set()
    script = render_triggers(schema, rowid_key, layout, constraints)
    return script, {stmt for stmt in split(script) if stmt.upper().startswith("CREATE TRIGGER")}


def image(alias: str, columns: Sequence[Column], rowid_key: str | None) -> str:
    """The JSON image of ``columns`` read through ``alias`` (a table's own row: drift repairs)."""
    return json_image([(c.name, f"{alias}.{quote_ansi(c.name)}", value_kind(c, rowid_key)) for c in columns])


def layout_images(layout: int, spec: str) -> str:
    """The view's CASE branches for a stored layout: its row image and its key image, from the value columns."""
    parsed = json.loads(spec)
    columns = [(str(name), f"v{i}", str(kind)) for i, (name, kind) in enumerate(parsed["columns"])]
    key = [(columns[at][0], f"v{i}", columns[at][2]) for i, at in enumerate(parsed["key"])]
    return (f"WHEN {marker(layout)} THEN {json_image(columns)} "
            f"WHEN {marker(layout, key=True)} THEN {json_image(key)}")


def marker(layout: int, key: bool = False) -> str:
    """The SQL literal a row of ``layout`` holds in ``row``: ``'#<id>'`` for the row, ``'#<id>k'`` for its key
    (never the start of a JSON image, which is an object)."""
    return f"'#{int(layout)}{'k' if key else ''}'"


def json_image(values: Sequence[tuple[str, str, str]]) -> str:
    """A JSON object of (name, SQL expression, ``value_kind``) triples, in order, as version 3's triggers wrote
    it: ``json_object``, or, past its argument limit, several objects joined as text."""
    pairs = [f"{quote_literal(name)}, {_image_value(ref, kind)}" for name, ref, kind in values]
    objects = [f"json_object({', '.join(pairs[i:i + _PAIRS])})" for i in range(0, len(pairs), _PAIRS)]
    if len(objects) <= 1:
        return objects[0] if objects else "json_object()"
    # '{"a":1' || ',' || '"b":2' || ',' || '"c":3}': each object without the braces it shares with the others
    inner = [f"substr({o}, 1, length({o}) - 1)" if i == 0 else
             f"substr({o}, 2)" if i == len(objects) - 1 else f"substr({o}, 2, length({o}) - 2)"
             for i, o in enumerate(objects)]
    joined = " || ',' || ".join(inner)
    return f"({joined})"


def _image_value(ref: str, kind: str) -> str:
    """A value in an image: as it is, but a BLOB as {"$b": hex} (JSON cannot hold one) and, by ``kind``, a REAL
    as {"$r": exact text} or text too as {"$b": hex}."""
    if kind == "rowid":  # always an integer: SQLite refuses anything else
        return ref
    blob = f"WHEN 'blob' THEN json_object('$b', hex({ref}))"
    if kind == "bytes":  # text too, so bytes that are not UTF-8 arrive exactly
        blob = f"WHEN 'blob' THEN json_object('$b', hex({ref})) WHEN 'text' THEN json_object('$b', hex({ref}))"
    if kind != "real":
        return f"CASE typeof({ref}) {blob} ELSE {ref} END"
    real = f"WHEN 'real' THEN json_object('$r', printf('%!.20e', {ref}))"
    return f"CASE typeof({ref}) {blob} {real} ELSE {ref} END"


def tagged_affinity(declared: str) -> bool:
    """Whether the images tag this column's REALs: not for TEXT affinity (stores no REAL), nor INTEGER (stores
    one only if it is not a whole number, which a long column refuses whatever its digits)."""
    upper = declared.upper()
    return "INT" not in upper and not any(a in upper for a in _TEXT_AFFINITY)


def rowid_alias(conn: sqlite3.Connection, table: str) -> str | None:
    """The table's INTEGER PRIMARY KEY column when it is the rowid (which only ever holds an integer). Not a
    column declared ``INTEGER PRIMARY KEY DESC``: SQLite's quirk makes that an ordinary column, which may hold any
    value, with an index of its own (origin ``pk``), which a rowid alias never has."""
    keys = [row for row in conn.execute(f"PRAGMA table_info({quote_ansi(table)})") if row[5]]
    listed = conn.execute("SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'", (table,)).fetchone()
    indexed = any(row[3] == "pk" for row in conn.execute(f"PRAGMA index_list({quote_ansi(table)})"))
    if (len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" and listed is not None and not listed[0]
            and not indexed):
        return str(keys[0][1])
    return None


def trigger_sql(conn: sqlite3.Connection) -> dict[str, str]:
    """Every trigger of the database by name, with its CREATE statement as SQLite keeps it."""
    rows: list[tuple[str, str | None]] = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return {name: (sql or "").strip() for name, sql in rows}


def found_triggers(table: str, existing: dict[str, str]) -> set[str | None]:
    """The CREATE statements of the table's capture triggers in ``existing`` (``trigger_sql``), to compare with
    ``wanted_triggers``: each of the four (None for one that is missing), and the displace triggers it has."""
    return ({existing.get(name) for name in trigger_names(table).values()}
            | {existing[name] for name in displace_names(table).values() if name in existing})


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
