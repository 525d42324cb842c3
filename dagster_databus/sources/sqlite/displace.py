"""The rows a REPLACE conflict deletes: SQLite's INSERT OR REPLACE, REPLACE INTO and UPDATE OR REPLACE delete every
row that holds a value of another UNIQUE constraint the new row takes, and fire no delete trigger for it. A table
with such constraints gets displace triggers (``table_triggers_displace.sql``), rendered from the constraints
found here: each as its columns with the collation its index compares them under."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import TableSchema

ROWID = "rowid"  # the rowid of a table whose key is not its rowid alias: a REPLACE may take it too
# A constraint's mark for expression parts: an update of any column may change what they compute.
EXPRESSION = "*"
_ROWID_NAMES = {"rowid", "_rowid_", "oid"}
# A constraint: its columns (or ROWID) with the collation they conflict under.
Constraint = tuple[tuple[str, str], ...]


def displace_names(table: str) -> dict[str, str]:
    """The table's displace triggers, by their name in ``table_triggers_displace.sql``."""
    return {"trg_displace": f"_databus_{table}_displace", "trg_displace_update": f"_databus_{table}_displace_update"}


def displacing(conn: sqlite3.Connection, schema: TableSchema, rowid_key: str | None) -> tuple[Constraint, ...]:
    """The table's UNIQUE constraints through which a REPLACE may delete a row of another key: every unique index
    (the primary key's too) and the rowid, but the key's own when it compares bytes (a conflict there keeps the
    key). A partial index counts as if whole, and an index with expression parts by its plain columns (the
    triggers record a superset, and the AFTER trigger keeps only rows that are gone); one with no plain column
    cannot be matched and is left out."""
    table, key = schema.table, {k.lower() for k in schema.primary_key}
    found: list[Constraint] = []
    if rowid_key is not None and {rowid_key.lower()} != key:
        found.append(((rowid_key, "BINARY"),))
    listed = conn.execute("SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'", (table,)).fetchone()
    if rowid_key is None and listed is not None and not listed[0]:
        found.append(((ROWID, "BINARY"),))
    for index in conn.execute(f"PRAGMA index_list({quote_ansi(table)})").fetchall():
        if not index[2]:
            continue
        parts = [r for r in conn.execute(f"PRAGMA index_xinfo({quote_ansi(index[1])})") if r[5]]  # key parts
        columns = tuple((str(r[2]), str(r[4] or "BINARY")) for r in parts if r[1] >= 0)
        whole = not index[4] and len(columns) == len(parts)
        if not columns or (whole and {c.lower() for c, _ in columns} == key
                           and all(coll.upper() == "BINARY" for _, coll in columns)):
            continue
        if len(columns) < len(parts):
            columns = (*columns, (EXPRESSION, ""))
        if columns not in found:
            found.append(columns)
    return tuple(found)


def displace_values(schema: TableSchema, constraints: Sequence[Constraint], rowid_key: str | None) -> dict[str, str]:
    """The placeholders of ``table_triggers_displace.sql`` for ``constraints`` (SQL built from validated names);
    ``rowid_key`` names the table's rowid alias, if it has one."""
    key = [quote_ansi(k) for k in schema.primary_key]

    def ref(alias: str, column: str) -> str:
        return f"{alias}.{ROWID if column == ROWID else quote_ansi(column)}"

    # NULLs never conflict, and '=' never matches one.
    match = " OR ".join("(" + " AND ".join(f"{ref('cur', c)} = {ref('NEW', c)} COLLATE {quote_ansi(coll)}"
                                           for c, coll in constraint if c != EXPRESSION) + ")"
                        for constraint in constraints)
    # The key's columns too: an upsert's DO UPDATE that changes the key of the row the insert conflicted with must
    # forget what the insert recorded, or the AFTER UPDATE trigger would delete that row's old key a second time.
    # Under an index with expression parts, any column may feed them; a rowid alias is set by its other names too.
    taken = {c for constraint in constraints for c, _ in constraint}
    names = {quote_ansi(c) for c in (schema.column_names if EXPRESSION in taken else taken - {ROWID})} | set(key)
    if ROWID in taken or (rowid_key is not None and rowid_key in taken):
        names |= _ROWID_NAMES
    return {
        "match_new": match,
        "unique_names": ", ".join(sorted(names)),
        "cur_key": ", ".join(f"cur.{k}" for k in key),
        "cur_is_old": " AND ".join(f"cur.{k} IS OLD.{k} COLLATE BINARY" for k in key),
        # The column's own comparison finds the row by its index; the BINARY one keeps only the same bytes (under a
        # NOCASE key, 'A' in place of 'a' is another key of the snapshot).
        "cur_is_gone": " AND ".join(f"cur.{k} = gone.v{i} AND cur.{k} = gone.v{i} COLLATE BINARY"
                                    for i, k in enumerate(key)),
        "gone_is_old": " AND ".join(f"v{i} IS OLD.{k} COLLATE BINARY" for i, k in enumerate(key)),
    }



def unmatched_notes(conn: sqlite3.Connection, table: str) -> list[str]:
    """What ``databus validate`` says of ``table``'s unique indexes made of expressions alone: the displace triggers
    cannot compute them, so a REPLACE conflict through one deletes a row capture does not see."""
    notes = []
    for index in conn.execute(f"PRAGMA index_list({quote_ansi(table)})").fetchall():
        parts = [r for r in conn.execute(f"PRAGMA index_xinfo({quote_ansi(index[1])})") if r[5]]
        if index[2] and parts and all(r[1] < 0 for r in parts):
            notes.append(f"table {table!r}: unique index {index[1]!r} is made of expressions alone, so a row an "
                         "INSERT OR REPLACE, REPLACE INTO or UPDATE OR REPLACE deletes through it is not captured "
                         "(the snapshot keeps it until a bootstrap or refresh). Fix: have the application avoid "
                         "REPLACE on this table, or add the expression's column to the index")
    return notes
