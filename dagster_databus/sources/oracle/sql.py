"""Oracle SQL handling: splitting SQL*Plus-style scripts, rendering per-table templates with
validated, quoted identifiers, and building Databus for Oracle's poll queries."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dagster_databus.core.identifiers import is_plain_name, quote_literal
from dagster_databus.sources import sqlfiles

ORACLE_MAX_IDENTIFIER = 128
CORE_SCRIPTS = ("install/01_core_tables.sql", "install/02_sync_core.sql", "install/03_sync_alert.sql",
                "install/04_jobs.sql")
TABLE_SCRIPTS = ("table/01_txn_column.sql", "table/02_txn_index.sql", "table/03_delete_shadow.sql",
                 "table/04_triggers.sql", "table/05_view.sql")
_PLSQL_START = re.compile(
    r"^\s*(CREATE\s+(OR\s+REPLACE\s+)?(PACKAGE|TRIGGER|PROCEDURE|FUNCTION|TYPE)\b|BEGIN\b|DECLARE\b)", re.IGNORECASE)
_OBJECT = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FORCE\s+)?(TABLE|SEQUENCE|INDEX|VIEW|TRIGGER|PACKAGE\s+BODY|PACKAGE)\s+"
    r"(\"[^\"]+\"|[\w$#]+)", re.IGNORECASE)
_ALTER_ADD = re.compile(r"^\s*ALTER\s+TABLE\s+(\"[^\"]+\"|[\w$#]+)\s+ADD\s*\(\s*(\w+)", re.IGNORECASE)
_DROP = re.compile(r"^\s*DROP\s+(TABLE|SEQUENCE|INDEX|VIEW|TRIGGER|PACKAGE)\s+(\"[^\"]+\"|[\w$#]+)", re.IGNORECASE)
_ALTER_DROP = re.compile(r"^\s*ALTER\s+TABLE\s+(\"[^\"]+\"|[\w$#]+)\s+DROP\s*\(\s*(\w+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    plsql: bool

    @property
    def creates(self) -> tuple[str, str] | None:
        """(object type, name as stored in the data dictionary) for a CREATE, else None."""
        match = _OBJECT.match(self.text)
        return (match.group(1).upper().split()[0], _dictionary_name(match.group(2))) if match else None

    @property
    def adds_column(self) -> tuple[str, str] | None:
        match = _ALTER_ADD.match(self.text)
        return (_dictionary_name(match.group(1)), match.group(2).upper()) if match else None

    @property
    def drops(self) -> tuple[str, str] | None:
        match = _DROP.match(self.text)
        return (match.group(1).upper(), _dictionary_name(match.group(2))) if match else None

    @property
    def drops_column(self) -> tuple[str, str] | None:
        match = _ALTER_DROP.match(self.text)
        return (_dictionary_name(match.group(1)), match.group(2).upper()) if match else None


def _dictionary_name(name: str) -> str:
    return name[1:-1] if name.startswith('"') else name.upper()


def split_script(script: str) -> list[Statement]:
    """Statements of a script: plain SQL ends with ';', PL/SQL units with a line holding only '/'."""
    statements: list[Statement] = []
    buffer: list[str] = []
    plsql = False
    for line in script.splitlines():
        stripped = line.strip()
        if not buffer:
            if not stripped or stripped.startswith("--"):
                continue
            plsql = bool(_PLSQL_START.match(line))
        if plsql:
            if stripped == "/":
                statements.append(Statement("\n".join(buffer).strip(), True))
                buffer = []
            else:
                buffer.append(line)
            continue
        buffer.append(line)
        if stripped.endswith(";"):
            statements.append(Statement("\n".join(buffer).strip().rstrip(";").strip(), False))
            buffer = []
    if buffer:
        raise ValueError(f"script ends inside a statement: {' '.join(buffer)[:80]!r}")
    return statements


def quote(name: str) -> str:
    """A quoted Oracle identifier for a validated plain name (case kept as given)."""
    if not is_plain_name(name) or len(name.encode()) > ORACLE_MAX_IDENTIFIER:
        raise ValueError(f"not a plain Oracle identifier: {name!r}")
    return f'"{name}"'


@dataclass(frozen=True, slots=True)
class TableObjects:
    """Names of the capture objects of one table (all derived from validated names)."""

    table: str
    source: str
    key: tuple[str, ...]
    columns: tuple[str, ...]

    def _derived(self, prefix: str) -> str:
        name = f"SY${prefix}{self.table}"
        if len(name.encode()) > ORACLE_MAX_IDENTIFIER:
            raise ValueError(f"table name {self.table!r} is too long for its capture objects ({name})")
        return f'"{name}"'

    @property
    def values(self) -> dict[str, str]:
        keys = [quote(k) for k in self.key]
        return {
            "table": quote(self.table),
            "view": self._derived(""),
            "shadow": self._derived("D_"),
            "shadow_index": self._derived("DI_"),
            "txn_index": self._derived("I_"),
            "trigger": self._derived("T_"),
            "delete_trigger": self._derived("TD_"),
            "source_literal": quote_literal(self.source),
            "key_columns": ", ".join(keys),
            "old_keys": ", ".join(f":OLD.{k}" for k in keys),
            "key_changed": " OR ".join(f":OLD.{k} <> :NEW.{k}" for k in keys),
            "columns": ", ".join(quote(c) for c in self.columns),
        }

    def render(self, name: str) -> str:
        return sqlfiles.render("oracle", name, **self.values)


def after_clause(keys: Sequence[str], prefix: str) -> str:
    """Keyset 'strictly after' for Oracle, which has no row-value comparison:
    k1 > :p0 OR (k1 = :p0 AND k2 > :p1) ..."""
    return " OR ".join(
        "(" + " AND ".join([*(f"{k} = :{prefix}{j}" for j, k in enumerate(keys[:i])), f"{keys[i]} > :{prefix}{i}"])
        + ")" for i in range(len(keys)))


def through_clause(keys: Sequence[str], prefix: str) -> str:
    """Keyset 'at or before' (the negation of strictly after)."""
    return f"NOT ({after_clause(keys, prefix)})"


def poll_query(form: Literal["simple", "chunked"], view: str, bounded: bool = False) -> str:
    """Databus for Oracle's poll query for a view (``view`` already quoted); ``bounded`` adds an upper SCN bound."""
    if form == "chunked":
        return sqlfiles.render("oracle", "poll/chunked.sql", view=view)
    bound = "\n  AND sync_core.getScn(tx.scn, tx.ora_rowscn) <= :untilScn" if bounded else ""
    return sqlfiles.load("oracle", "poll/simple.sql").format_map({"view": view, "upper_bound": bound})


def install_scripts(tables: Mapping[str, TableObjects]) -> list[tuple[str, list[Statement]]]:
    """Every script of the install, rendered and split, in order: (script, statements). The core scripts
    come first (``CORE_SCRIPTS``), then each table's (``tables``: config name -> its objects). Needs no
    server: ``OracleInstall.install`` (the source's ``setup``) applies these, ``tests/unit/test_oracle_grammar.py``
    parses them."""
    out = [(name, split_script(sqlfiles.load("oracle", name))) for name in CORE_SCRIPTS]
    for table, objects in tables.items():
        out += [(f"{name} ({table})", split_script(objects.render(name))) for name in TABLE_SCRIPTS]
    return out
