"""PostgreSQL setup against a real server the tests start: install (replica identities, the publication, the
pgoutput slot) twice, uninstall, and every problem verify names: the server's wal_level, the user's
privileges, tables without a key or with TOASTable columns, missing tables, missing, foreign and lost
slots, a publication that does not cover a table; and the typed errors of a refused connection."""

from __future__ import annotations

import itertools
import pickle
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.errors import CaptureNotInstalledError, ConcurrentRunError, ConfigError, SourceUnavailableError
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector, connect_spec
from dagster_databus.sources.postgres.setup import PostgresSetup, read_epoch
from dagster_databus.spark.connect_server import free_port
from tests.support.fixtures import server_fixture, start_postgres
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.server

_numbers = itertools.count()


pg_server = server_fixture(start_postgres, "A PostgreSQL cluster of the module's own: its tests change its settings.",
                           name="pg_server", scope="module")


@pytest.fixture
def db(pg_server: PostgresServer) -> Iterator[str]:
    """A database of the test's own; its slots and the database go afterwards (slots are the cluster's)."""
    name = f"setup_{next(_numbers)}"
    pg_server.create_database(name)
    yield name
    pg_server.execute(("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                       (name,)))
    pg_server.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def config(pg_server: PostgresServer | None, database: str, tables: dict[str, list[str]], name: str = "shop",
           **extra: Any) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate({
        "name": name, "kind": "postgres", "host": "127.0.0.1", "port": pg_server.port if pg_server else free_port(),
        "user": "postgres", "database": database,
        "tables": [{"name": t, "primary_key": key} for t, key in tables.items()], **extra})


def setup_of(cfg: PostgresSourceConfig) -> PostgresSetup:
    connector = PostgresConnector(cfg)
    return PostgresSetup(connector, cfg, PostgresCatalog(connector))


def shop(pg_server: PostgresServer, db: str) -> PostgresSourceConfig:
    """Two tables: orders has a text column (TOASTable), counts has only fixed-width ones."""
    pg_server.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)",
                      "CREATE TABLE counts (id int PRIMARY KEY, n bigint, at timestamptz)", database=db)
    return config(pg_server, db, {"orders": ["id"], "counts": ["id"]})


def identity(pg_server: PostgresServer, db: str, table: str) -> str:
    rows = pg_server.query("SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (table,), database=db)
    return str(rows[0][0])


def published(pg_server: PostgresServer, db: str, publication: str) -> set[str]:
    return {r[0] for r in pg_server.query("SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                                          (publication,), database=db)}


def slot_row(pg_server: PostgresServer, slot: str) -> tuple[Any, ...] | None:
    rows = pg_server.query("SELECT plugin, database, wal_status FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,))
    return rows[0] if rows else None


def one(problems: list[str], pattern: str) -> str:
    """The one problem matching ``pattern``."""
    found = [p for p in problems if re.search(pattern, p)]
    assert len(found) == 1, f"{pattern!r} in {problems}"
    return found[0]


def test_install_twice_is_idempotent(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    assert not setup.installed()
    assert len(setup.verify()) == 4  # the two tables' identities, the publication, the slot

    first = setup.install()
    assert set(first.changed) == {"replica identity public.orders", "replica identity public.counts",
                                  "publication databus_shop", "replication slot databus_shop"}
    assert first.unchanged == ()
    # Every captured table gets FULL, whether or not it has a TOASTable column yet (an ALTER may add one).
    assert identity(pg_server, db, "orders") == "f"
    assert identity(pg_server, db, "counts") == "f"
    assert published(pg_server, db, "databus_shop") == {"orders", "counts"}
    assert slot_row(pg_server, "databus_shop") == ("pgoutput", db, "reserved")
    sysid = pg_server.query("SELECT system_identifier FROM pg_control_system()")[0][0]
    assert first.epoch == f"{sysid}:1:databus_shop"
    assert first.version == pg_server.setting("server_version")
    assert setup.installed()
    assert setup.verify() == []

    second = setup.install()
    assert second.changed == ()
    assert set(second.unchanged) == set(first.changed) | set(first.unchanged)
    assert second.epoch == first.epoch
    with PostgresConnector(cfg).connect() as conn:
        assert read_epoch(conn, "databus_shop") == first.epoch


def test_install_corrects_a_publication_with_other_tables_or_actions(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    pg_server.execute("CREATE TABLE other (id int PRIMARY KEY)",
                      "CREATE PUBLICATION databus_shop FOR TABLE counts, other WITH (publish = 'insert')", database=db)
    setup = setup_of(cfg)
    problems = setup.verify()
    one(problems, r"publication 'databus_shop' does not publish table public\.orders: run `databus install")
    one(problems, r"publication 'databus_shop' does not publish updates, deletes, truncates")
    assert "publication databus_shop" in setup.install().changed
    assert published(pg_server, db, "databus_shop") == {"orders", "counts"}
    assert pg_server.query("SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication",
                           database=db) == [(True, True, True, True, True)]
    assert setup.verify() == []
    assert "publication databus_shop" in setup.install().unchanged


def test_a_row_filter_is_a_publication_that_misses_changes(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    setup.install()
    pg_server.execute("ALTER PUBLICATION databus_shop SET TABLE orders WHERE (id > 10), counts", database=db)
    one(setup.verify(), r"publishes table public\.orders with a row filter or column list")
    assert setup.install().changed == ("publication databus_shop",)
    assert setup.verify() == []


def test_uninstall_drops_slot_and_publication_and_refuses_a_slot_in_use(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    setup.install()
    stream = PostgresConnector(cfg).replication()
    try:
        cur = stream.cursor()
        cur.start_replication(slot_name="databus_shop", decode=False,
                              options={"proto_version": "1", "publication_names": "databus_shop"})
        with pytest.raises(ConcurrentRunError, match="'databus_shop' of source 'shop' is in use"):
            setup.uninstall()
        assert slot_row(pg_server, "databus_shop") is not None  # nothing dropped
        assert published(pg_server, db, "databus_shop") == {"orders", "counts"}
    finally:
        stream.close()

    dropped = _retry_while_active(setup)
    assert dropped == ("replication slot databus_shop", "publication databus_shop")
    assert slot_row(pg_server, "databus_shop") is None
    assert pg_server.query("SELECT count(*) FROM pg_publication", database=db) == [(0,)]
    assert not setup.installed()
    assert setup.uninstall() == ()


def _retry_while_active(setup: PostgresSetup) -> tuple[str, ...]:
    """uninstall, once the server has noticed the closed replication connection (its walsender exits
    a moment after the client goes)."""
    import time

    deadline = time.monotonic() + 10
    while True:
        try:
            return setup.uninstall()
        except ConcurrentRunError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_wal_level_replica_is_named_and_install_changes_nothing() -> None:
    with start_postgres({"wal_level": "replica"}) as replica:
        cfg = shop(replica, "databus")
        setup = setup_of(cfg)
        problem = one(setup.verify(), r"wal_level")
        assert "wal_level is 'replica', needs 'logical'" in problem
        assert "ALTER SYSTEM SET wal_level = logical, then restart" in problem
        with pytest.raises(CaptureNotInstalledError, match="wal_level is 'replica'") as err:
            setup.install()
        assert err.value.transient is False
        assert replica.query("SELECT count(*) FROM pg_publication", database="databus") == [(0,)]
        assert identity(replica, "databus", "orders") == "d"


def test_a_user_without_replication_or_ownership(pg_server: PostgresServer, db: str) -> None:
    shop(pg_server, db)
    pg_server.execute("DO $$BEGIN CREATE ROLE plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    pg_server.execute("ALTER ROLE plain NOREPLICATION", "GRANT SELECT ON orders, counts TO plain", database=db)
    cfg = config(pg_server, db, {"orders": ["id"], "counts": ["id"]}, user="plain")
    setup = setup_of(cfg)
    problems = setup.verify()
    assert "ALTER ROLE plain REPLICATION" in one(problems, r"user 'plain' lacks REPLICATION")
    # Both must be published and set to FULL: both need their owner.
    assert "ALTER TABLE public.orders OWNER TO plain" in one(problems, r"does not own table public\.orders")
    one(problems, r"does not own table public\.counts")
    assert f"GRANT CREATE ON DATABASE {db} TO plain" in one(problems, r"lacks CREATE on database")
    with pytest.raises(CaptureNotInstalledError, match="lacks REPLICATION"):
        setup.install()
    assert pg_server.query("SELECT count(*) FROM pg_publication", database=db) == [(0,)]
    assert identity(pg_server, db, "orders") == "d"
    assert slot_row(pg_server, "databus_shop") is None

    # Given what verify asked for, the same user installs.
    pg_server.execute("ALTER ROLE plain REPLICATION")
    pg_server.execute(f'GRANT CREATE ON DATABASE "{db}" TO plain', "ALTER TABLE orders OWNER TO plain",
                      "ALTER TABLE counts OWNER TO plain", database=db)
    report = setup.install()
    assert "replication slot databus_shop" in report.changed
    assert setup.verify() == []


def test_a_table_without_a_primary_key(pg_server: PostgresServer, db: str) -> None:
    pg_server.execute("CREATE TABLE readings (sensor int NOT NULL, at int NOT NULL, v float8)", database=db)
    cfg = config(pg_server, db, {"readings": ["sensor", "at"]})
    setup = setup_of(cfg)
    problem = one(setup.verify(), r"table public\.readings has no primary key and replica identity DEFAULT")
    assert "REPLICA IDENTITY FULL" in problem and "USING INDEX" in problem

    pg_server.execute("ALTER TABLE readings REPLICA IDENTITY NOTHING", database=db)
    one(setup.verify(), r"no primary key and replica identity NOTHING")
    pg_server.execute("CREATE UNIQUE INDEX readings_key ON readings (sensor, at)",
                      "ALTER TABLE readings REPLICA IDENTITY USING INDEX readings_key", database=db)
    # A key now, but an index identity logs only the key: a TOASTed value an update left is still not carried.
    problem = one([p for p in setup.verify() if "readings" in p and "publication" not in p],
                  r"replica identity USING INDEX, so an update that leaves a TOASTed")
    assert "sets REPLICA IDENTITY FULL" in problem
    pg_server.execute("ALTER TABLE readings REPLICA IDENTITY FULL", database=db)
    assert not [p for p in setup.verify() if "replica identity" in p]

    # Without a usable identity, install sets FULL: publishing the table as it is would make the server
    # refuse its updates and deletes.
    pg_server.execute("ALTER TABLE readings REPLICA IDENTITY DEFAULT", database=db)
    assert "replica identity public.readings" in setup.install().changed
    assert identity(pg_server, db, "readings") == "f"
    assert setup.verify() == []
    pg_server.execute("INSERT INTO readings VALUES (1, 1, 0.5)", "UPDATE readings SET v = 1", database=db)


def test_a_toastable_table_is_named_until_it_is_full(pg_server: PostgresServer, db: str) -> None:
    pg_server.execute("CREATE TABLE docs (id int PRIMARY KEY, body jsonb)", database=db)
    cfg = config(pg_server, db, {"docs": ["id"]})
    setup = setup_of(cfg)
    setup.install()
    assert identity(pg_server, db, "docs") == "f"
    pg_server.execute("ALTER TABLE docs REPLICA IDENTITY DEFAULT", database=db)
    problem = one(setup.verify(), r"table public\.docs has replica identity DEFAULT, so an update that leaves a TOAST")
    assert "replica identity DEFAULT" in problem and "sets REPLICA IDENTITY FULL" in problem
    assert setup.install().changed == ("replica identity public.docs",)
    assert setup.verify() == []


def test_a_missing_table_is_named_and_install_changes_nothing(pg_server: PostgresServer, db: str) -> None:
    pg_server.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)", database=db)
    cfg = config(pg_server, db, {"orders": ["id"], "ghost": ["id"]})
    setup = setup_of(cfg)
    problem = one(setup.verify(), r"table public\.ghost does not exist")
    assert f"database '{db}'" in problem and "sources.shop.tables" in problem
    with pytest.raises(CaptureNotInstalledError, match=r"public\.ghost does not exist"):
        setup.install()
    assert pg_server.query("SELECT count(*) FROM pg_publication", database=db) == [(0,)]
    assert identity(pg_server, db, "orders") == "d"
    assert slot_row(pg_server, "databus_shop") is None

    # A table of another schema is not the configured one.
    pg_server.execute("CREATE SCHEMA sales", "CREATE TABLE sales.ghost (id int PRIMARY KEY)", database=db)
    one(setup.verify(), r"table public\.ghost does not exist")
    other = setup_of(config(pg_server, db, {"ghost": ["id"]}, schema="sales", name="sales"))
    other.install()
    assert other.verify() == []
    assert published(pg_server, db, "databus_sales") == {"ghost"}


def test_a_missing_slot_is_created_again(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    setup.install()
    pg_server.execute("SELECT pg_drop_replication_slot('databus_shop')")
    assert setup.verify() == ["replication slot 'databus_shop' does not exist: run `databus install --source shop`"]
    assert setup.install().changed == ("replication slot databus_shop",)
    assert setup.verify() == []


def test_a_lost_slot_is_a_note_naming_the_bootstrap_not_a_problem_install_could_fix(pg_server: PostgresServer,
                                                                                    db: str) -> None:
    """Capture names the gap (LogGapError, tests/test_postgres_capture.py) and a bootstrap remakes the slot; install
    cannot bring the lost changes back, so an invalidated slot is not among its problems."""
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    setup.install()
    pg_server.lose_slot("databus_shop", database=db)
    assert not [p for p in setup.verify() if "invalidated" in p or "lost" in p]
    assert slot_row(pg_server, "databus_shop") == ("pgoutput", db, "lost")
    notes = setup.notes()
    assert any("wal_status lost" in n for n in notes)
    note = next(n for n in notes if "was invalidated" in n)
    assert "databus bootstrap --source shop" in note and "on_purged: bootstrap" in note


def test_a_slot_of_another_plugin_or_database(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    pg_server.execute("SELECT pg_create_logical_replication_slot('databus_shop', 'test_decoding')", database=db)
    one(setup.verify(), r"replication slot 'databus_shop' is decoded by 'test_decoding', not a logical slot "
                        r"decoded by 'pgoutput'")
    with pytest.raises(CaptureNotInstalledError, match="test_decoding"):
        setup.install()
    pg_server.execute("SELECT pg_drop_replication_slot('databus_shop')")
    pg_server.execute("SELECT pg_create_logical_replication_slot('databus_shop', 'pgoutput')", database="databus")
    try:
        one(setup.verify(), r"belongs to database 'databus', not '" + db)
        assert setup.uninstall() == ()  # another database's slot is not this source's to drop
        assert slot_row(pg_server, "databus_shop") == ("pgoutput", "databus", "reserved")
    finally:
        pg_server.execute("SELECT pg_drop_replication_slot('databus_shop')")


def test_notes_name_the_version_and_the_wal_the_slot_holds(pg_server: PostgresServer, db: str) -> None:
    cfg = shop(pg_server, db)
    setup = setup_of(cfg)
    assert setup.notes()[1] == "replication slot 'databus_shop' not created yet"
    setup.install()
    pg_server.execute("INSERT INTO orders SELECT g, repeat('x', 100) FROM generate_series(1, 2000) AS g", database=db)
    version, slot = setup.notes()
    assert version == f"PostgreSQL {pg_server.setting('server_version')}, wal_level logical"
    held = int(re.fullmatch(r"replication slot 'databus_shop' holds (\d+) bytes .*\(wal_status reserved\)",
                            slot)[1])  # type: ignore[index]
    assert held > 200_000  # the rows inserted since the slot was created


def test_an_unreachable_server_is_transient() -> None:
    cfg = config(None, "shop", {"orders": ["id"]})
    with pytest.raises(SourceUnavailableError, match=f"127.0.0.1:{cfg.port}") as err:
        setup_of(cfg).verify()
    assert err.value.transient is True
    assert "check host and port" in err.value.fix


def test_refused_logins_name_the_field(pg_server: PostgresServer, db: str) -> None:
    pg_server.execute("DO $$BEGIN CREATE ROLE secret LOGIN PASSWORD 'right' IN ROLE password_auth; "
                      "EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    cfg = config(pg_server, db, {"orders": ["id"]}, user="secret", password="wrong")
    with pytest.raises(ConfigError) as err:
        PostgresConnector(cfg).connect()
    assert err.value.field == "sources.shop.password" and err.value.transient is False
    with pytest.raises(ConfigError) as err:
        PostgresConnector(config(pg_server, "nowhere", {"orders": ["id"]})).connect()
    assert err.value.field == "sources.shop.database"

    # The spec is plain data a Spark task can be handed; it logs in as the source does.
    spec = pickle.loads(pickle.dumps(PostgresConnector(config(pg_server, db, {"orders": ["id"]}, user="secret",
                                                              password="right")).spec()))
    with connect_spec(spec) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_user, current_setting('application_name')")
        assert cur.fetchone() == ("secret", "databus:shop")
    conn.close()
