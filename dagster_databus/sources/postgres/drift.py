"""What capture checks has not been replaced behind its back before each poll (and ``validate`` after it): the
slot (invalidated, or dropped and created again past the checkpoint), the publication (dropped and created
again: its oid), and each captured table's identity besides its name (``table_identities.sql``): its relation
oid, its row in the publication, and its storage. A change of a table's identity reaches the snapshot as a
schema change (``identity_change``), so the table is read again; a slot or publication that cannot give the
changes after the checkpoint is a gap in the log (``LogGapError``, handled per ``on_purged``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import closing
from typing import Any

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.errors import LogGapError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.postgres.connect import PostgresConnector
from dagster_databus.sources.postgres.pgoutput import lsn_of, lsn_text
from dagster_databus.sources.postgres.slots import publication_lost, slot_state

# The checkpoint state that holds the publication's oid when capture last read: one created again under its name
# since (dropped by a DBA) cannot have published the changes in between.
PUBLICATION = "publication_oid"


# The checkpoint state that holds each table's identity when capture last read: [relation oid, the oid of its
# row in the publication, its storage: leaf partitions as oid:relfilenode, and its enum labels]
# (``table_identities.sql``).
IDENTITIES = "identities"

Identity = tuple[int | None, int | None, str | None]


def saved_identities(state: Mapping[str, str]) -> dict[str, Identity]:
    return {name: (ids[0], ids[1], ids[2] if len(ids) > 2 else None)
            for name, ids in json.loads(state.get(IDENTITIES, "{}")).items()}


def identity_change(table: str, before: Identity, now: Identity, truncated: bool = False) -> str | None:
    """The statement ``sync.evolve`` reads for a table whose identity changed (None: it did not), so the
    table is read again: a relation of another oid holds other rows; a table dropped from the publication and
    added again had changes that were never published; storage rewritten held values no event carried. A table
    a TRUNCATE message emptied (``truncated``) has new storage that message told already."""
    if before[0] is not None and now[0] is not None and before[0] != now[0]:
        return (f"DROP TABLE {table}; CREATE TABLE {table} (relation {before[0]} is now relation {now[0]}: the "
                "table was created again, swapped in by renames, or moved in from another schema)")
    if before[0] == now[0] and before[1] != now[1] and now[1] is not None:
        return (f"ALTER PUBLICATION DROP TABLE {table}; ALTER PUBLICATION ADD TABLE {table} (it was out of the "
                "publication for a while: the changes made then were never published)")
    if before[0] == now[0] and before[2] is not None and now[2] is not None and before[2] != now[2]:
        (old_leaves, old_enums), (new_leaves, new_enums) = _storage(before[2]), _storage(now[2])
        gone, came = old_leaves.keys() - new_leaves.keys(), new_leaves.keys() - old_leaves.keys()
        rewritten = [] if truncated else [oid for oid in old_leaves.keys() & new_leaves.keys()
                                          if old_leaves[oid] != new_leaves[oid]]
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


def drift_state(publication: int | None, identities: Mapping[str, Identity]) -> dict[str, str]:
    """The checkpoint state entries that record the publication's oid and the tables' identities."""
    state = {IDENTITIES: json.dumps(identities, separators=(",", ":"), sort_keys=True)}
    return state | ({PUBLICATION: str(publication)} if publication is not None else {})


class PostgresDrift:
    """The capture objects and tables of one source, as the server has them now, against a checkpoint's."""

    def __init__(self, connector: PostgresConnector, config: PostgresSourceConfig) -> None:
        self.connector = connector
        self.config = config
        self.name = config.name

    def slot(self) -> dict[str, Any] | None:
        """The capture slot as ``sql/postgres/slot.sql`` describes it, or None when it does not exist."""
        with closing(self.connector.connect()) as conn:
            return slot_state(conn, self.config.slot_name)

    def publication_oid(self) -> int | None:
        """The publication's oid, None when it does not exist."""
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "publication.sql"), {"publication": self.config.publication_name})
            row = cur.fetchone()
        return int(row[0]) if row else None

    def table_identities(self) -> dict[str, Identity]:
        """Each configured table's identity now (``table_identities.sql``)."""
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "table_identities.sql"),
                        {"tables": [t.name for t in self.config.tables], "schema": self.config.schema_,
                         "publication": self.config.publication_name})
            return {name: (relation, membership, storage) for name, relation, membership, storage in cur.fetchall()}

    def gaps(self, since: Scn, state: Mapping[str, str], publication: int | None) -> list[LogGapError]:
        """What cannot give the changes after the checkpoint at ``since`` with ``state``: the slot, the
        publication (whose oid now is ``publication``)."""
        return [gap for gap in (self._slot_gap(since), self._publication_gap(state, publication)) if gap is not None]

    def problems(self, since: Scn, state: Mapping[str, str]) -> list[str]:
        """``gaps`` as validate states problems: each with its fix."""
        return [f"{gap.problem}: {gap.fix}" for gap in self.gaps(since, state, self.publication_oid())]

    def _publication_gap(self, state: Mapping[str, str], oid: int | None) -> LogGapError | None:
        """The publication created again since the checkpoint (its oid is not the one ``state`` recorded): the
        changes written while it did not exist, or did not publish the tables, were never published."""
        recorded = state.get(PUBLICATION)
        if recorded is None or oid is None or recorded == str(oid):
            return None
        return LogGapError(*publication_lost(self.name, self.config.slot_name, self.config.publication_name),
                           source=self.name)

    def _slot_gap(self, since: Scn) -> LogGapError | None:
        """A slot that cannot give every change after ``since``: invalidated (its WAL removed) or confirmed past
        it (dropped and created again, or advanced by someone else)."""
        slot = self.slot()
        fix = (f"run `databus bootstrap --source {self.name}` (the log and snapshots start afresh from the slot), "
               f"or set sources.{self.name}.on_purged: bootstrap")
        if slot is None:
            return None  # require_installed names the missing slot and its fix
        if slot["wal_status"] == "lost":
            return LogGapError(
                f"replication slot {self.config.slot_name!r} of source {self.name!r} was invalidated: the server "
                "removed WAL it still held (max_slot_wal_keep_size), so the changes after the checkpoint are gone",
                fix + "; raise max_slot_wal_keep_size or capture more often", source=self.name)
        confirmed = slot["confirmed_flush_lsn"]
        if confirmed and lsn_of(confirmed) > since.value:
            return LogGapError(
                f"replication slot {self.config.slot_name!r} of source {self.name!r} starts at {confirmed}, after the "
                f"change log's checkpoint {lsn_text(since.value)}: the slot was dropped and created again (or "
                "advanced by another client), so the changes between are gone", fix, source=self.name)
        return None
