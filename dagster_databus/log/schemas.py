"""Versioned Avro row schemas per table, kept in the lake beside the change log.

``<lake>/log/<source>/schemas/<table>/v0001.avsc``: a new version is written only when the
source's columns change; a segment names the version each of its row records was written in.
A version is created only if its name is free, so two writers registering at once agree on it
(the loser reads the winner's and registers again if its columns differ).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import fastavro

from dagster_databus.core.defaults import NOT_CONSTANT, constant_value
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ChangeLogFormatError, SchemaDriftError

if TYPE_CHECKING:
    from dagster_databus.storage.lake import Lake

# 2: columns carry product types (core.types); 1 (before) kept DECIMAL, dates and times as text.
SCHEMA_FORMAT = 2


class SchemaRegistry:
    def __init__(self, lake: Lake, prefix: str, source: str) -> None:
        self.lake = lake
        self.prefix = prefix  # the registry's key prefix in the lake, ending in '/'
        self.source = source
        self._documents: dict[Any, dict[str, Any]] = {}  # a store lake's documents (see _entry)
        self._parsed: dict[Any, Any] = {}

    def _key(self, table: str, version: int) -> str:
        return f"{self.prefix}{table}/v{version:04d}.avsc"

    def versions(self, table: str) -> list[int]:
        return sorted(int(o.key.rpartition("/")[2][1:-5]) for o in self.lake.objects.list(f"{self.prefix}{table}/")
                      if o.key.endswith(".avsc") and o.key.rpartition("/")[2].startswith("v"))

    def register(self, schema: TableSchema, guard_defaults: bool = False) -> int:
        """The version for ``schema``: the latest if its columns are unchanged, else a new one.

        ``guard_defaults``: refuse a new column with a default (see ``_refuse_silent_backfill``);
        for sources that cannot see the DDL and so cannot re-bootstrap the table themselves.
        """
        while True:
            versions = self.versions(schema.table)
            if versions:
                latest = self.load(schema.table, versions[-1])
                if latest.fingerprint() == schema.fingerprint():
                    return versions[-1]
                if guard_defaults:
                    _refuse_silent_backfill(latest, schema)
            version = (versions[-1] + 1) if versions else 1
            document = {
                **schema.avro(),
                "databus": {
                    "format": SCHEMA_FORMAT,
                    "version": version,
                    "column_types": {c.name: str(c.type) for c in schema.columns},
                    "primary_key": list(schema.primary_key),
                    "source_types": {c.name: c.source_type for c in schema.columns},
                    # SQL defaults as the source reported them: whether an added column can evolve in place.
                    "defaults": {c.name: c.default for c in schema.columns if c.default is not None},
                    "fingerprint": schema.fingerprint(),
                },
            }
            data = (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()
            if self.lake.objects.create(self._key(schema.table, version), data):
                return version
            # Another writer registered this version first: look again.

    def load(self, table: str, version: int) -> TableSchema:
        return _load(self._document(table, version), self.lake.where(self._key(table, version)), self.source)

    def latest(self, table: str) -> tuple[int, TableSchema] | None:
        versions = self.versions(table)
        return (versions[-1], self.load(table, versions[-1])) if versions else None

    def added_fills(self, table: str) -> dict[str, Any]:
        """Columns added after the table's first version with a constant default (``core.defaults``), as
        they were added: column → the value the source gave every row that existed then, in its snapshot
        (Arrow) form. Events written before such a column existed are read with that value, not NULL
        (``log.columns``)."""
        versions = self.versions(table)
        first: dict[str, tuple[int, Column]] = {}
        for version in versions:
            for column in self.load(table, version).columns:
                first.setdefault(column.name, (version, column))
        fills = {}
        for name, (version, column) in first.items():
            value = constant_value(column.default, column.type) if version != versions[0] else None
            if value is not None and value is not NOT_CONSTANT:
                fills[name] = column.type.to_arrow([value])[0]
        return fills

    def record(self, table: str, version: int) -> dict[str, Any]:
        """The version's Avro row record (a copy without databus's own annotations)."""
        doc = dict(self._document(table, version))
        doc.pop("databus")
        return doc

    def parsed(self, table: str, version: int) -> Any:
        cache_key, doc, documents = self._entry(table, version)
        parsed = _PARSED if documents is _DOCUMENTS else self._parsed
        with _LOCK:
            found = parsed.get(cache_key)
        if found is None:
            found = fastavro.parse_schema({k: v for k, v in doc.items() if k != "databus"})
            with _LOCK:
                parsed[cache_key] = found
                _bound(parsed)
        return found

    def _document(self, table: str, version: int) -> dict[str, Any]:
        return self._entry(table, version)[1]

    def _entry(self, table: str, version: int) -> tuple[Any, dict[str, Any], dict[Any, Any]]:
        """(cache key, document, the cache holding it). A version never changes once written, but a
        lake rebuilt at the same place reuses its name: on a local disk the file's identity tells them
        apart for free, so the process shares one cache; in a store that would cost a request, so the
        cache is this registry's own (a ChangeLog lives for one operation)."""
        key = self._key(table, version)
        where = self.lake.where(key)
        if self.lake.path is not None:
            try:
                stat = (self.lake.path / key).stat()
            except FileNotFoundError:
                raise self._missing(table, version, where) from None
            cache_key: Any = (where, stat.st_mtime_ns, stat.st_size, stat.st_ino)
            documents = _DOCUMENTS
        else:
            cache_key, documents = where, self._documents
        with _LOCK:
            found = documents.get(cache_key)
        if found is None:
            data = self.lake.objects.read(key)
            if data is None:
                raise self._missing(table, version, where)
            found = json.loads(data)
            with _LOCK:
                documents[cache_key] = found
                _bound(documents)
        return cache_key, found, documents

    @staticmethod
    def _missing(table: str, version: int, where: str) -> FileNotFoundError:
        return FileNotFoundError(f"schema version {version} of table {table!r} is missing: {where}")


_DOCUMENTS: dict[Any, dict[str, Any]] = {}  # local lakes' schema documents, by file identity
_PARSED: dict[Any, Any] = {}
_LOCK = threading.Lock()


def _bound(cache: dict[Any, Any], most: int = 4096) -> None:
    while len(cache) > most:
        del cache[next(iter(cache))]


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


def _load(doc: dict[str, Any], where: str, source: str) -> TableSchema:
    meta = doc["databus"]
    if meta.get("format") != SCHEMA_FORMAT:
        raise ChangeLogFormatError(
            f"schema {where} of source {source!r} was written by an earlier dagster-databus that kept DECIMAL, "
            "DATE, DATETIME and TIMESTAMP columns as text; this version keeps each column in its own type and "
            "does not mix the two in one log",
            f"run `databus bootstrap --source {source}`: the old change log and snapshots move to <lake>/trash/ "
            "and the next run reads every table afresh", source=source)
    types = meta["column_types"]
    columns = tuple(
        Column(name=f["name"], type=ColumnType.parse(types[f["name"]]),
               source_type=meta["source_types"].get(f["name"], ""), default=meta.get("defaults", {}).get(f["name"]))
        for f in doc["fields"]
    )
    return TableSchema(source=source, table=doc["name"], columns=columns, primary_key=tuple(meta["primary_key"]))
