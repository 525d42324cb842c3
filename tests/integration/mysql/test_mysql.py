"""MySQL/MariaDB specifics against real servers the tests start: preflight, credentials, rotation,
DDL while lagging, purged binlogs, RESET MASTER, TRUNCATE, bootstrap under concurrent writes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import (
    CaptureNotInstalledError,
    ConfigError,
    EpochMismatchError,
    LogGapError,
    SchemaDriftError,
    SourceUnavailableError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer, free_port

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def shop(harness: MysqlHarness, tmp_path: Path, **extra):
    harness.create_shop()
    return make_config(tmp_path / "lake", harness.source_config("shop", SHOP, **extra))


@pytest.mark.server  # started in the test
def test_preflight_reports_every_missing_setting_at_once(tmp_path: Path) -> None:
    server = MariaDBServer(binlog=True, extra_args=["--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL",
                                                    "--binlog-row-metadata=MINIMAL"])
    try:
        harness = MysqlHarness(server)
        config = shop(harness, tmp_path)
        with pytest.raises(CaptureNotInstalledError) as err:
            capture.install(config, "shop")
        message = str(err.value)
        assert "binlog_format is 'STATEMENT'" in message and "SET GLOBAL binlog_format = 'ROW'" in message
        assert "binlog_row_image is 'MINIMAL'" in message and "binlog_row_metadata is 'MINIMAL'" in message
        assert not (tmp_path / "lake").exists()
    finally:
        server.close()


@pytest.mark.server  # started in the test
def test_preflight_on_a_server_with_binary_logging_off(tmp_path: Path) -> None:
    server = MariaDBServer(binlog=False)
    try:
        config = shop(MysqlHarness(server), tmp_path)
        with pytest.raises(CaptureNotInstalledError, match=r"log_bin is 'OFF'.*enable binary logging"):
            capture.install(config, "shop")
        with pytest.raises(CaptureNotInstalledError):
            capture.run(config, "shop")
        assert not (tmp_path / "lake").exists()
    finally:
        server.close()


def test_missing_replication_privileges_are_named_with_the_grant(mariadb: MariaDBServer, tmp_path: Path) -> None:
    harness = MysqlHarness(mariadb)
    harness.create_shop()
    mariadb.execute("CREATE USER IF NOT EXISTS 'reader'@'%' IDENTIFIED BY 'pw'",
                    f"GRANT SELECT ON {harness.database}.* TO 'reader'@'%'")
    config = make_config(tmp_path / "lake", {**harness.source_config("shop", SHOP), "user": "reader",
                                              "password": "pw"})
    with pytest.raises(CaptureNotInstalledError) as err:
        capture.install(config, "shop")
    assert "GRANT REPLICATION SLAVE ON *.* TO 'reader'@'%'" in str(err.value)
    assert "lacks SELECT" not in str(err.value)


def test_the_grant_hints_paste_as_they_are_for_an_account_bound_to_a_host(mariadb: MariaDBServer,
                                                                          tmp_path: Path) -> None:
    harness = MysqlHarness(mariadb)
    harness.create_shop()
    mariadb.execute("CREATE USER IF NOT EXISTS 'weak'@'127.0.0.1' IDENTIFIED BY 'pw'")
    config = make_config(tmp_path / "lake", {**harness.source_config("shop", SHOP), "user": "weak",
                                              "password": "pw"})
    pasted: list[str] = []
    for _ in range(2):  # first the database, then the replication privileges
        with pytest.raises(CaptureNotInstalledError) as err:
            capture.install(config, "shop")
        hints = [line[line.index("GRANT "):] for line in str(err.value).splitlines() if "GRANT " in line]
        assert hints and all(h.endswith("TO 'weak'@'127.0.0.1'") for h in hints), str(err.value)
        mariadb.execute(*hints)  # as an operator would paste them
        pasted += hints
    assert len(pasted) == 3
    capture.install(config, "shop")


def test_wrong_password_and_unreachable_server_fail_fast(mariadb: MariaDBServer, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    harness = MysqlHarness(mariadb)
    harness.create_shop()
    config = make_config(tmp_path / "lake", {**harness.source_config("shop", SHOP), "password": "wrong"})
    with pytest.raises(ConfigError) as err:
        capture.install(config, "shop")
    assert err.value.field == "sources.shop.password" and "access denied" in str(err.value)

    monkeypatch.setenv("SHOP_PW", "")
    from_env = make_config(tmp_path / "lake", {**harness.source_config("shop", SHOP), "password_env": "SHOP_PW"})
    capture.install(from_env, "shop")  # the empty root password, from the environment

    nowhere = make_config(tmp_path / "lake2", {**harness.source_config("shop", SHOP), "port": free_port(),
                                               "connect_timeout_s": 2})
    started = time.monotonic()
    with pytest.raises(SourceUnavailableError, match="cannot reach MySQL source 'shop'"):
        capture.install(nowhere, "shop")
    assert time.monotonic() - started < 10
    assert not (tmp_path / "lake2").exists()


def test_capture_follows_binlog_rotation(mariadb: MariaDBServer, tmp_path: Path, spark) -> None:
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path, poll={"chunk_rows": 25})
    workload = harness.workload(seed=31)
    cycle(config, spark)
    first_file = mariadb.query("SHOW MASTER STATUS")[0][0]
    for _ in range(3):
        workload.run(20)
        mariadb.execute("FLUSH BINARY LOGS")
    workload.run(20)
    result = capture.run(config, "shop")
    assert mariadb.query("SHOW MASTER STATUS")[0][0] != first_file
    assert result.until.value >> 32 > ChangeLog(config.lake, "shop").manifest().start_scn.value >> 32
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)


def test_alter_table_while_the_pipeline_lags(mariadb: MariaDBServer, tmp_path: Path, spark) -> None:
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path)
    workload = harness.workload(seed=5)
    workload.run(20)
    cycle(config, spark)
    workload.run(20)
    harness.execute([
        "ALTER TABLE customers ADD COLUMN tier VARCHAR(10) DEFAULT 'basic'",
        "UPDATE customers SET tier = 'gold' WHERE id % 3 = 0",
    ])
    mariadb.execute("ALTER TABLE orders DROP COLUMN note", "ALTER TABLE orders RENAME COLUMN status TO state",
                    "ALTER TABLE order_items MODIFY qty VARCHAR(10)", database=harness.database)
    harness.execute([("INSERT INTO orders (id, customer_id, state, total, placed_at) VALUES (?, ?, ?, ?, ?)",
                      (9000, 1, "new", 1.0, "2026-01-01 00:00:00")),
                     ("INSERT INTO order_items VALUES (?, ?, ?, ?, ?, ?)", (9000, 1, "SKU-9", "two", 1.0, None))])
    results = {r.table: r for r in cycle(config, spark)}  # lagging: the DDL is in the middle of this poll
    log = ChangeLog(config.lake, "shop")
    assert {r.table for r in log.ddl.records()} == {"customers", "orders", "order_items"}
    assert all(results[t].bootstrapped_at is not None for t in ("orders", "order_items")), "re-read: drop, retype"
    # A column added with a constant default is filled in the lake: the table is not read again.
    assert results["customers"].bootstrapped_at is None
    assert results["customers"].evolved == "added tier (filled with basic)"
    assert len(log.schemas.versions("orders")) >= 2
    columns = DeltaSnapshot(config.lake, "shop", "orders").read().column_names
    assert "state" in columns and "status" not in columns and "note" not in columns
    assert_snapshots_match(config)
    # The workload still speaks the old columns: write by hand.
    harness.execute([("UPDATE customers SET tier = ? WHERE id = ?", ("platinum", 1)),
                     ("UPDATE order_items SET qty = ? WHERE order_id = ?", ("many", 9000))])
    cycle(config, spark)
    assert_snapshots_match(config)


def test_truncate_is_applied_to_the_snapshot(mariadb: MariaDBServer, tmp_path: Path, spark) -> None:
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path)
    harness.workload(seed=2).run(20)
    cycle(config, spark)
    assert DeltaSnapshot(config.lake, "shop", "order_items").row_count() > 0
    mariadb.execute("TRUNCATE TABLE order_items", database=harness.database)
    harness.execute([("INSERT INTO order_items VALUES (?, ?, ?, ?, ?, ?)", (1, 1, "SKU-1", 1, 2.0, None))])
    cycle(config, spark)
    assert DeltaSnapshot(config.lake, "shop", "order_items").row_count() == 1
    assert_snapshots_match(config)


def test_purged_binlog_stops_with_bootstrap_advice_or_bootstraps_when_opted_in(
    own_server: MariaDBServer, tmp_path: Path, spark
) -> None:
    harness = MysqlHarness(own_server)
    config = shop(harness, tmp_path)
    workload = harness.workload(seed=8)
    workload.run(10)
    cycle(config, spark)
    workload.run(10)  # captured by nobody yet
    own_server.execute("FLUSH BINARY LOGS")
    newest = own_server.query("SHOW MASTER STATUS")[0][0]
    own_server.purge_binlogs_to(newest)
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    with pytest.raises(LogGapError, match=r"(?s)was purged.*databus bootstrap --source shop"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == checkpoint

    opted_in = make_config(config.lake, harness.source_config("shop", SHOP, on_purged="bootstrap"))
    result = capture.run(opted_in, "shop")
    assert result.bootstrapped
    workload.run(10)
    results = cycle(opted_in, spark)
    assert all(r.bootstrapped_at is not None for r in results)
    assert_snapshots_match(opted_in)


@pytest.mark.parametrize("files_after_reset", [0, 3])
def test_reset_master_is_an_epoch_change(own_server: MariaDBServer, tmp_path: Path, spark,
                                         files_after_reset: int) -> None:
    harness = MysqlHarness(own_server)
    config = shop(harness, tmp_path)
    workload = harness.workload(seed=9)
    for _ in range(3):  # the checkpoint ends up in a later binlog file
        workload.run(5)
        own_server.execute("FLUSH BINARY LOGS")
    cycle(config, spark)
    time.sleep(1.1)  # binlog creation times have one-second resolution
    own_server.execute("RESET MASTER")
    for _ in range(files_after_reset):  # reuse the checkpoint's file name
        workload.run(30)
        own_server.execute("FLUSH BINARY LOGS")
    workload.run(5)
    with pytest.raises(EpochMismatchError, match=r"(?s)RESET MASTER.*databus bootstrap --source shop"):
        capture.run(config, "shop")
    capture.restart(config, "shop")
    workload.run(5)
    cycle(config, spark)
    assert_snapshots_match(config)


@pytest.mark.parametrize("reads", ["auto", "watermark"])
def test_bootstrap_of_a_table_under_concurrent_writes(mariadb: MariaDBServer, tmp_path: Path, spark,
                                                      reads: str) -> None:
    """auto: MariaDB's snapshot positions; watermark: MySQL's way (no such positions), run here on MariaDB,
    which commits in binlog order as MySQL does with binlog_order_commits: a write to the signal table
    before each range, and no lock (FLUSH counted)."""
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path, bootstrap_chunk_rows=7, bootstrap_reads=reads)  # many ranges and pages
    harness.workload(seed=12).run(80)
    report = capture.install(config, "shop")
    assert ("_databus_signal" in report.changed) == (reads == "watermark")
    flushes = int(mariadb.query("SHOW GLOBAL STATUS LIKE 'Com_flush'")[0][1])
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        workload = harness.workload(seed=13)
        try:
            while not stop.is_set():
                workload.run(1)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        capture.run(config, "shop")
        sync_source(spark, config, "shop")  # bootstraps every table while the writer runs
    finally:
        stop.set()
        writer.join()
    assert not errors
    # Key ranges were read by parallel Spark tasks, each in its own snapshot at its own position.
    positions = {r["__scn"] for r in DeltaSnapshot(config.lake, "shop", "order_items").read(with_meta=True)
                 .to_pylist() if r["__op"] == "r"}
    assert len(positions) > 1
    assert int(mariadb.query("SHOW GLOBAL STATUS LIKE 'Com_flush'")[0][1]) == flushes  # no read lock taken
    if reads == "watermark":
        [(position,)] = harness.query("SELECT position FROM _databus_signal WHERE source = 'shop'")
        assert position.startswith("mysql-bin.") or ":" in position
    cycle(config, spark)
    assert_snapshots_match(config)


def test_watermark_reads_without_their_signal_table_say_how_to_create_it(mariadb: MariaDBServer,
                                                                         tmp_path: Path, spark) -> None:
    from dagster_databus.errors import CaptureNotInstalledError

    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path, bootstrap_reads="watermark")
    with pytest.raises(CaptureNotInstalledError, match=r"signal table .*_databus_signal .* does not exist") as err:
        sync_source(spark, config, "shop", ["customers"])
    assert "databus install --source shop" in err.value.fix


@pytest.mark.parametrize("error", [
    (4052, "A slave with the same server_uuid/server_id is already connected"),  # MariaDB, to the newcomer
    (1236, "A slave with the same server_uuid/server_id as this slave has connected to the master; the first "
           "event 'mysql-bin.000002' at 4, ..."),  # MySQL, to the reader it drops
])
def test_a_second_binlog_reader_with_the_capture_server_id_is_named_a_concurrent_run(
        mariadb: MariaDBServer, tmp_path: Path, error: tuple[int, str]) -> None:
    """Two captures of one source sharing only an object-store lake both reach the server, which keeps
    one binlog reader per replica server id. Capture reopens a dump connection the server dropped while
    streaming (the log's commit then fences the loser), so this is the error where it does not: the server's
    refusal as the server words it (a seam: the race itself cannot be staged reliably)."""
    import pymysql

    from dagster_databus.errors import ConcurrentRunError
    from dagster_databus.sources import open_source

    harness = MysqlHarness(mariadb)
    harness.create_shop()
    source = open_source(make_config(tmp_path / "lake", harness.source_config("shop", SHOP)).source("shop"))
    with pytest.raises(ConcurrentRunError, match=r"another capture of source 'shop' is reading the binlog with "
                                                 r"replica server id \d+ \(A slave with the same") as err:
        source.servers.refuse_second_reader(pymysql.err.OperationalError(*error))
    assert "must not overlap" in err.value.fix
    gap = pymysql.err.OperationalError(1236, "Could not find first log file name")
    source.servers.refuse_second_reader(gap)  # a gap


def test_a_run_of_a_source_whose_binlog_another_run_reads_is_turned_away_up_front(mariadb: MariaDBServer,
                                                                                  tmp_path: Path) -> None:
    """The lock is the server's, so runs sharing nothing else (an object-store lake, other hosts) still
    see each other; it lives with its connection, so a run that dies frees it."""
    from dagster_databus.errors import ConcurrentRunError
    from dagster_databus.sources import open_source

    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path)
    capture.install(config, "shop")
    harness.workload(seed=9).run(10)
    before = ChangeLog(config.lake, "shop").checkpoint()
    holder = open_source(config.source("shop"))
    with holder.stream.reading():
        with pytest.raises(ConcurrentRunError, match=r"the binlog of source 'shop' is locked by another run "
                                                     r"\(lock 'databus\.binlog\.\d+' held by connection \d+") as err:
            capture.run(config, "shop")
        assert "must not overlap" in err.value.fix
        assert ChangeLog(config.lake, "shop").checkpoint() == before  # turned away before reading anything
    assert capture.run(config, "shop").events > 0  # the holder gone, the next run reads what was held back


def with_table_policy(config, table: str, policy: str):
    source = config.sources[0]
    tables = tuple(t.model_copy(update={"schema_changes": policy}) if t.name == table else t for t in source.tables)
    return config.model_copy(update={"sources": (source.model_copy(update={"tables": tables}),)})


def without_table(config, table: str):
    source = config.sources[0]
    tables = tuple(t for t in source.tables if t.name != table)
    return config.model_copy(update={"sources": (source.model_copy(update={"tables": tables}),)})


def test_schema_changes_evolve_in_place_or_hold_as_each_tables_policy_says(mariadb: MariaDBServer, tmp_path: Path,
                                                                           spark) -> None:
    harness = MysqlHarness(mariadb)
    config = with_table_policy(shop(harness, tmp_path), "order_items", "stop")  # the source's default: evolve
    workload = harness.workload(seed=9)
    workload.run(20)
    cycle(config, spark)
    workload.run(10)
    capture.run(config, "shop")  # changes in the old shape, still unmerged: the snapshots lag across the DDL
    harness.execute([
        "ALTER TABLE customers ADD COLUMN tier VARCHAR(10)",  # nullable, no default: existing rows hold NULL
        "ALTER TABLE customers MODIFY city VARCHAR(200)",  # wider text: the same snapshot type
        "ALTER TABLE orders MODIFY customer_id BIGINT NOT NULL",  # int -> long
        "ALTER TABLE order_items ADD COLUMN gift TINYINT",
    ])
    harness.execute([("UPDATE customers SET tier = ? WHERE id % 2 = 0", ("gold",)),
                     ("INSERT INTO orders (id, customer_id, status, total, placed_at) VALUES (?, ?, ?, ?, ?)",
                      (9001, 2**40, "new", 1.5, "2026-01-01 00:00:00"))])
    workload.run(10)
    capture.run(config, "shop")
    before = DeltaSnapshot(config.lake, "shop", "order_items").applied_scn()
    with pytest.raises(SchemaDriftError, match=r"(?s)'order_items'.*ADD COLUMN gift.*policy is stop.*schema_changes"):
        sync_source(spark, config, "shop")
    results = {r.table: r for r in sync_source(spark, config, "shop", tables=["customers", "orders"])}
    assert results["customers"].bootstrapped_at is None and results["orders"].bootstrapped_at is None
    snapshots = {t: DeltaSnapshot(config.lake, "shop", t) for t in ("customers", "orders", "order_items")}
    assert "tier" in snapshots["customers"].read().column_names
    assert snapshots["orders"].delta_types()["customer_id"] == "long"
    assert max(snapshots["orders"].read()["customer_id"].to_pylist()) == 2**40
    assert_snapshots_match(without_table(config, "order_items"))
    assert snapshots["order_items"].applied_scn() == before  # held at the change, as its policy says
    # Told to read it again, the held table catches up.
    config = with_table_policy(config, "order_items", "resnapshot")
    [items] = sync_source(spark, config, "shop", tables=["order_items"])
    assert items.bootstrapped_at is not None and "gift" in snapshots["order_items"].read().column_names
    assert_snapshots_match(config)
    # Evolved once: later syncs merge as usual.
    workload.run(5)
    assert all(r.bootstrapped_at is None and r.evolved is None for r in cycle(config, spark))
    assert_snapshots_match(config)


class ShapeRecorder(DatabusConsumer):
    """Each table's rows in delivery order, with the schema changes announced between them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []  # ("schema", table, column names) or ("row", table, row)

    def on_schema_change(self, table: str, version: int, schema: Any) -> None:
        self.seen.append(("schema", table, tuple(schema.column_names)))

    def on_data_event(self, event: Any) -> None:
        self.seen.append(("row", event.table, dict(event.row)))


def test_a_consumer_lagging_across_schema_changes_is_told_each_shape_before_its_rows(mariadb: MariaDBServer,
                                                                                    tmp_path: Path) -> None:
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path)
    capture.install(config, "shop")  # the log starts here
    harness.workload(seed=12).run(10)
    capture.run(config, "shop")
    recorder = ShapeRecorder()
    client = DatabusClient(config.lake, "shop", recorder, bootstrap=False)
    client.run()  # caught up: each table's shape comes before its first row
    first = [s for s in recorder.seen if s[0] == "schema"]
    assert {s[1] for s in first} == {"customers", "orders", "order_items"}
    for table in ("customers", "orders"):
        kinds = [s[0] for s in recorder.seen if s[1] == table]
        assert kinds[0] == "schema" and kinds.count("schema") == 1
    recorder.seen.clear()
    harness.execute([("UPDATE orders SET status = ? WHERE id = 1", ("before",))])
    harness.execute(["ALTER TABLE orders ADD COLUMN channel VARCHAR(10)"])
    harness.execute([("UPDATE orders SET channel = ?, status = ? WHERE id = 1", ("web", "after-add"))])
    harness.execute(["ALTER TABLE orders RENAME COLUMN status TO state"])
    harness.execute([("UPDATE orders SET state = ? WHERE id = 1", ("after-rename",))])
    capture.run(config, "shop")
    client.run()  # lagging across both changes
    orders = [s for s in recorder.seen if s[1] == "orders"]
    assert [s[0] for s in orders] == ["row", "schema", "row", "schema", "row"]
    before, add, after_add, rename, after_rename = orders
    assert before[2]["status"] == "before" and "channel" not in before[2]
    assert "channel" in add[2] and "status" in add[2]
    assert after_add[2]["channel"] == "web" and after_add[2]["status"] == "after-add"
    assert "state" in rename[2] and "status" not in rename[2]
    assert after_rename[2]["state"] == "after-rename" and after_rename[2]["channel"] == "web"


def test_a_change_that_leaves_the_columns_alone_holds_nothing(mariadb: MariaDBServer, tmp_path: Path, spark) -> None:
    harness = MysqlHarness(mariadb)
    config = shop(harness, tmp_path, schema_changes="stop")
    workload = harness.workload(seed=13)
    workload.run(10)
    cycle(config, spark)
    harness.execute(["ALTER TABLE customers ADD INDEX by_city (city)"])
    workload.run(10)
    results = {r.table: r for r in cycle(config, spark)}  # under stop, still no error: nothing to follow
    assert [r.table for r in ChangeLog(config.lake, "shop").ddl.records()] == ["customers"]
    assert results["customers"].bootstrapped_at is None and results["customers"].evolved is None
    assert_snapshots_match(config)


def test_row_events_longer_than_a_packet_are_joined_from_their_packets(mariadb: MariaDBServer,
                                                                        tmp_path: Path) -> None:
    """The protocol carries at most 16 MiB - 1 in a packet: a longer event goes on in the packets after it,
    and one of exactly that length is followed by an empty packet. Capture joins both and reads on."""
    harness = MysqlHarness(mariadb)
    limit = 0xFFFFFF
    before = mariadb.query("SELECT @@GLOBAL.max_allowed_packet")[0][0]
    mariadb.execute("SET GLOBAL max_allowed_packet = 67108864")  # the blobs below: new connections take it
    try:
        mariadb.execute("CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)", database=harness.database)
        config = make_config(tmp_path / "lake", harness.source_config("s", [("blobs", ["id"])]))
        capture.install(config, "s")

        def insert(key: int, length: int) -> int:
            """A row of ``length`` bytes; the size of its row event's packet (an OK byte and the event)."""
            mariadb.execute(f"INSERT INTO blobs VALUES ({key}, REPEAT('x', {length}))", database=harness.database)
            log, _ = mariadb.query("SHOW BINLOG STATUS")[0][:2]
            events = mariadb.query(f"SHOW BINLOG EVENTS IN '{log}'")
            rows = [e for e in events if e[2].endswith("_rows_v1") or e[2].startswith("Write_rows")]
            return 1 + rows[-1][4] - rows[-1][1]  # End_log_pos - Pos

        packet = insert(1, limit + 1_000)  # two packets
        lengths = {1: limit + 1_000, 2: limit + 1_000 + (limit - packet)}
        assert insert(2, lengths[2]) == limit  # exactly one packet's worth: an empty packet follows
        mariadb.execute("INSERT INTO blobs VALUES (3, 'after')", database=harness.database)

        result = capture.run(config, "s")

        assert result.events == 3
        rows = {e.event.row["id"]: e.event.row["b"] for e in ChangeLog(config.lake, "s").read(tables=["blobs"])}
        assert rows == {1: b"x" * lengths[1], 2: b"x" * lengths[2], 3: b"after"}
    finally:
        mariadb.execute(f"SET GLOBAL max_allowed_packet = {before}")
