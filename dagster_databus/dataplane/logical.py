"""A logical table's model: its Delta folder, its parts, the layout (key, shard column, columns) the parts
share, and the key rules that refuse a key two shards hold."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.config import LogicalTableConfig
from dagster_databus.core.schema import META_COLUMNS, Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import (
    DeltaFolder,
    DeltaSnapshot,
)
from dagster_databus.errors import SchemaDriftError, ShardCollisionError, SnapshotMissingError
from dagster_databus.log.parts import PartLog
from dagster_databus.storage.lake import Lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    pass

PART_COLUMN = "__part"


LAYOUT_KEY = "databus.logical.layout"  # commit metadata: the layout the table was written with


@dataclass(frozen=True, slots=True)
class LogicalLayout:
    """The shape of a logical table, from its config and its parts' (identical) schemas."""

    name: str
    shard_column: str
    shard_from_label: bool  # the column is added and filled with part labels (else it is a data column)
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    parts: tuple[tuple[str, str, str], ...]  # (label, source, table)

    @property
    def key(self) -> list[str]:
        """The logical key: unique over the whole logical table."""
        return [self.shard_column, *[k for k in self.primary_key if k != self.shard_column]]

    @property
    def match(self) -> list[str]:
        # The MERGE matches on (part, physical key): within one part that names one row whatever its
        # shard value becomes, so an update of a data shard column moves the row instead of leaving
        # the old logical key behind. The logical key is kept unique by the collision checks.
        return [PART_COLUMN, *self.primary_key]

    def arrow(self) -> pa.Schema:
        fields = [pa.field(self.shard_column, pa.string())] if self.shard_from_label else []
        fields += [pa.field(c.name, c.type.arrow()) for c in self.columns]
        fields.append(pa.field(PART_COLUMN, pa.string()))
        return pa.schema(fields + [pa.field(n, t) for n, t in META_COLUMNS.items()])

    def document(self) -> str:
        """What a change of forces a reload: the parts, the shard column and the key."""
        return json.dumps({"shard_column": self.shard_column, "shard_from_label": self.shard_from_label,
                           "primary_key": list(self.primary_key), "parts": [list(p) for p in self.parts]},
                          sort_keys=True)


class LogicalSnapshot(DeltaFolder):
    """One logical table: ``<lake>/logical/<name>``."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, name: str) -> None:
        super().__init__(lake, "logical", name)
        self.name = name

    def app_id(self, label: str) -> str:
        return f"databus:logical.{self.name}@{label}"

    def loaded_from_app_id(self, label: str) -> str:
        """Records the bootstrap SCN of the physical snapshot the part was loaded from."""
        return f"{self.app_id(label)}#loaded_from"

    def applied_scn(self, label: str) -> Scn | None:
        table = self._table()
        version = table.transaction_version(self.app_id(label)) if table is not None else None
        return Scn(version) if version is not None else None

    def loaded_from(self, label: str) -> Scn | None:
        table = self._table()
        version = table.transaction_version(self.loaded_from_app_id(label)) if table is not None else None
        return Scn(version) if version is not None else None

    def layout_document(self) -> str | None:
        table = self._table()
        if table is None:
            return None
        # Every commit of a sync carries the layout, so the newest commit's is the current one.
        return next(iter(table.history(1)), {}).get(LAYOUT_KEY)

    def read_pinned(self, labels: Sequence[str]) -> tuple[pa.Table, dict[str, Scn]]:
        """All rows (with metadata) and each part's applied SCN, from one version of the table."""
        table = self._table()
        if table is None:
            raise SnapshotMissingError(f"logical table {self.name} has not been written yet ({self.uri})",
                                       f"materialize the logical/{self.name} asset")
        scns = {}
        for label in labels:
            version = table.transaction_version(self.app_id(label))
            if version is None:
                raise SnapshotMissingError(f"logical table {self.name} holds no rows of part {label} yet",
                                           f"materialize the logical/{self.name} asset")
            scns[label] = Scn(version)
        return self.dataset(table).to_table(), scns


@dataclass(frozen=True, slots=True)
class LogicalPart(PartLog):
    snap: DeltaSnapshot

    @property
    def asset(self) -> str:
        return f"{self.config.source}/{self.config.table}"


def logical_layout(logical: LogicalTableConfig, parts: Sequence[LogicalPart]) -> LogicalLayout:
    """The layout of the logical table; every part must have the same columns and primary key."""
    schemas: list[tuple[LogicalPart, TableSchema]] = []
    for part in parts:
        latest = part.log.schemas.latest(part.config.table)
        if latest is None:
            raise SnapshotMissingError(
                f"logical table {logical.name}: no schema of {part.config.source}.{part.config.table} is "
                "registered in its change log",
                f"materialize the {part.asset} asset first, then this logical table", asset=part.asset)
        schemas.append((part, latest[1]))
    first, reference = schemas[0]
    expected = {c.name: c.type for c in reference.columns}
    problems = []
    for part, schema in schemas[1:]:
        actual = {c.name: c.type for c in schema.columns}
        differences = [f"no column {c}" for c in expected if c not in actual]
        differences += [f"extra column {c}" for c in actual if c not in expected]
        differences += [f"{c} is {actual[c]}, not {expected[c]}" for c in expected
                        if c in actual and actual[c] != expected[c]]
        if schema.primary_key != reference.primary_key:
            differences.append(f"primary key ({', '.join(schema.primary_key)}), not "
                               f"({', '.join(reference.primary_key)})")
        if differences:
            problems.append(f"part {part.label} ({part.config.source}.{part.config.table}): "
                            + "; ".join(differences))
    if problems:
        raise SchemaDriftError(
            f"logical table {logical.name}: its parts do not have the same columns and primary key; compared with "
            f"part {first.label} ({first.config.source}.{first.config.table}): " + " | ".join(problems),
            "apply the same DDL to every shard (then capture and merge them), or list only tables of one shape "
            f"in logical_tables.{logical.name}.parts", logical_table=logical.name)
    return LogicalLayout(
        name=logical.name, shard_column=logical.shard_column,
        shard_from_label=logical.shard_column not in expected, columns=reference.columns,
        primary_key=reference.primary_key,
        parts=tuple((p.label, p.config.source, p.config.table) for p in parts))


def null_shard(layout: LogicalLayout, part: str) -> ShardCollisionError:
    return ShardCollisionError(
        f"logical table {layout.name}: part {part} has rows whose shard column {layout.shard_column!r} is NULL, "
        "so their logical key cannot tell the shards apart",
        f"fill {layout.shard_column} in every row of part {part}, or give logical_tables.{layout.name} a "
        "shard_column the physical tables do not have, so each part's label fills it",
        logical_table=layout.name, part=part)


def key_text(layout: LogicalLayout, row: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={row[k]!r}" for k in layout.key) + ")"


def collision(layout: LogicalLayout, clashes: list[tuple[str, list[str]]], held: bool = False) -> ShardCollisionError:
    if held:
        detail = "; ".join(f"key {key} arrives from part {parts[0]} but is held from part {parts[1]}"
                           for key, parts in clashes)
    else:
        detail = "; ".join(f"key {key} arrives from parts {', '.join(parts)}" for key, parts in clashes)
    return ShardCollisionError(
        f"logical table {layout.name}: the shard column {layout.shard_column!r} does not separate the shards: "
        f"{detail}; nothing was committed",
        f"give logical_tables.{layout.name} a shard_column the physical tables do not have (each part's label "
        f"then fills it), or fix the data so each value of {layout.shard_column} lives on one shard",
        logical_table=layout.name)
