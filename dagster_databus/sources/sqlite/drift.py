"""Schema drift of a SQLite source: tables whose columns are no longer those their triggers were rendered for
(``_databus_shapes``), or whose triggers went missing or moved with a renamed table.

Install, holding the write lock, finds them (``stale``), puts a marker row in the stream where the change
happened (the poll reports it as a DDL record), records the changes since the last check as a drift range
(old triggers may have written them without the new columns), and, where the table's ``schema_changes``
policy keeps capturing, writes repairs (``repair``: each touched key's current row in the new shape).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster_databus.core.identifiers import quote_ansi, quote_literal
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import SchemaDriftError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.sqlite.database import high_water_mark, settings
from dagster_databus.sources.sqlite.render import NOW_MS, image, rowid_alias, split, tagged_affinity, trigger_homes
from dagster_databus.sources.sqlite.render import trigger_names as names_of
from dagster_databus.sources.sqlite.types import carried_as_bytes


@dataclass(frozen=True, slots=True)
class Stale:
    """Why a captured table's triggers no longer match it: ``columns`` changed, triggers ``missing`` (dropped
    with the table), or ``moved`` with the table when it was renamed (to ``moved_to``) and created again."""

    reason: str  # columns | missing | moved
    now: list[list[Any]]  # the table's columns now (``shape``)
    moved_to: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """A captured table's columns (or triggers) found changed by install: stale changes in (after, through]."""

    table: str
    after: int
    through: int
    reason: str  # columns | triggers
    before: list[list[Any]]  # the shape the old triggers were rendered for


def stale(conn: sqlite3.Connection, schemas: Mapping[str, TableSchema],
          shapes: Mapping[str, Any]) -> dict[str, Stale]:
    """The captured tables whose triggers are attached to another table (it was renamed, and a table of its
    name created again: the triggers moved with the renamed one), missing (dropped with the table), or
    whose columns are not those (``shapes``) the triggers were rendered for (a table without a recorded
    shape counts as changed)."""
    homes = trigger_homes(conn)
    found = {}
    for table, schema in schemas.items():
        now = shape(conn, table, carried(schema))
        names = names_of(table).values()
        elsewhere = sorted({homes[n] for n in names if n in homes and homes[n].lower() != table.lower()})
        if elsewhere:
            found[table] = Stale("moved", now, elsewhere[0])
        elif any(name not in homes for name in names):
            found[table] = Stale("missing", now)
        elif table not in shapes or _names_and_types(shapes[table]) != _names_and_types(now):
            found[table] = Stale("columns", now)
    return found


def note_changes(conn: sqlite3.Connection, schemas: Mapping[str, TableSchema]) -> list[Change]:
    """Holding the write lock (install, before it renders triggers): for each captured table whose columns
    differ from those its triggers were rendered for, or whose triggers are missing or attached to another
    table (renamed away), a marker row placing the change in the stream and a drift range over the changes
    since the last check, which old triggers may have written wrong (or, triggers missing, not at all; or,
    moved, for the other table: those are dropped). The check moves to the newest SCN."""
    checked = int(settings(conn).get("checked_scn", "0"))
    before = shapes(conn)
    hwm = high_water_mark(conn).value
    changes = []
    for table, found in stale(conn, schemas, before).items():
        if table not in before:
            continue  # never captured here: nothing to compare with
        reason = "columns" if found.reason == "columns" else "triggers"
        statement = _describe_stale(table, found, before[table], checked)
        marker = conn.execute(sqlfiles.load("sqlite", "mark_change.sql"), {
            "tbl": table, "change": json.dumps({"statement": statement, "reason": reason})}).fetchone()[0]
        if found.reason == "moved":
            # The changes logged under the table's name since the last check may be the renamed table's:
            # none of them may reach this table's snapshot (it is read again instead).
            conn.execute(sqlfiles.load("sqlite", "drop_moved.sql"),
                         {"tbl": table, "after_scn": checked, "marker_scn": marker})
        conn.execute(sqlfiles.load("sqlite", "record_drift.sql"), {
            "tbl": table, "after_scn": checked, "through_scn": marker, "columns": json.dumps(found.now),
            "reason": reason})
        changes.append(Change(table, checked, hwm, reason, before[table]))
    conn.execute(sqlfiles.load("sqlite", "set_checked.sql"), {"scn": hwm})
    return changes


def repair(conn: sqlite3.Connection, schema: TableSchema, change: Change) -> bool:
    """After new triggers: each key the changes in the drift range touched, written again as the table
    holds it now (``repair_rows.sql``). False when the key cannot be matched in the old images (a key
    column renamed, or one whose images tag its values): the table must then be read again."""
    old_names = {c[0] for c in change.before}
    if any(k not in old_names or tagged_affinity(schema.column(k).source_type) for k in schema.primary_key):
        return False
    script = sqlfiles.render(
        "sqlite", "repair_rows.sql", table=quote_ansi(schema.table), table_literal=quote_literal(schema.table),
        image=image("cur", schema.columns, rowid_alias(conn, schema.table)), now_ms=NOW_MS,
        key=", ".join(f"cur.{quote_ansi(k)} COLLATE BINARY" for k in schema.primary_key),
        extracted=", ".join(f"json_extract(row, '$.{k}')" for k in schema.primary_key),
        extracted_t=", ".join(f"json_extract(t.row, '$.{k}')" for k in schema.primary_key))
    for statement in split(script):
        conn.execute(statement, {"after_scn": change.after, "through_scn": change.through})
    return True


def note_unrepaired(conn: sqlite3.Connection, change: Change) -> None:
    """The marker says the stale changes were not repaired, so the schema_changes policy reads the table again."""
    conn.execute(sqlfiles.load("sqlite", "mark_unrepaired.sql"), {"tbl": change.table, "after_scn": change.after})


def moved_problem(table: str, moved_to: str) -> str:
    return (f"table {table}: its capture triggers are attached to table {moved_to}: {table} was renamed to "
            f"{moved_to!r} and created again, and changes of {moved_to} are logged as {table}'s. Install moves the "
            f"triggers back to {table}, drops what they logged since the last check, and the table's schema_changes "
            "policy has it read again (or stops)")


def stale_error(source: str, table: str, scn: int, reason: str, statement: str | None = None) -> SchemaDriftError:
    """The refusal of a stale change of a table whose ``schema_changes`` policy is ``stop``."""
    problem = (f"table {table!r} of source {source!r} changed its columns while its capture triggers "
               f"still had the old ones: the change at SCN {scn} (and any after it until the triggers were "
               "re-installed) may lack the new columns" if reason == "columns" else
               f"the capture triggers of table {table!r} of source {source!r} were missing until install "
               f"put them back (SCN {scn}): the table's changes meanwhile never reached the txlog")
    if reason == "triggers" and statement and statement.startswith("RENAME TABLE"):
        problem += f" ({statement})"
    return SchemaDriftError(
        problem,
        f"re-install capture (materialize '{source}/capture'), then run "
        f"`databus bootstrap --source {source}` so the snapshots are read afresh from the source",
        source=source, table=table, scn=scn,
    )


def shapes(conn: sqlite3.Connection) -> dict[str, list[list[Any]]]:
    """Each table's columns as its triggers were last rendered for them (``shape``), from ``_databus_shapes``."""
    rows: list[tuple[str, str]] = conn.execute("SELECT tbl, columns FROM _databus_shapes").fetchall()
    return {t: json.loads(c) for t, c in rows}


def shape(conn: sqlite3.Connection, table: str, carried: frozenset[str] = frozenset()) -> list[list[Any]]:
    """The table's columns as [name, declared type, not null, default] in column order: what its triggers
    depend on (name and type) and what an added column gives existing rows; a column ``carried`` as bytes
    (``invalid_utf8: binary``) has a fifth entry, "bytes", since its triggers and its type differ."""
    return [[row[1], row[2] or "", row[3], row[4], *(["bytes"] if row[1] in carried else [])]
            for row in conn.execute(f"PRAGMA table_info({quote_ansi(table)})")]


def carried(schema: TableSchema) -> frozenset[str]:
    """The columns carried as bytes (``invalid_utf8: binary``)."""
    return frozenset(c.name for c in schema.columns if carried_as_bytes(c))


def _describe_stale(table: str, found: Stale, before: Sequence[Sequence[Any]], checked: int) -> str:
    """The marker's statement for a stale table: what a DDL record holds and ``sync.evolve`` reads (a rename
    or missing triggers are never evolved in place: the table is read again)."""
    if found.reason == "moved":
        return (f"RENAME TABLE {table} TO {found.moved_to}: {table} was renamed to {found.moved_to!r} and created "
                f"again; the capture triggers of {table} were missing from the new table (they had moved with "
                f"{found.moved_to}), so its changes were never captured, and the changes logged for {table} after "
                f"SCN {checked}, which may be {found.moved_to}'s, were dropped")
    if found.reason == "missing":
        return f"capture triggers of {table} were missing: changes made meanwhile were never captured"
    return _describe_change(table, before, found.now)


def _names_and_types(shape: Sequence[Sequence[Any]]) -> list[tuple[str, str, str]]:
    return [(c[0], c[1], _carried_form(c)) for c in shape]


def _carried_form(column: Sequence[Any]) -> str:
    """How a shape's column travels: "bytes" for text carried as binary (``invalid_utf8: binary``), else ""."""
    return str(column[4]) if len(column) > 4 else ""


def _describe_change(table: str, before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> str:
    """The change as the ALTER statements that make ``after`` of ``before`` (SQLite reports no DDL): what a
    DDL record holds and ``sync.evolve`` reads."""
    parts = []
    for i in range(max(len(before), len(after))):
        old, new = (before[i] if i < len(before) else None), (after[i] if i < len(after) else None)
        if old is not None and new is not None and old[0] != new[0]:
            parts.append(f"RENAME COLUMN {old[0]} TO {new[0]}")
        elif old is not None and new is not None and old[1] != new[1]:
            parts.append(f"CHANGE COLUMN {old[0]} {old[1]} TO {new[1]}")
        elif old is not None and new is not None and _carried_form(old) != _carried_form(new):
            form = "BINARY" if _carried_form(new) else "TEXT"  # invalid_utf8 changed: the values' type did
            parts.append(f"CHANGE COLUMN {old[0]} {old[1]} TO {new[1]} CARRIED AS {form}")
        elif new is None and old is not None:
            parts.append(f"DROP COLUMN {old[0]}")
        elif old is None and new is not None:
            extra = (" NOT NULL" if len(new) > 2 and new[2] else "") + (
                f" DEFAULT {new[3]}" if len(new) > 3 and new[3] is not None and str(new[3]).upper() != "NULL" else "")
            parts.append(f"ADD COLUMN {new[0]} {new[1]}{extra}")
    return f"ALTER TABLE {table} " + ", ".join(parts)
