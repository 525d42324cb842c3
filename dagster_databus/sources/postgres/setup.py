"""What logical decoding needs in a PostgreSQL database, installed and checked: the publication of the
configured tables, their replica identity, the ``pgoutput`` replication slot (``install``, ``uninstall``);
the server's settings and the user's privileges besides (``verify``); what ``validate`` tells of the server
(``notes``). The ``setup`` part of the PostgreSQL source. ``read_epoch`` gives the source's epoch.

Every statement is in ``sql/postgres/``; names reach SQL as parameters or as identifiers quoted by
``psycopg2.sql``, never pasted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.errors import CaptureNotInstalledError, ConcurrentRunError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import InstallReport, not_installed
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import Connection, PostgresConnector
from dagster_databus.sources.postgres.slots import is_publication_lost, publication_lost

# pgoutput and pg_replication_slots.wal_status (what verify reads of a slot's WAL) need PostgreSQL 13.
MIN_VERSION_NUM = 130000
# What the publication publishes: every kind of change, and a partitioned table's changes as the table's own
# (as configured) rather than its partitions'.
PUBLICATION_OPTIONS = sql.SQL("publish = 'insert, update, delete, truncate', publish_via_partition_root = true")
# ALTER TABLE waits for the table's ACCESS EXCLUSIVE lock and holds up every query queued behind it meanwhile:
# give up soon on a busy table (transient: install again) rather than stall the application.
LOCK_TIMEOUT = "5s"
MANAGED_FLAGS = ("Amazon RDS/Aurora: rds.logical_replication = 1 in the parameter group; Cloud SQL: the "
                 "cloudsql.logical_decoding flag; Azure: wal_level = logical in the server parameters")


def _rows(conn: Connection, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("postgres", name), params)
        columns = [d.name for d in cur.description or ()]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def _run(conn: Connection, name: str, **names: sql.Composable) -> None:
    with conn.cursor() as cur:
        cur.execute(sql.SQL(sqlfiles.load("postgres", name)).format(**names))


def read_epoch(conn: Connection, slot: str) -> str:
    """The source's epoch, ``<system identifier>:<timeline>:<slot>``: positions (WAL LSNs) compare only within
    one cluster's timeline, as read through one slot."""
    row = _rows(conn, "epoch.sql")[0]
    return f"{row['system_identifier']}:{row['timeline']}:{slot}"


@dataclass
class Survey:
    """One look at what setup cares about, taken on one connection."""

    server: dict[str, Any]
    slot: dict[str, Any] | None
    tables: list[dict[str, Any]]
    publication: dict[str, Any] | None
    published: list[dict[str, Any]]  # the publication's tables (a schema's own row has table_name None)


def _partitions(table: Mapping[str, Any]) -> list[str]:
    return [f"{schema}.{name}" for schema, name in zip(table["partition_schemas"], table["partition_names"],
                                                        strict=True)]


class PostgresSetup:
    """The publication, the replica identities and the slot of one source; the checks capture needs."""

    def __init__(self, connector: PostgresConnector, config: PostgresSourceConfig, catalog: PostgresCatalog) -> None:
        self.connector = connector
        self.catalog = catalog
        self.config = config
        self.name = config.name
        self.schema = config.schema_
        self.slot = config.slot_name
        self.publication = config.publication_name

    # -- reading the database ------------------------------------------------------------

    def _survey(self, conn: Connection) -> Survey:
        server = _rows(conn, "server.sql")[0]
        # A server in recovery has no current WAL position, which slot.sql reports against (and no slot to use).
        slot_rows = [] if server["in_recovery"] else _rows(conn, "slot.sql", {"slot": self.slot})
        tables = _rows(conn, "tables.sql", {"schema": self.schema, "tables": [t.name for t in self.config.tables]})
        publication_rows = _rows(conn, "publication.sql", {"publication": self.publication})
        published: list[dict[str, Any]] = []
        if publication_rows:
            name = "publication_tables_15.sql" if server["server_version_num"] >= 150000 else "publication_tables.sql"
            published = _rows(conn, name, {"publication_oid": publication_rows[0]["oid"]})
        return Survey(server, slot_rows[0] if slot_rows else None, tables,
                      publication_rows[0] if publication_rows else None, published)

    def _qualified(self, table: str) -> str:
        return f"{self.schema}.{table}"

    def _install_fix(self) -> str:
        return f"run `databus install --source {self.name}`"

    @staticmethod
    def _needs_full(table: Mapping[str, Any]) -> bool:
        """Whether install sets REPLICA IDENTITY FULL on the table: every captured table has it. pgoutput sends
        an update's untouched out-of-line (TOASTed) values as "unchanged", and only the FULL old row carries
        them; a table without such a column today may be given one by an ALTER TABLE that capture learns of only
        with the table's next change, too late for the updates between."""
        return bool(table["replica_identity"] != "f" or table["partition_names"])

    def _covered(self, survey: Survey) -> dict[str, str | None]:
        """For each configured table: None when the publication publishes all of it, else why not."""
        pub = survey.publication
        if pub is None:
            return {t.name: "missing" for t in self.config.tables}
        schemas = {r["schema_name"] for r in survey.published if r["table_name"] is None}
        named = {r["table_name"]: r["limited"] for r in survey.published
                 if r["table_name"] is not None and r["schema_name"] == self.schema}
        out: dict[str, str | None] = {}
        for t in self.config.tables:
            if t.name in named:
                out[t.name] = "limited" if named[t.name] else None
            else:
                out[t.name] = None if pub["all_tables"] or self.schema in schemas else "absent"
        return out

    def _publication_exact(self, survey: Survey) -> bool:
        """Whether the publication names exactly the configured tables, unlimited (what install makes it)."""
        if survey.publication is None:
            return False
        if survey.publication["all_tables"]:
            return True  # publishes every table, ours among them; SET TABLE cannot narrow a FOR ALL TABLES one
        wanted = {(self.schema, t.name, False) for t in self.config.tables}
        have = {(r["schema_name"], r["table_name"], r["limited"]) for r in survey.published}
        return have == wanted

    @staticmethod
    def _options_right(publication: Mapping[str, Any]) -> bool:
        return all(publication[k] for k in ("inserts", "updates", "deletes", "truncates", "via_root"))

    # -- problems ------------------------------------------------------------------------

    def _blocking(self, survey: Survey) -> list[str]:
        """What install cannot change: the server's settings, the user's privileges, the tables, a broken slot."""
        s = survey.server
        user = s["user_name"]
        problems: list[str] = []
        if s["server_version_num"] < MIN_VERSION_NUM:
            problems.append(f"PostgreSQL {s['server_version']} is older than 13, which capture needs: upgrade "
                            "the server")
        if s["in_recovery"]:
            problems.append("the server is a standby (in recovery): point host and port at the primary, where "
                            "the replication slot lives")
        if s["wal_level"] != "logical":
            problems.append(f"wal_level is {s['wal_level']!r}, needs 'logical' for logical decoding: ALTER SYSTEM "
                            f"SET wal_level = logical, then restart the server ({MANAGED_FLAGS})")
        if not (s["superuser"] or s["replication"]):
            problems.append(f"user {user!r} lacks REPLICATION, which creating and reading a replication slot "
                            f"needs: as an administrator, ALTER ROLE {user} REPLICATION (Amazon RDS/Aurora: "
                            f"GRANT rds_replication TO {user})")
        slot = survey.slot
        if slot is None:
            if not s["in_recovery"] and s["slots_used"] >= s["max_replication_slots"]:
                problems.append(f"all {s['max_replication_slots']} replication slots (max_replication_slots) are "
                                f"taken, so slot {self.slot!r} cannot be created: drop one that is no longer used "
                                "(SELECT pg_drop_replication_slot(name)) or raise max_replication_slots and restart")
        elif slot["slot_type"] != "logical" or slot["plugin"] != "pgoutput":
            what = "a physical slot" if slot["slot_type"] != "logical" else f"decoded by {slot['plugin']!r}"
            problems.append(f"replication slot {self.slot!r} is {what}, not a logical slot decoded by 'pgoutput': "
                            f"drop it (SELECT pg_drop_replication_slot('{self.slot}')) if nothing else uses it, or "
                            f"set sources.{self.name}.slot to another name")
        elif slot["database"] != self.config.database:
            problems.append(f"replication slot {self.slot!r} belongs to database {slot['database']!r}, not "
                            f"{self.config.database!r}: set sources.{self.name}.slot to another name, or drop it "
                            "there if nothing uses it")
        if s["max_wal_senders"] == 0:
            problems.append("max_wal_senders is 0, so the server accepts no replication connection: ALTER SYSTEM "
                            "SET max_wal_senders = 10, then restart the server")
        elif s["wal_senders_used"] >= s["max_wal_senders"] and not (slot and slot["active"]):
            problems.append(f"all {s['max_wal_senders']} walsenders (max_wal_senders) are in use, so capture cannot "
                            "open its replication connection: raise max_wal_senders and restart the server, or "
                            "stop a replication client that is no longer needed")
        covered = self._covered(survey)
        changes_publication = not self._publication_exact(survey) or not (
            survey.publication and self._options_right(survey.publication))
        for t in survey.tables:
            name = self._qualified(t["name"])
            if not t["present"]:
                problems.append(f"table {name} does not exist in database {self.config.database!r}: create it, or "
                                f"correct sources.{self.name}.tables (and schema)")
                continue
            if t["inheritors"]:
                problems.append(f"{t['inheritors']} tables inherit from table {name} (INHERITS): a read of {name} "
                                "holds their rows too, but their changes are published as theirs, so its snapshot "
                                f"could not follow them: capture each table on its own (ALTER TABLE <child> NO "
                                f"INHERIT {name}), or make {name} a partitioned table")
            if not t["may_select"]:
                problems.append(f"user {user!r} may not read table {name}, which snapshots need: as an "
                                f"administrator, GRANT SELECT ON {name} TO {user}")
            if not t["owned"] and (self._needs_full(t) or covered[t["name"]] is not None):
                problems.append(f"user {user!r} does not own table {name}, which publishing it and setting its "
                                f"replica identity need: as an administrator, ALTER TABLE {name} OWNER TO {user} "
                                "(or GRANT the owning role to it), or run the install as the owner")
        pub = survey.publication
        if pub is None and not s["may_create"]:
            problems.append(f"user {user!r} lacks CREATE on database {self.config.database!r}, which creating "
                            f"publication {self.publication!r} needs: as an administrator, GRANT CREATE ON DATABASE "
                            f"{self.config.database} TO {user}")
        elif pub is not None and not pub["owned"] and changes_publication:
            problems.append(f"user {user!r} does not own publication {self.publication!r}, which install must "
                            f"change: as an administrator, ALTER PUBLICATION {self.publication} OWNER TO {user}")
        return problems

    def _repairable(self, survey: Survey) -> list[str]:
        """What install creates or changes: the replica identities, the publication, the slot."""
        problems: list[str] = []
        fix = self._install_fix()
        for t in survey.tables:
            if not t["present"]:
                continue
            name, identity = self._qualified(t["name"]), IDENTITY_NAMES.get(t["replica_identity"], "?")
            if not _has_key_identity(t):
                problems.append(f"table {name} has no primary key and replica identity {identity}, so its updates "
                                "and deletes carry no key to apply them by (and the server refuses them once the "
                                f"table is published): {fix}, which sets REPLICA IDENTITY FULL (or ALTER TABLE "
                                f"{name} REPLICA IDENTITY USING INDEX <a unique index on NOT NULL columns>, and "
                                "install still sets FULL)")
            elif self._needs_full(t):
                which = f"table {name} has replica identity {identity}" if t["replica_identity"] != "f" else (
                    f"partitions {', '.join(_partitions(t))} of table {name} (made or attached after install) have "
                    "another replica identity than FULL")
                problems.append(f"{which}, so an update that leaves a TOASTed (large, out-of-line) value unchanged "
                                f"does not carry it: {fix}, which sets REPLICA IDENTITY FULL on the table and each "
                                "of its partitions")
        pub = survey.publication
        if pub is None:
            problems.append(f"publication {self.publication!r} does not exist: {fix}")
        else:
            for table, why in self._covered(survey).items():
                if why == "absent":
                    problems.append(f"publication {self.publication!r} does not publish table "
                                    f"{self._qualified(table)}: {fix}")
                elif why == "limited":
                    problems.append(f"publication {self.publication!r} publishes table {self._qualified(table)} "
                                    f"with a row filter or column list, so capture would miss changes: {fix}")
            if not self._options_right(pub):
                missing = [k for k in ("inserts", "updates", "deletes", "truncates") if not pub[k]]
                what = f"does not publish {', '.join(missing)}" if missing else (
                    "publishes partitions' changes as the partitions' (publish_via_partition_root is off)")
                problems.append(f"publication {self.publication!r} {what}: {fix}")
        if survey.slot is None and not survey.server["in_recovery"]:
            problems.append(f"replication slot {self.slot!r} does not exist: {fix}")
        return problems

    def verify(self) -> list[str]:
        """Every problem capture has here, each naming the object and its fix; empty when ready. Beside what
        install repairs: a slot that cannot decode the changes it holds (the publication dropped and created
        again behind capture's back), which capture meets as a gap in the log (``on_purged``)."""
        with closing(self.connector.connect()) as conn:
            survey = self._survey(conn)
            return self._blocking(survey) + self._repairable(survey) + self._undecodable(conn, survey)

    def require_installed(self) -> None:
        with closing(self.connector.connect()) as conn:
            survey = self._survey(conn)
        problems = self._blocking(survey) + self._repairable(survey)
        if problems:
            raise not_installed(
                f"PostgreSQL source {self.name!r} ({self.connector.describe()}) is not ready for logical decoding:",
                problems, f"apply each fix above, then materialize the '{self.name}/capture' asset again",
                bulleted=True, source=self.name)

    def _undecodable(self, conn: Connection, survey: Survey) -> list[str]:
        """The slot's first waiting change decoded without consuming it: refused when the publication was dropped
        since (created again or not), for pgoutput reads a change's publication as the catalog was when it was
        written. A slot a capture streams from cannot be peeked: nothing is said of it then."""
        if survey.slot is None or survey.slot["active"] or survey.publication is None:
            return []
        try:
            with conn.cursor() as cur:
                cur.execute(sqlfiles.load("postgres", "first_waiting.sql"),
                            {"slot": self.slot, "publication": self.publication})
                cur.fetchall()
        except psycopg2.Error as exc:
            conn.rollback()
            if is_publication_lost(exc):
                return [": ".join(publication_lost(self.name, self.slot, self.publication))]
        return []

    def installed(self) -> bool:
        """Whether install has run here: the publication or the slot exists (current or not)."""
        with closing(self.connector.connect()) as conn:
            survey = self._survey(conn)
        return survey.publication is not None or survey.slot is not None

    # -- install -------------------------------------------------------------------------

    def install(self) -> InstallReport:
        """Set the tables' replica identity, create or correct the publication, create the slot; each only
        when it is not so already, so a second install changes nothing. Refuses, changing nothing, when
        something install cannot change is in the way (``verify``'s other problems) or the catalog's checks
        fail (a table with a column no type maps: money, a composite), before the publication and the slot exist."""
        changed: list[str] = []
        unchanged: list[str] = []
        with closing(self.connector.connect()) as conn, _errors(self, "install"):
            survey = self._survey(conn)
            blocking = self._blocking(survey)
            if blocking:
                raise not_installed(f"cannot install capture for PostgreSQL source {self.name!r} "
                                    f"({self.connector.describe()}):", blocking,
                                    f"apply each fix above, then run `databus install --source {self.name}` again",
                                    bulleted=True, source=self.name)
            self.catalog.preflight()
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
            # Replica identity first: publishing a table without one would make the server refuse its updates.
            # FULL because pgoutput sends an update's unchanged TOASTed values only as "unchanged" (no value):
            # the old row image FULL logs carries them, so the row can be written whole.
            for t in survey.tables:
                label = f"replica identity {self._qualified(t['name'])}"
                if self._needs_full(t):
                    # Each partition too: an update is logged with the partition's own replica identity.
                    for schema, table in [(self.schema, t["name"]), *zip(t["partition_schemas"], t["partition_names"],
                                                                          strict=True)]:
                        _run(conn, "replica_identity_full.sql", table=sql.Identifier(schema, table))
                    changed.append(label)
                else:
                    unchanged.append(label)
            publication = sql.Identifier(self.publication)
            tables = sql.SQL(", ").join(sql.Identifier(self.schema, t.name) for t in self.config.tables)
            label = f"publication {self.publication}"
            if survey.publication is None:
                _run(conn, "create_publication.sql", publication=publication, tables=tables,
                     options=PUBLICATION_OPTIONS)
                changed.append(label)
            else:
                altered = False
                if not self._publication_exact(survey):
                    _run(conn, "set_publication_tables.sql", publication=publication, tables=tables)
                    altered = True
                if not self._options_right(survey.publication):
                    _run(conn, "set_publication_options.sql", publication=publication, options=PUBLICATION_OPTIONS)
                    altered = True
                (changed if altered else unchanged).append(label)
            label = f"replication slot {self.slot}"
            created = False
            if survey.slot is None:
                # Creating a slot waits for the transactions running now to end, as long as they take: the
                # lock timeout is for the ALTER TABLEs above, whose wait holds up the application's queries.
                with conn.cursor() as cur:
                    cur.execute("SELECT set_config('lock_timeout', '0', false)")
                # DuplicateObject: another install created it just now, the same slot.
                with suppress(psycopg2.errors.DuplicateObject):
                    created = bool(_rows(conn, "create_slot.sql", {"slot": self.slot}))
            (changed if created else unchanged).append(label)
            epoch = read_epoch(conn, self.slot)
            version = str(survey.server["server_version"])
        return InstallReport(epoch=epoch, version=version, changed=tuple(changed), unchanged=tuple(unchanged))

    def uninstall(self) -> tuple[str, ...]:
        """Drop the slot (freeing the WAL it holds) and the publication; what was dropped. Refuses, changing
        nothing, while a connection streams from the slot. Replica identities stay as install set them: other
        consumers may rely on them, and FULL harms nothing but WAL volume."""
        dropped: list[str] = []
        with closing(self.connector.connect()) as conn, _errors(self, "uninstall"):
            survey = self._survey(conn)
            slot = survey.slot
            if slot is not None and slot["active"] and slot["database"] == self.config.database:
                raise ConcurrentRunError(
                    f"replication slot {self.slot!r} of source {self.name!r} is in use (by server process "
                    f"{slot['active_pid']}), so it cannot be dropped",
                    "stop the capture run (or other client) reading it, then uninstall again", source=self.name)
            if _rows(conn, "drop_slot.sql", {"slot": self.slot}):
                dropped.append(f"replication slot {self.slot}")
            if survey.publication is not None:
                _run(conn, "drop_publication.sql", publication=sql.Identifier(self.publication))
                dropped.append(f"publication {self.publication}")
        return tuple(dropped)

    # -- notes ---------------------------------------------------------------------------

    def notes(self) -> list[str]:
        """What ``validate`` tells of the server besides its problems: its version, and the WAL the slot holds
        back (what grows on the server's disk while capture does not run)."""
        with closing(self.connector.connect()) as conn:
            survey = self._survey(conn)
        s, slot = survey.server, survey.slot
        notes = [f"PostgreSQL {s['server_version']}, wal_level {s['wal_level']}"]
        if slot is None:
            notes.append(f"replication slot {self.slot!r} not created yet")
        elif slot["retained_bytes"] is not None:
            notes.append(f"replication slot {self.slot!r} holds {_size(int(slot['retained_bytes']))} of WAL "
                         f"(wal_status {slot['wal_status']})")
        else:
            notes.append(f"replication slot {self.slot!r} holds no WAL (wal_status {slot['wal_status']})")
        if slot is not None and slot["wal_status"] == "lost":
            # Not a problem install could fix: capture names the gap (LogGapError), and a bootstrap remakes the slot.
            notes.append(f"replication slot {self.slot!r} was invalidated: the server removed WAL it had not "
                         "delivered, so the changes after the change log's checkpoint are gone; run `databus "
                         f"bootstrap --source {self.name}` (or set on_purged: bootstrap), and raise "
                         "max_slot_wal_keep_size (or capture more often) so it does not recur")
        return notes


IDENTITY_NAMES = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


def _has_key_identity(table: Mapping[str, Any]) -> bool:
    """Whether the table's replica identity logs a key for updates and deletes: FULL, an index that exists,
    or DEFAULT with a primary key."""
    identity = table["replica_identity"]
    return bool(identity == "f" or (identity == "i" and table["identity_index"])
                or (identity == "d" and table["has_primary_key"]))


def _size(n: int) -> str:
    """``n`` bytes, and in the largest unit under 1024 of it."""
    if n < 1024:
        return f"{n} bytes"
    value, unit = n / 1024, "kB"
    for larger in ("MB", "GB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{n} bytes ({value:.1f} {unit})"


@contextmanager
def _errors(setup: PostgresSetup, action: str) -> Iterator[None]:
    """A statement refused mid-way as the typed error: a busy table or a lost server is transient, anything
    else (a privilege verify could not foresee) names the statement's error."""
    try:
        yield
    except psycopg2.errors.LockNotAvailable as exc:
        raise SourceUnavailableError(
            f"{action} of PostgreSQL source {setup.name!r} gave up waiting {LOCK_TIMEOUT} for a table's lock "
            f"({(exc.pgerror or str(exc)).strip()})",
            f"a long transaction holds the table: run the {action} again when it has ended",
            source=setup.name) from None
    except psycopg2.OperationalError as exc:
        raise SourceUnavailableError(
            f"the connection to PostgreSQL source {setup.name!r} ({setup.connector.describe()}) failed during "
            f"{action}: {str(exc).strip()}", f"run the {action} again (it is safe to repeat)",
            source=setup.name) from None
    except psycopg2.Error as exc:
        raise CaptureNotInstalledError(
            f"{action} of PostgreSQL source {setup.name!r} failed: {(exc.pgerror or str(exc)).strip()}",
            "apply what the server's message asks (often a privilege), then run it again",
            source=setup.name) from None
