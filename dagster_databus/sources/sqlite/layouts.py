"""Capture version 4's row layouts (``render``): which columns of which table a txlog row's value columns hold,
stored by install, the txlog's value columns made as wide as the widest table, and the view
``_databus_images`` that reads every row as its JSON image."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.sqlite.render import layout_images, layout_of, split

VIEW = "_databus_images"


def layout(conn: sqlite3.Connection, schema: TableSchema, rowid_key: str | None, store: bool = False) -> int | None:
    """The id of the layout the table's triggers write for its columns now (``rowid_key``: its rowid alias,
    ``render.rowid_alias``); stored first when ``store`` (install, holding the write lock), else None when it
    never was."""
    params = {"tbl": schema.table, "spec": layout_of(schema, rowid_key)}
    if store:
        conn.execute(sqlfiles.load("sqlite", "store_layout.sql"), params)
    row = conn.execute(sqlfiles.load("sqlite", "layout_id.sql"), params).fetchone()
    return None if row is None else int(row[0])


def widen(conn: sqlite3.Connection, schemas: Sequence[TableSchema], source: str) -> None:
    """Give the txlog the value columns the widest of ``schemas`` needs (``v0`` .. ``v<n-1>``), and
    ``_databus_displaced`` those of the widest key, or refuse a table wider than this SQLite lets the txlog be."""
    widest = max(schemas, key=lambda s: len(s.columns), default=None)
    if widest is None:
        return
    have = {row[1] for row in conn.execute("PRAGMA table_info(_databus_txlog)")}
    own = sum(1 for name in have if not (name[:1] == "v" and name[1:].isdigit()))
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_COLUMN)
    if own + len(widest.columns) > limit:
        raise CaptureNotInstalledError(
            f"table {widest.table!r} of source {source!r} has {len(widest.columns)} columns: the txlog holds a "
            f"change's values in columns of its own, beside its {own}, and this SQLite allows a table {limit} "
            "columns (SQLITE_MAX_COLUMN)",
            f"leave {widest.table!r} out of sources.{source}.tables (or split it into narrower tables), or use a "
            "SQLite built with a larger SQLITE_MAX_COLUMN", source=source, table=widest.table)
    _add_values(conn, "_databus_txlog", have, len(widest.columns))
    keys = max(len(s.primary_key) for s in schemas)
    _add_values(conn, "_databus_displaced", {row[1] for row in conn.execute("PRAGMA table_info(_databus_displaced)")},
                keys)


def _add_values(conn: sqlite3.Connection, table: str, have: set[str], count: int) -> None:
    """Give ``table`` the value columns ``v0`` .. ``v<count-1>`` it lacks."""
    for i in range(count):
        if f"v{i}" not in have:
            conn.execute(sqlfiles.render("sqlite", "add_value_column.sql", table=table, column=quote_ansi(f"v{i}")))


def _view(conn: sqlite3.Connection) -> tuple[str, bool]:
    """``images_view.sql`` rendered for every stored layout, and whether the database has the view as it
    renders it."""
    rows: list[tuple[int, str]] = conn.execute("SELECT id, spec FROM _databus_layouts ORDER BY id").fetchall()
    branches = " ".join(layout_images(id_, spec) for id_, spec in rows)
    script = sqlfiles.render("sqlite", "images_view.sql", image=f"CASE row {branches} ELSE row END" if rows else "row")
    wanted = [s for s in split(script) if s.upper().startswith("CREATE VIEW")]
    found = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", (VIEW,)).fetchone()
    return script, found is not None and [(found[0] or "").strip()] == wanted


def view_current(conn: sqlite3.Connection) -> bool:
    """Whether the view exists as the stored layouts render it."""
    return _view(conn)[1]


def make_view(conn: sqlite3.Connection) -> None:
    """Create the view again when the stored layouts changed (an unchanged install changes nothing)."""
    script, current = _view(conn)
    if not current:
        for statement in split(script):
            conn.execute(statement)
