"""Versioned Avro row schemas per table, kept in the lake beside the change log.

``<lake>/log/<source>/schemas/<table>/v0001.avsc``: a new version is written only when the
source's columns change; a segment names the version each of its row records was written in.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ChangeLogFormatError, SchemaDriftError
from dagster_databus.log.durable import write_json_atomic

# 2: columns carry product types (core.types); 1 (before) kept DECIMAL, dates and times as text.
SCHEMA_FORMAT = 2


class SchemaRegistry:
    def __init__(self, root: Path, source: str) -> None:
        self.root = root
        self.source = source

    def _dir(self, table: str) -> Path:
        return self.root / table

    def versions(self, table: str) -> list[int]:
        folder = self._dir(table)
        if not folder.exists():
            return []
        return sorted(int(p.stem[1:]) for p in folder.glob("v*.avsc"))

    def register(self, schema: TableSchema, guard_defaults: bool = False) -> int:
        """The version for ``schema``: the latest if its columns are unchanged, else a new one.

        ``guard_defaults``: refuse a new column with a default (see ``_refuse_silent_backfill``);
        for sources that cannot see the DDL and so cannot re-bootstrap the table themselves.
        """
        versions = self.versions(schema.table)
        if versions:
            latest = self.load(schema.table, versions[-1])
            if latest.fingerprint() == schema.fingerprint():
                return versions[-1]
            if guard_defaults:
                _refuse_silent_backfill(latest, schema)
        version = (versions[-1] + 1) if versions else 1
        folder = self._dir(schema.table)
        folder.mkdir(parents=True, exist_ok=True)
        document = {
            **schema.avro(),
            "databus": {
                "format": SCHEMA_FORMAT,
                "version": version,
                "column_types": {c.name: str(c.type) for c in schema.columns},
                "primary_key": list(schema.primary_key),
                "source_types": {c.name: c.source_type for c in schema.columns},
                "fingerprint": schema.fingerprint(),
            },
        }
        write_json_atomic(folder / f"v{version:04d}.avsc", document)
        return version

    def load(self, table: str, version: int) -> TableSchema:
        return _load(self._dir(table) / f"v{version:04d}.avsc", self.source)

    def latest(self, table: str) -> tuple[int, TableSchema] | None:
        versions = self.versions(table)
        return (versions[-1], self.load(table, versions[-1])) if versions else None

    def record(self, table: str, version: int) -> dict[str, Any]:
        """The version's Avro row record (a copy without databus's own annotations)."""
        doc = dict(_document(self._dir(table) / f"v{version:04d}.avsc"))
        doc.pop("databus")
        return doc

    def parsed(self, table: str, version: int) -> Any:
        return _parsed(self._dir(table) / f"v{version:04d}.avsc")


def _document(path: Path) -> dict[str, Any]:
    # Keyed by modification time too: a lake rebuilt at the same path must not be served stale.
    stat = path.stat()
    return _read_document(path, stat.st_mtime_ns, stat.st_size)


def _refuse_silent_backfill(old: TableSchema, new: TableSchema) -> None:
    """A column added with a default gives every existing row that value without a change event."""
    added = [c for c in new.columns if c.name not in old.column_names and c.default is not None]
    if added:
        described = ", ".join(f"{c.name} DEFAULT {c.default}" for c in added)
        raise SchemaDriftError(
            f"table {new.table!r} of source {new.source!r} gained {described}: every existing row now holds "
            "that default, but the source wrote no change events for them, so the snapshot cannot follow",
            f"run `databus bootstrap --source {new.source}` to read the snapshots afresh "
            "(adding columns without a default needs no bootstrap)",
            source=new.source, table=new.table,
        )


@cache
def _read_document(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    return json.loads(path.read_text())


def _load(path: Path, source: str) -> TableSchema:
    doc = _document(path)
    meta = doc["databus"]
    if meta.get("format") != SCHEMA_FORMAT:
        raise ChangeLogFormatError(
            f"schema {path} of source {source!r} was written by an earlier dagster-databus that kept DECIMAL, "
            "DATE, DATETIME and TIMESTAMP columns as text; this version keeps each column in its own type and "
            "does not mix the two in one log",
            f"run `databus bootstrap --source {source}`: the old change log and snapshots move to <lake>/trash/ "
            "and the next run reads every table afresh", source=source)
    types = meta["column_types"]
    columns = tuple(
        Column(name=f["name"], type=ColumnType.parse(types[f["name"]]),
               source_type=meta["source_types"].get(f["name"], ""))
        for f in doc["fields"]
    )
    return TableSchema(source=source, table=doc["name"], columns=columns, primary_key=tuple(meta["primary_key"]))


def _parsed(path: Path) -> Any:
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@cache
def _parse(path: Path, mtime_ns: int, size: int) -> Any:
    doc = dict(_read_document(path, mtime_ns, size))
    doc.pop("databus")
    return fastavro.parse_schema(doc)
