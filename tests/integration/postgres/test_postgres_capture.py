"""Capture from PostgreSQL against a real server, where pgoutput differs from a binlog: TOASTed values an update
leaves alone (sent as "unchanged"), TRUNCATE (no row events), schema changes known only from relation messages,
a slot dropped or invalidated behind capture's back, a transaction of a million rows, WAL of unpublished tables,
and a capture killed or a server restarted mid-stream. After each, the snapshots equal the source."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from deltalake import DeltaTable
from psycopg2.extras import LogicalReplicationConnection

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.errors import (
    CaptureNotInstalledError,
    LogGapError,
    SchemaDriftError,
    SchemaMismatchError,
    SourceUnavailableError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.columns import table_changes
from dagster_databus.sources.postgres.pgoutput import lsn_of, lsn_text
from dagster_databus.sources.postgres.reader import IDLE_ADVANCE_BYTES
from dagster_databus.sources.postgres.slots import let_go
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import PostgresHarness, config_document, make_config
from tests.support.paths import REPO

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]
PAIR = [("a", ["id"]), ("b", ["id"])]
PAIR_DDL = ["CREATE TABLE a (id INT PRIMARY KEY, v TEXT)", "CREATE TABLE b (id INT PRIMARY KEY, v TEXT)",
            "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 30) g",
            "INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 30) g"]


def configured(pg: PostgresHarness, lake: Any, tables: list[tuple[str, list[str]]], *ddl: Any,
               merge: dict[str, Any] | None = None, **extra: Any) -> DatabusConfig:
    pg.execute(list(ddl))
    config = make_config(lake, pg.source_config("shop", tables, **extra), merge=merge or {"engine": "local"})
    capture.install(config, "shop")
    return config


def slot_of(pg: PostgresHarness) -> str:
    [(slot,)] = pg.server.query("SELECT slot_name FROM pg_replication_slots WHERE database = %s AND NOT temporary",
                                (pg.database,))
    return str(slot)


def slot_state(pg: PostgresHarness) -> dict[str, Any]:
    [row] = pg.server.query(
        "SELECT active, confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
        "FROM pg_replication_slots WHERE slot_name = %s", (slot_of(pg),))
    return {"active": row[0], "confirmed": lsn_of(row[1]), "retained": row[2]}


def wait_inactive(pg: PostgresHarness) -> None:
    """The server notices a dead reader's connection a moment after it dies; its slot is busy until then."""
    deadline = time.monotonic() + 20
    while slot_state(pg)["active"] and time.monotonic() < deadline:
        time.sleep(0.1)


# -- TOAST ------------------------------------------------------------------------------------------------

DOCS = "CREATE TABLE docs (id INT PRIMARY KEY, n INT, body TEXT, blob BYTEA, doc JSONB)"
INSERT_DOC = "INSERT INTO docs VALUES (?, ?, ?, ?, ?)"


def big_values(seed: int) -> tuple[str, bytes, str]:
    """A text, a bytea and a jsonb of 100 kB that do not compress: stored out of line (TOAST)."""
    r = random.Random(seed)
    return r.randbytes(50_000).hex(), r.randbytes(100_000), json.dumps({"k": r.randbytes(50_000).hex()})


def as_values(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["body"], row["blob"], json.loads(row["doc"])


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_toasted_values_an_update_leaves_alone_keep_their_value_in_log_snapshot_and_history(
        pg: PostgresHarness, tmp_path: Path, engine: str, lazy_spark) -> None:
    pg.execute([DOCS])
    document = pg.source_config("shop", [("docs", ["id"])])
    document["tables"][0]["history"] = True
    config = make_config(tmp_path / "lake", document, merge={"engine": engine})
    big = {i: big_values(i) for i in range(1, 6)}
    pg.execute([(INSERT_DOC, (i, 0, *big[i])) for i in range(1, 5)])
    cycle(config, lazy_spark)
    [(identity, toasted)] = pg.query("SELECT relreplident, pg_relation_size(reltoastrelid) FROM pg_class "
                                     "WHERE relname = 'docs'")
    assert identity == "f" and toasted > 300_000, "install set FULL; the values lie out of line"
    pg.execute(["UPDATE docs SET n = n + 1 WHERE id IN (1, 2)"])  # the big values untouched: sent as unchanged
    pg.execute(["UPDATE docs SET id = 20 WHERE id = 3"])  # a key change: the old row goes, the new one has them
    pg.execute([(INSERT_DOC, (5, 0, *big[5])), "UPDATE docs SET n = 9 WHERE id = 5"])
    pg.execute(["DELETE FROM docs WHERE id = 4"])
    cycle(config, lazy_spark)
    assert_snapshots_match(config)
    original = {1: big[1], 2: big[2], 20: big[3], 5: big[5], 3: big[3], 4: big[4]}
    expected = {k: (b, blob, json.loads(doc)) for k, (b, blob, doc) in original.items()}
    rows = DeltaSnapshot(config.lake, "shop", "docs").read().to_pylist()
    assert {r["id"]: as_values(r) for r in rows} == {k: expected[k] for k in (1, 2, 20, 5)}
    events = [e.event for e in ChangeLog(config.lake, "shop").read() if e.event.op.value != "d"]
    assert [(e.op.value, e.key) for e in events if e.key != (5,)] == [("u", (1,)), ("u", (2,)), ("i", (20,))]
    assert all(as_values(e.row) == expected[e.key[0]] for e in events)
    versions = HistoryTable(config.lake, "shop", "docs").read(with_meta=True).to_pylist()
    assert all(as_values(v) == expected[v["id"]] for v in versions)
    assert sorted(v["id"] for v in versions if v["__end_scn"] is not None) == [1, 2, 3, 4]


def test_an_identity_set_back_to_default_behind_installs_back_stops_capture_with_the_fix(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    config = configured(pg, tmp_path / "lake", [("docs", ["id"])], DOCS,
                        *[(INSERT_DOC, (i, 0, *big_values(i))) for i in (1, 2)])
    cycle(config, lazy_spark)
    pg.execute(["ALTER TABLE docs REPLICA IDENTITY DEFAULT"])
    pg.execute(["UPDATE docs SET n = n + 1 WHERE id = 1"])  # logged without the old row: body is not in the WAL
    with pytest.raises(CaptureNotInstalledError, match=r"(?s)public\.docs has replica identity DEFAULT.*TOAST.*"
                                                       r"databus install --source shop"):
        capture.run(config, "shop")
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    capture.install(config, "shop")  # FULL again, but the update is in the WAL as it was written
    with pytest.raises(SchemaDriftError, match=r"(?s)'docs'.*column 'body' unchanged and out of line.*REPLICA "
                                               r"IDENTITY was not FULL.*databus bootstrap --source shop"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == checkpoint
    capture.restart(config, "shop")  # the log starts afresh after that update; the snapshots are read again
    pg.execute(["UPDATE docs SET n = n + 1 WHERE id = 2"])
    cycle(config, lazy_spark)
    assert_snapshots_match(config)


def test_a_refused_value_stops_capture_naming_the_transaction_that_holds_it(pg: PostgresHarness,
                                                                           tmp_path: Path) -> None:
    config = configured(pg, tmp_path / "lake", [("t", ["id"])], "CREATE TABLE t (id INT PRIMARY KEY, v NUMERIC(8, 2))")
    capture.run(config, "shop")
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    pg.execute(["INSERT INTO t VALUES (1, 1.5)"])
    [(after_good,)] = pg.query("SELECT pg_current_wal_insert_lsn()::text")
    pg.execute(["INSERT INTO t VALUES (2, 'NaN')"])  # no decimal holds it
    [(after_bad,)] = pg.query("SELECT pg_current_wal_insert_lsn()::text")
    with pytest.raises(SchemaMismatchError, match=r"column t\.v .*NaN.*\(the change events of the transaction "
                                                  r"committed at LSN (\w+/\w+)\)") as refused:
        capture.run(config, "shop")
    named = re.search(r"committed at LSN (\w+/\w+)", refused.value.problem)
    assert named and lsn_of(after_good) < lsn_of(named.group(1)) < lsn_of(after_bad), "the second transaction's"
    assert ChangeLog(config.lake, "shop").checkpoint() == checkpoint, "the good transaction before it waits too"


# -- TRUNCATE --------------------------------------------------------------------------------------------

def test_a_truncate_of_two_tables_and_one_inside_a_transaction_empty_the_snapshots(
        pg: PostgresHarness, lake: Any, lazy_spark) -> None:
    config = configured(pg, lake, PAIR, *PAIR_DDL)
    cycle(config, lazy_spark)
    pg.execute(["TRUNCATE a, b"])
    cycle(config, lazy_spark)
    assert [DeltaSnapshot(config.lake, "shop", t).read().num_rows for t in ("a", "b")] == [0, 0]
    pg.execute(["INSERT INTO a VALUES (1, 'x'), (2, 'y')", "INSERT INTO b VALUES (7, 'z')"])
    pg.execute(["INSERT INTO a VALUES (3, 'gone')", "TRUNCATE a", "INSERT INTO a VALUES (4, 'after')",
                "UPDATE b SET v = 'kept' WHERE id = 7"])
    cycle(config, lazy_spark)
    assert DeltaSnapshot(config.lake, "shop", "a").read().to_pylist() == [{"id": 4, "v": "after"}]
    assert DeltaSnapshot(config.lake, "shop", "b").read().to_pylist() == [{"id": 7, "v": "kept"}]
    assert_snapshots_match(config)
    statements = [(r.table, r.statement) for r in ChangeLog(config.lake, "shop").ddl.records()]
    assert statements == [("a", "TRUNCATE public.a"), ("b", "TRUNCATE public.b"), ("a", "TRUNCATE public.a")]


def test_a_truncate_under_schema_changes_stop_holds_both_snapshots(pg: PostgresHarness, tmp_path: Path,
                                                                   lazy_spark) -> None:
    config = configured(pg, tmp_path / "lake", PAIR, *PAIR_DDL, schema_changes="stop")
    cycle(config, lazy_spark)
    held = {t: DeltaSnapshot(config.lake, "shop", t).applied_scn() for t in ("a", "b")}
    pg.execute(["TRUNCATE a, b"])
    capture.run(config, "shop")
    with pytest.raises(SchemaDriftError, match=r"(?s)table 'a' .*TRUNCATE public\.a.*policy is stop"):
        sync_source(lazy_spark, config, "shop")
    assert {t: DeltaSnapshot(config.lake, "shop", t).applied_scn() for t in ("a", "b")} == held
    assert DeltaSnapshot(config.lake, "shop", "b").read().num_rows == 30


# -- schema changes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["evolve", "resnapshot", "stop"])
def test_column_changes_follow_the_schema_changes_policy(pg: PostgresHarness, tmp_path: Path, lazy_spark,
                                                         policy: str) -> None:
    pg.create_shop()
    config = make_config(tmp_path / "lake", pg.source_config("shop", SHOP, schema_changes=policy,
                                                             poll={"chunk_rows": 7}), merge={"engine": "local"})
    workload = pg.workload(seed=9)
    workload.run(20)
    cycle(config, lazy_spark)
    workload.run(10)
    capture.run(config, "shop")  # changes in the old shape, still unmerged: the snapshots lag across the change
    workload.run(5)  # old-shape changes the next capture reads before the new shape
    pg.execute(["ALTER TABLE orders ADD COLUMN channel TEXT DEFAULT 'web'",  # a constant default: filled in place
                "ALTER TABLE customers DROP COLUMN city",  # values gone: read again
                "ALTER TABLE order_items ALTER COLUMN discount TYPE NUMERIC(6, 3)"])  # double -> decimal: read again
    pg.execute([("INSERT INTO orders (id, customer_id, status, total) VALUES (?, ?, ?, ?)", (9001, 7, "new", 1.5)),
                "UPDATE customers SET name = name || '!' WHERE id % 3 = 0",
                "UPDATE order_items SET qty = qty + 1 WHERE line_no = 1"])
    capture.run(config, "shop")
    assert sorted(r.statement for r in ChangeLog(config.lake, "shop").ddl.records()) == [
        "ALTER TABLE customers DROP COLUMN city",
        "ALTER TABLE order_items (storage changed with no row events: rewritten (ALTER ... TYPE ... USING, VACUUM "
        "FULL, CLUSTER, TRUNCATE))",  # the retype rewrote the table: its storage tells it too
        "ALTER TABLE order_items ALTER COLUMN discount TYPE numeric(6,3)",
        "ALTER TABLE orders ADD COLUMN channel text DEFAULT 'web'"]
    snapshots = {t: DeltaSnapshot(config.lake, "shop", t) for t, _ in SHOP}
    if policy == "stop":
        before = {t: s.applied_scn() for t, s in snapshots.items()}
        with pytest.raises(SchemaDriftError, match=r"(?s)'customers'.*DROP COLUMN city.*policy is stop"):
            sync_source(lazy_spark, config, "shop")
        assert {t: s.applied_scn() for t, s in snapshots.items()} == before  # each held at the change
        config = make_config(tmp_path / "lake", pg.source_config("shop", SHOP, schema_changes="resnapshot"),
                             merge={"engine": "local"})
    results = {r.table: r for r in sync_source(lazy_spark, config, "shop")}
    if policy == "evolve":
        assert results["orders"].bootstrapped_at is None
        assert results["orders"].evolved == "added channel (filled with web)"
        assert set(r["channel"] for r in snapshots["orders"].read().to_pylist()) == {"web"}
        assert results["customers"].bootstrapped_at is not None and results["order_items"].bootstrapped_at is not None
    else:
        assert all(r.bootstrapped_at is not None for r in results.values())
    assert "city" not in snapshots["customers"].read().column_names
    assert_snapshots_match(config)
    pg.execute(["UPDATE orders SET channel = 'app', status = 'later' WHERE id % 2 = 0",
                "UPDATE customers SET name = name || '+' WHERE id % 4 = 0",
                ("UPDATE order_items SET discount = ? WHERE line_no = 2", (0.125,))])
    assert all(r.bootstrapped_at is None and r.evolved is None for r in cycle(config, lazy_spark))
    assert_snapshots_match(config)


def test_a_column_added_to_a_table_no_change_touched_since_still_reaches_its_snapshot(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    config = configured(pg, tmp_path / "lake", PAIR, *PAIR_DDL)
    cycle(config, lazy_spark)
    pg.execute(["ALTER TABLE a ADD COLUMN tag TEXT DEFAULT 'old'"])  # no change of a's rows follows
    pg.execute(["UPDATE b SET v = 'moved' WHERE id < 5"])
    [result_a, _] = cycle(config, lazy_spark)
    [ddl] = ChangeLog(config.lake, "shop").ddl.records()
    assert ddl.table == "a" and ddl.statement == "ALTER TABLE a ADD COLUMN tag text DEFAULT 'old'"
    assert result_a.evolved == "added tag (filled with old)"
    assert_snapshots_match(config)


# -- slots lost behind capture's back ----------------------------------------------------------------------

def synced_shop(pg: PostgresHarness, tmp_path: Path, lazy_spark) -> tuple[DatabusConfig, dict[str, Any], Any]:
    pg.create_shop()
    spec = pg.source_config("shop", SHOP)
    config = make_config(tmp_path / "lake", spec, merge={"engine": "local"})
    workload = pg.workload(seed=3)
    workload.run(20)
    cycle(config, lazy_spark)
    workload.run(10)
    return config, spec, workload


def test_a_slot_dropped_behind_captures_back_fails_naming_the_fix_or_is_bootstrapped(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    config, spec, workload = synced_shop(pg, tmp_path, lazy_spark)
    slot = slot_of(pg)
    pg.server.execute(("SELECT pg_drop_replication_slot(%s)", (slot,)))
    workload.run(10)  # no slot keeps these changes
    with pytest.raises(CaptureNotInstalledError, match=rf"(?s)replication slot '{slot}' does not exist.*"
                                                       r"databus install --source shop"):
        capture.run(config, "shop")
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    capture.install(config, "shop")  # a new slot, at the WAL written now
    workload.run(5)
    [problem] = capture.validate(config).problems["shop"]  # validate names it too, with the same fix
    assert "dropped and created again" in problem and "databus bootstrap --source shop" in problem
    with pytest.raises(LogGapError, match=r"(?s)dropped and created again.*databus bootstrap --source shop.*"
                                          r"on_purged: bootstrap"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == checkpoint
    bootstrapping = make_config(tmp_path / "lake", {**spec, "on_purged": "bootstrap"}, merge={"engine": "local"})
    assert capture.run(bootstrapping, "shop").bootstrapped
    workload.run(10)
    cycle(bootstrapping, lazy_spark)
    assert_snapshots_match(bootstrapping)


@pytest.mark.parametrize("on_purged", ["fail", "bootstrap"])
def test_a_slot_the_server_invalidated_fails_naming_the_fix_or_is_bootstrapped(
        pg: PostgresHarness, tmp_path: Path, lazy_spark, on_purged: str) -> None:
    config, spec, workload = synced_shop(pg, tmp_path, lazy_spark)
    pg.server.lose_slot(slot_of(pg), database=pg.database)
    config = make_config(tmp_path / "lake", {**spec, "on_purged": on_purged}, merge={"engine": "local"})
    if on_purged == "fail":
        with pytest.raises(LogGapError, match=r"(?s)was invalidated.*databus bootstrap --source shop.*on_purged"):
            capture.run(config, "shop")
        return
    assert capture.run(config, "shop").bootstrapped
    workload.run(10)
    cycle(config, lazy_spark)
    assert_snapshots_match(config)


# -- volume and idleness ----------------------------------------------------------------------------------

MEASURE = """
import json, resource, sys, time
import dagster_databus.core.crc32  # numba's compiled kernels: the same in every run, not the capture's
from dagster_databus import capture
from dagster_databus.config import load_config
config = load_config(sys.argv[1])
rss = lambda: int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) // 1024
before, started = rss(), time.monotonic()
result = capture.run(config, "shop")
print(json.dumps({"events": result.events, "windows": result.windows, "seconds": time.monotonic() - started,
                  "before_mb": before, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def test_a_million_row_transaction_is_captured_whole_in_memory_that_stays_flat(pg: PostgresHarness,
                                                                                  tmp_path: Path) -> None:
    config = configured(pg, tmp_path / "lake", [("big", ["id"])],
                        "CREATE TABLE big (id BIGINT PRIMARY KEY, grp INT, name TEXT, amount NUMERIC(12, 2), "
                        "at TIMESTAMPTZ)")
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps(config_document(config, [pg.source_config("shop", [("big", ["id"])])])))
    figures = {}
    for first, rows in ((1, 250_000), (250_001, 1_000_000)):  # a quarter of the rows, then all of them
        pg.execute([f"INSERT INTO big SELECT g, g % 100, 'name-' || g, g / 7.0, now() "
                    f"FROM generate_series({first}, {first + rows - 1}) g"])
        run = subprocess.run([sys.executable, "-c", MEASURE, str(config_file)], cwd=REPO, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        figures[rows] = found = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{rows:,} rows in one transaction: {found['seconds']:.1f}s, {rows / found['seconds']:,.0f} events/s, "
              f"peak RSS {found['peak_mb']} MB ({found['peak_mb'] - found['before_mb']} MB over the start)")
        assert (found["events"], found["windows"]) == (rows, 1)
    [(streamed,)] = pg.server.query("SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s",
                                    (slot_of(pg),))
    assert streamed >= 1, "past logical_decoding_work_mem (64 MB), the server streamed it before its commit"
    # Held whole, four times the rows took about 200 MB more; spooled, the same memory (pieces of SPOOL_ROWS).
    small, large = (figures[n]["peak_mb"] - figures[n]["before_mb"] for n in (250_000, 1_000_000))
    assert large - small < 48, figures
    log = ChangeLog(config.lake, "shop")
    segments = log.manifest().segments
    assert [(s.events, s.windows) for s in segments] == [(250_000, 1), (1_000_000, 1)]
    schema = log.schemas.latest("big")[1]  # type: ignore[index]
    ids, scns, ops = set(), set(), set()
    for batch in table_changes(log, schema, Scn(segments[0].last_scn)):
        ids.update(batch.column("id").to_pylist())
        scns.update(batch.column("__scn").to_pylist())
        ops.update(batch.column("__op").to_pylist())
    assert len(ids) == 1_000_000 and min(ids) == 250_001 and max(ids) == 1_250_000 and ops == {"i"}
    assert scns == {log.checkpoint().scn.value}  # type: ignore[union-attr]


def test_writes_to_unpublished_tables_let_the_slot_move_on(pg: PostgresHarness, tmp_path: Path) -> None:
    config = configured(pg, tmp_path / "lake", [("a", ["id"])], "CREATE TABLE a (id INT PRIMARY KEY)",
                        "CREATE TABLE other (id BIGINT, pad TEXT)")
    pg.execute(["INSERT INTO a VALUES (1)"])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    committed = log.checkpoint().scn  # type: ignore[union-attr]
    pg.execute(["INSERT INTO other SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g"])
    capture.run(config, "shop")
    assert log.checkpoint().scn == committed, "a little WAL after the last commit: the checkpoint stays on it"
    retained = []
    for _ in range(4):  # about 10 MB of WAL each, none of it for the publication
        pg.execute(["INSERT INTO other SELECT g, repeat('x', 100) FROM generate_series(1, 60000) g"])
        # A checkpoint logs the running transactions, as the server does every 15 s while it is busy: the points a
        # slot's stream may restart from, so its oldest WAL can go once it is confirmed past one.
        pg.server.execute("CHECKPOINT")
        assert capture.run(config, "shop").events == 0
        state = slot_state(pg)
        assert state["confirmed"] == log.checkpoint().scn.value  # type: ignore[union-attr]
        retained.append(state["retained"])
    print(f"WAL the slot holds after each capture: {[f'{r / 2**20:.1f} MiB' for r in retained]}")
    assert log.checkpoint().scn.value - committed.value > IDLE_ADVANCE_BYTES
    [(written,)] = pg.query(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn_text(committed.value)}')::bigint")
    assert max(retained) < 2 * IDLE_ADVANCE_BYTES < written, retained  # else it grows with every round


# -- a capture killed, a server restarted ------------------------------------------------------------------

def many_transactions(pg: PostgresHarness, first: int, count: int, rows: int = 500) -> int:
    """``count`` transactions of ``rows`` inserts and an update each, from id ``first``; how many changes."""
    for i in range(count):
        low = first + i * rows
        pg.execute([f"INSERT INTO t SELECT g, g % 7, md5(g::text) FROM generate_series({low}, {low + rows - 1}) g",
                    f"UPDATE t SET n = n + 1 WHERE id = {low}"])
    return count * (rows + 1)


def assert_exact(config: DatabusConfig, lazy_spark, changes: int) -> None:
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)
    order = [(e.event.scn, e.event.seq) for e in ChangeLog(config.lake, "shop").read()]
    assert order == sorted(order) and len(set(order)) == len(order) == changes, "nothing lost, nothing twice"


def test_a_capture_killed_mid_stream_then_run_again_loses_and_doubles_nothing(pg: PostgresHarness, tmp_path: Path,
                                                                              lazy_spark) -> None:
    spec = pg.source_config("shop", [("t", ["id"])], poll={"chunk_rows": 1000})
    pg.execute(["CREATE TABLE t (id INT PRIMARY KEY, n INT, pad TEXT)"])
    config = make_config(tmp_path / "lake", spec, merge={"engine": "local"})
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps(config_document(config, [spec])))
    capture.install(config, "shop")
    changes = many_transactions(pg, 1, 120)  # 60 chunks of two transactions
    # Capture's progress (a line per appended chunk) is on stderr; stdout holds only the step's summary.
    run = subprocess.Popen([sys.executable, "jobs/capture.py", "--config", str(config_file), "--source", "shop",
                            "--no-install"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    appended = 0
    assert run.stderr is not None
    said = []
    for line in run.stderr:
        said.append(line)
        appended += "appended SCN" in line
        if appended == 3:
            os.kill(run.pid, signal.SIGKILL)
            break
    assert run.wait(timeout=60) == -signal.SIGKILL, "".join(said)
    log = ChangeLog(config.lake, "shop")
    assert 0 < len(log.manifest().segments) < 60, "killed mid-stream, after some chunks were committed"
    wait_inactive(pg)
    changes += many_transactions(pg, 100_001, 4)
    capture.run(config, "shop")
    assert_exact(config, lazy_spark, changes)


def test_a_server_restart_mid_poll_is_transient_and_the_run_after_is_exact(pg: PostgresHarness, tmp_path: Path,
                                                                           lazy_spark) -> None:
    """The server crashes after the poll's second appended chunk (from capture's own progress report, so the
    moment does not race the machine's speed), with about 18 MB of changes still to stream: more than socket
    buffers hold, so the poll meets the lost connection after the windows they held."""
    # The test server commits without waiting for WAL (synchronous_commit off, for speed), and a crash loses what
    # the WAL writer had not written yet: this database's commits wait, so the source keeps every one it acknowledged.
    pg.server.execute(f'ALTER DATABASE "{pg.database}" SET synchronous_commit = on')
    config = configured(pg, tmp_path / "lake", [("t", ["id"])], "CREATE TABLE t (id INT PRIMARY KEY, n INT, pad TEXT)",
                        poll={"chunk_rows": 5000})
    changes = many_transactions(pg, 1, 20, rows=10_000)
    appended: list[str] = []

    def crash_after_two_chunks(line: str) -> None:
        if "appended SCN" in line:
            appended.append(line)
            if len(appended) == 2:
                pg.server.crash()

    try:
        with pytest.raises(SourceUnavailableError) as lost:
            capture.run(config, "shop", progress=crash_after_two_chunks)
    finally:
        pg.server.restart()
    # What the socket held when the server went is read and appended first: whole windows, never the rest.
    assert 2 <= len(appended) < 20, appended
    assert lost.value.transient and "run again" in lost.value.fix
    changes += many_transactions(pg, 400_001, 2, rows=100)
    capture.run(config, "shop")
    assert_exact(config, lazy_spark, changes)


def test_a_transaction_that_alters_a_table_between_its_row_changes_is_refused_then_bootstrapped(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    """One window cannot hold a table's rows in two shapes: capture stops naming the bootstrap with the log as the
    last run left it (nothing of that poll is committed), and the bootstrap it names ends with snapshots equal to
    the source."""
    config = configured(pg, tmp_path / "lake", [("t", ["id"])], "CREATE TABLE t (id INT PRIMARY KEY, n INT)")
    pg.execute(["INSERT INTO t VALUES (1, 1)"])
    cycle(config, lazy_spark)
    pg.execute(["INSERT INTO t VALUES (2, 2)"])
    pg.execute(["INSERT INTO t VALUES (3, 3)", "ALTER TABLE t ADD COLUMN note TEXT",
                "INSERT INTO t VALUES (4, 4, 'after')"])
    log = ChangeLog(config.lake, "shop")
    checkpoint = log.checkpoint()
    with pytest.raises(SchemaDriftError, match="between its row changes") as stopped:
        capture.run(config, "shop")
    assert "databus bootstrap --source shop" in stopped.value.fix
    assert log.checkpoint() == checkpoint and [e.event.key for e in log.read()] == [(1,)]
    capture.restart(config, "shop")
    cycle(config, lazy_spark)
    assert_snapshots_match(config)
    assert sorted(r["id"] for r in DeltaSnapshot(config.lake, "shop", "t").read().to_pylist()) == [1, 2, 3, 4]


# -- the slot after a capture --------------------------------------------------------------------------------

@contextmanager
def slot_held(pg: PostgresHarness, config: DatabusConfig, seconds: float) -> Iterator[None]:
    """The capture slot streamed by a connection that closes ``seconds`` after the block starts, without
    confirming anything: a capture that has just finished whose server process has not let go of the slot yet
    (on a loaded machine, a moment), as a read started right then sees it."""
    conn = psycopg2.connect(host=pg.server.host, port=pg.server.port, user="postgres", dbname=pg.database,
                            connection_factory=LogicalReplicationConnection)
    cursor = conn.cursor()
    cursor.start_replication(slot_name=slot_of(pg), decode=False, options={
        "proto_version": "1", "publication_names": config.source("shop").publication_name})
    wait_active(pg)
    closer = threading.Timer(seconds, conn.close)
    closer.start()
    try:
        yield
    finally:
        closer.join()


def wait_active(pg: PostgresHarness) -> None:
    deadline = time.monotonic() + 20
    while not slot_state(pg)["active"] and time.monotonic() < deadline:
        time.sleep(0.01)


def test_letting_go_of_the_slot_waits_for_the_server_and_confirms_what_the_stream_did_not(
        pg: PostgresHarness, tmp_path: Path) -> None:
    config = configured(pg, tmp_path / "lake", [("a", ["id"])], "CREATE TABLE a (id INT PRIMARY KEY)")
    pg.execute(["INSERT INTO a VALUES (1)"])
    [(through,)] = pg.query("SELECT pg_current_wal_insert_lsn()::text")
    assert slot_state(pg)["confirmed"] < lsn_of(through)
    with slot_held(pg, config, 0.5), closing(pg.server.connect(pg.database)) as conn:
        let_go(conn, slot_of(pg), Scn(lsn_of(through)))
        state = slot_state(pg)
    assert not state["active"], "let_go returned while the server still streamed the slot"
    assert state["confirmed"] == lsn_of(through), "the stream confirmed nothing: let_go confirms the slot itself"


def test_a_read_while_a_finished_capture_still_holds_the_slot_is_stamped_as_any_later_read_is(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    """Were the bootstrap stamped with its snapshot's own LSN (the slot could not be peeked) and a later read of
    the same rows with the earlier, settled position, the later read would order first: a refresh would not
    replace the bootstrap's rows, and reconciliation would find the snapshot ahead of the source for good."""
    config = configured(pg, tmp_path / "lake", [("a", ["id"])], "CREATE TABLE a (id INT PRIMARY KEY, v TEXT)",
                        "INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 20) g")
    pg.execute(["UPDATE a SET v = 'w' WHERE id = 3"])
    capture.run(config, "shop")
    with slot_held(pg, config, 0.5):
        sync_source(lazy_spark, config, "shop", mode="bootstrap")
    snap = DeltaSnapshot(config.lake, "shop", "a")
    stamped = snap.applied_scn()
    DeltaTable(snap.uri, storage_options=snap.storage_options).update(updates={"v": "'damaged'"})
    [result] = sync_source(lazy_spark, config, "shop", ["a"], mode="refresh",
                           rows=capture.row_selection(config, "shop", ["a"], where="id > 0"))
    assert result.refreshed is not None and result.refreshed.rows_read == 20
    assert_snapshots_match(config)
    check = reconcile_table(config, config.source("shop"), "a")
    assert check.reconciled and check.equal and check.scn == stamped, check


class _Sent:
    """A message as psycopg2's replication cursor returns it."""

    def __init__(self, payload: bytes, data_start: int) -> None:
        self.payload, self.data_start = payload, data_start


class _Socket:
    """The replication cursor, at the one seam capture's reader has: messages a server cannot be made to send."""

    wal_end = 0

    def __init__(self, *messages: _Sent) -> None:
        self.messages = list(messages)

    def read_message(self) -> _Sent | None:
        return self.messages.pop(0) if self.messages else None

    def send_feedback(self, **_: Any) -> None:
        pass


BEGIN = b"B" + struct.pack(">QqI", 10, 0, 1)  # final LSN, commit time, xid


def relation(oid: int) -> bytes:
    """A Relation message for table public.t (one int column, id, the key)."""
    return (b"R" + struct.pack(">I", oid) + b"public\0t\0d" + struct.pack(">H", 1) + b"\1id\0"
            + struct.pack(">Ii", 23, -1))


@pytest.mark.parametrize(("messages", "problem"), [
    ([b"B" + struct.pack(">Qq", 1, 2)], "ends 4 byte\\(s\\) early"),  # a Begin without its xid
    ([BEGIN, b"C" + struct.pack(">BQQq", 0, 1, 2, 3) + b"!"], "1 byte\\(s\\) past the end"),
    ([BEGIN, b"I" + struct.pack(">I", 0) + b"X"], "expected 'N' before the new tuple"),
    ([BEGIN, b"U" + struct.pack(">I", 0) + b"N" + struct.pack(">H", 1) + b"t" + struct.pack(">I", 9) + b"1"],
     "past the message"),
    ([BEGIN, b"D" + struct.pack(">I", 0) + b"Q"], "expected 'K' or 'O' in a delete"),
])
def test_a_malformed_message_read_by_its_fields_is_refused_as_the_decoder_refuses_it(
        pg: PostgresHarness, tmp_path: Path, messages: list[bytes], problem: str) -> None:
    """The reader takes Begin, row changes and Commit by their fields, past ``PgoutputDecoder.decode``: a message
    that does not parse still stops capture with the decoder's error, naming its type and LSN."""
    from dagster_databus.sources import open_source
    from dagster_databus.sources.base import PollStats
    from dagster_databus.sources.postgres.pgoutput import PgoutputMessageError
    from dagster_databus.sources.postgres.reader import PollReader

    config = configured(pg, tmp_path / "lake", [("t", ["id"])], "CREATE TABLE t (id int PRIMARY KEY)")
    stream = open_source(config.sources[0]).stream
    (oid,) = pg.query("SELECT 't'::regclass::oid")[0]
    sent = [relation(oid)] + [m[:1] + struct.pack(">I", oid) + m[5:] if m[:1] in b"IUD" else m for m in messages]
    socket = _Socket(*(_Sent(m, 0xB374D848) for m in sent))
    reader = PollReader(stream, socket, socket, Scn(0), Scn(1 << 40), PollStats(), {}, None)  # type: ignore[arg-type]
    with pytest.raises(PgoutputMessageError, match=problem) as caught:
        list(reader.read())
    assert "at LSN 0/B374D848" in caught.value.problem
