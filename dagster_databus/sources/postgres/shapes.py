"""A PostgreSQL table's columns as the change log last wrote them (its "shape"), carried in the capture
checkpoint's state so a relation message can be told apart as a schema change or not, and the change between two
shapes as the DDL text ``snapshot.evolve`` reads. A shape also holds each column's product type, so a capture
lagging behind a migration decodes old rows of a column whose type was dropped since as the log recorded it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType

# The checkpoint state that holds each table's columns as the log last wrote them:
# {table: [[name, declared type, product type]...]} (checkpoints before held [name, declared type]).
SHAPES = "shapes"

Shape = list[list[str]]


def shape_of(schema: TableSchema) -> Shape:
    return [[c.name, c.source_type, str(c.type)] for c in schema.columns]


def same_shape(a: Shape | None, b: Shape | None) -> bool:
    """The same columns with the same declared types (a checkpoint's older two-part entries compare alike)."""
    return a is not None and b is not None and [e[:2] for e in a] == [e[:2] for e in b]


def recorded_columns(shape: Shape | None) -> dict[str, Column]:
    """The columns a shape records whole (name, declared and product type), by name."""
    return {e[0]: Column(e[0], ColumnType.parse(e[2]), e[1]) for e in shape or [] if len(e) > 2}


# The checkpoint state that holds the publication's oid when capture last read: one created again under its name
# since (dropped by a DBA) cannot have published the changes in between.
PUBLICATION = "publication_oid"


# The checkpoint state that holds each table's identity when capture last read: [relation oid, the oid of its
# row in the publication, its storage: leaf partitions as oid:relfilenode, and its enum labels]
# (``table_identities.sql``).
IDENTITIES = "identities"

Identity = tuple[int | None, int | None, str | None]


def shapes_state(shapes: Mapping[str, Shape], publication: int | None,
                 identities: Mapping[str, Identity]) -> dict[str, str]:
    state = {SHAPES: json.dumps(shapes, separators=(",", ":"), sort_keys=True),
             IDENTITIES: json.dumps(identities, separators=(",", ":"), sort_keys=True)}
    return state | ({PUBLICATION: str(publication)} if publication is not None else {})


def saved_identities(state: Mapping[str, str]) -> dict[str, Identity]:
    return {name: (ids[0], ids[1], ids[2] if len(ids) > 2 else None)
            for name, ids in json.loads(state.get(IDENTITIES, "{}")).items()}


def identity_change(table: str, before: Identity, now: Identity) -> str | None:
    """The statement ``snapshot.evolve`` reads for a table whose identity changed (None: it did not), so the
    table is read again: a relation of another oid holds other rows; a table dropped from the publication and
    added again had changes that were never published."""
    if before[0] is not None and now[0] is not None and before[0] != now[0]:
        return (f"DROP TABLE {table}; CREATE TABLE {table} (relation {before[0]} is now relation {now[0]}: the "
                "table was created again, swapped in by renames, or moved in from another schema)")
    if before[0] == now[0] and before[1] != now[1] and now[1] is not None:
        return (f"ALTER PUBLICATION DROP TABLE {table}; ALTER PUBLICATION ADD TABLE {table} (it was out of the "
                "publication for a while: the changes made then were never published)")
    if before[0] == now[0] and before[2] is not None and now[2] is not None and before[2] != now[2]:
        (old_leaves, old_enums), (new_leaves, new_enums) = _storage(before[2]), _storage(now[2])
        gone, came = old_leaves.keys() - new_leaves.keys(), new_leaves.keys() - old_leaves.keys()
        rewritten = [oid for oid in old_leaves.keys() & new_leaves.keys() if old_leaves[oid] != new_leaves[oid]]
        if list(old_leaves) == [str(before[0])]:  # an unpartitioned table: its own storage
            what = ["rewritten (ALTER ... TYPE ... USING, VACUUM FULL, CLUSTER, TRUNCATE)"] if rewritten else []
        else:
            what = [f"{len(came)} partitions attached, {len(gone)} detached or dropped, {len(rewritten)} rewritten "
                    "or truncated"] if came or gone or rewritten else []
        what += ["enum labels renamed or added"] if old_enums != new_enums else []
        old_places, new_places = _places(before[2]), _places(now[2])
        what += ["a column dropped and added again under its name"] if any(
            new_places.get(name, place) != place for name, place in old_places.items()) else []
        if not what:
            return None  # columns added or dropped only: the relation message and the shape tell those
        return f"ALTER TABLE {table} (storage changed with no row events: {'; '.join(what)})"
    return None


def _storage(storage: str) -> tuple[dict[str, str], str]:
    """(oid → relfilenode of each leaf, the enum labels' digest) of ``table_identities.sql``'s storage."""
    leaves, _, rest = storage.partition(";")
    return dict(entry.split(":") for entry in leaves.split(",") if entry), rest.partition(";")[0]


def _places(storage: str) -> dict[str, str]:
    """Each column's name digest → its number (a storage string before places were kept: none)."""
    places = storage.split(";")[2] if storage.count(";") >= 2 else ""
    return dict(entry.split(":") for entry in places.split(",") if entry)


def describe_change(before: Shape, after: TableSchema) -> str:
    """The column change between two shapes of a table, as the statement ``snapshot.evolve`` reads."""
    old = {e[0]: e[1] for e in before}
    new = {c.name: c for c in after.columns}
    parts = [f"DROP COLUMN {n}" for n in old if n not in new]
    # A column keeps its place for life: one that moved was dropped and added again under its name (its values
    # are new ones), however alike its type.
    kept, now = [n for n in old if n in new], [n for n in new if n in old]
    moved = [n for i, n in enumerate(now) if kept[i] != n]
    parts += [f"DROP COLUMN {n}, ADD COLUMN {n} {new[n].source_type}" for n in moved]
    for name, column in new.items():
        if name in moved:
            continue
        if name not in old:
            default = f" DEFAULT {column.default}" if column.default is not None else ""
            parts.append(f"ADD COLUMN {name} {column.source_type}{default}")
        elif old[name] != column.source_type:
            parts.append(f"ALTER COLUMN {name} TYPE {column.source_type}")
    return f"ALTER TABLE {after.table} " + ", ".join(parts or ["(relation changed)"])
