"""Large PostgreSQL transactions against a real server: streamed before their commit (protocol 2) when they
outgrow the server's ``logical_decoding_work_mem``, spooled to disk by capture once they outgrow ``SPOOL_ROWS``,
and written whole as one window either way. Subtransactions rolled back inside a streamed transaction leave
nothing, a streamed transaction rolled back leaves nothing, and transactions that commit while one streams land
before it, in commit order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SchemaDriftError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.columns import table_changes
from dagster_databus.sources.postgres import reader, spool, stream
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match
from tests.support.harness import PostgresHarness, make_config

TABLES = [("a", ["id"]), ("b", ["k1", "k2"])]
DDL = ["CREATE TABLE a (id BIGINT PRIMARY KEY, grp INT, v TEXT, amount NUMERIC(12, 2))",
       "CREATE TABLE b (k1 INT, k2 TEXT, n INT, PRIMARY KEY (k1, k2))"]


def configured(pg: PostgresHarness, lake: Path, stream_from_kb: int | None) -> DatabusConfig:
    """The two tables, installed; with ``stream_from_kb``, the database's walsenders stream any transaction past
    that much decoded change (the server's floor is 64 kB) instead of holding it to its commit."""
    pg.execute(DDL)
    if stream_from_kb is not None:
        pg.server.execute(f'ALTER DATABASE "{pg.database}" SET logical_decoding_work_mem = \'{stream_from_kb}kB\'')
    config = make_config(lake, pg.source_config("shop", TABLES), merge={"engine": "local"})
    capture.install(config, "shop")
    return config


def streamed_transactions(pg: PostgresHarness) -> int:
    [(count,)] = pg.server.query(
        "SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots s JOIN pg_replication_slots r "
        "USING (slot_name) WHERE r.database = %s AND NOT r.temporary", (pg.database,))
    return int(count)


def windows_of(config: DatabusConfig) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Every event in the log by window, then table: the rows with their ``__seq`` and ``__op``."""
    log = ChangeLog(config.lake, "shop")
    found: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for table, _ in TABLES:
        latest = log.schemas.latest(table)
        assert latest is not None
        for batch in table_changes(log, latest[1], Scn.BEGINNING):
            for row in batch.to_pylist():
                found.setdefault(row["__window_scn"], {}).setdefault(table, []).append(row)
    return dict(sorted(found.items()))


def seqs_are_whole(window: dict[str, list[dict[str, Any]]]) -> bool:
    seqs = sorted(row["__seq"] for rows in window.values() for row in rows)
    return seqs == list(range(len(seqs)))


def big_transaction(first: int, rows: int) -> list[str]:
    """Inserts into both tables, then updates, a key change and deletes of rows it inserted: a transaction whose
    order matters (each change follows the insert it changes)."""
    last = first + rows - 1
    return [f"INSERT INTO a SELECT g, g % 10, repeat('v', 40) || g, g / 3.0 FROM generate_series({first}, {last}) g",
            f"INSERT INTO b SELECT g, 'k' || g, 0 FROM generate_series({first}, {first + rows // 2}) g",
            f"UPDATE a SET v = 'updated ' || id WHERE id % 7 = 0 AND id BETWEEN {first} AND {last}",
            f"UPDATE b SET k2 = 'moved' || k1 WHERE k1 % 11 = 0 AND k1 BETWEEN {first} AND {last}",
            f"DELETE FROM a WHERE id % 13 = 0 AND id BETWEEN {first} AND {last}"]


def test_a_transaction_past_spool_rows_is_spooled_and_written_whole_in_commit_order(
        pg: PostgresHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lazy_spark: Any) -> None:
    monkeypatch.setattr(spool, "SPOOL_ROWS", 700)  # the same path a transaction of millions takes, with thousands
    monkeypatch.setattr(reader, "SPOOL_ROWS", 700)
    config = configured(pg, tmp_path / "lake", None)
    pg.execute(["INSERT INTO a VALUES (1, 1, 'small before', 1)"])
    pg.execute(big_transaction(100, 3000))
    pg.execute(["INSERT INTO a VALUES (2, 2, 'small after', 2)", "UPDATE a SET grp = 99 WHERE id = 100"])
    result = capture.run(config, "shop")
    assert streamed_transactions(pg) == 0, "the server held the transaction to its commit: capture spooled it"
    windows = windows_of(config)
    sizes = [sum(len(rows) for rows in w.values()) for w in windows.values()]
    [(expected,)] = pg.query("SELECT 3000 + 1501 + (SELECT count(*) FROM generate_series(100, 3099) g "
                             "WHERE g % 7 = 0) + 2 * (SELECT count(*) FROM generate_series(100, 1600) g "
                             "WHERE g % 11 = 0) + (SELECT count(*) FROM generate_series(100, 3099) g WHERE g % 13 = 0)")
    assert sizes == [1, expected, 2] and result.events == expected + 3 and result.windows == 3
    assert all(seqs_are_whole(w) for w in windows.values())
    segments = ChangeLog(config.lake, "shop").manifest().segments
    assert [s.windows for s in segments if s.events == expected] == [1], "the big window is one segment"
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)


@pytest.mark.parametrize("protocol", [2, 1])
def test_streamed_transactions_keep_only_what_committed_in_commit_order(
        pg: PostgresHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lazy_spark: Any, protocol: int) -> None:
    monkeypatch.setattr(spool, "SPOOL_ROWS", 1000)  # pieces on disk and rows in memory, both
    monkeypatch.setattr(reader, "SPOOL_ROWS", 1000)
    if protocol == 1:  # as a PostgreSQL 13 server is read: the same transactions, held by the server to their commit
        monkeypatch.setattr(stream, "STREAMING_SINCE", 10**9)
    config = configured(pg, tmp_path / "lake", 64)
    # Spools in a folder of this test's own: another worker's capture may spool in the system's meanwhile.
    spools = tmp_path / "spools"
    spools.mkdir()
    monkeypatch.setattr(spool.tempfile, "tempdir", str(spools))
    before = set(spools.glob("databus-spool-*"))
    long, other = pg.connect(), pg.connect()
    try:
        with long.cursor() as cur:
            for statement in big_transaction(1000, 2500)[:2]:
                cur.execute(statement)
            cur.execute("SAVEPOINT before_mistake")
            cur.execute("INSERT INTO a SELECT g, 0, 'rolled back', 0 FROM generate_series(50000, 52000) g")
            cur.execute("UPDATE a SET v = 'rolled back too' WHERE id BETWEEN 1000 AND 1500")
            cur.execute("ROLLBACK TO SAVEPOINT before_mistake")
            with other.cursor() as other_cur:  # commits while the long one is open: its window comes first
                other_cur.execute("INSERT INTO a VALUES (7, 7, 'committed meanwhile', 7)")
            other.commit()
            for statement in big_transaction(1000, 2500)[2:]:
                cur.execute(statement)
            cur.execute("SAVEPOINT kept")
            cur.execute("INSERT INTO b VALUES (-1, 'kept savepoint', 1)")
            cur.execute("RELEASE SAVEPOINT kept")
        long.commit()
    finally:
        long.close()
        other.close()
    pg.execute(["INSERT INTO a SELECT g, 0, 'rolled back whole', 0 FROM generate_series(60000, 63000) g"],
               commit=False)
    pg.execute(["INSERT INTO a VALUES (8, 8, 'last', 8)"])
    result = capture.run(config, "shop")
    streamed = streamed_transactions(pg)
    assert streamed >= 1 if protocol == 2 else streamed == 0, "streamed before its commit under protocol 2 only"
    windows = list(windows_of(config).values())
    assert [sorted({r["v"] for r in w.get("a", []) if r["id"] < 10}) for w in windows] == [
        ["committed meanwhile"], [], ["last"]]
    long_window = windows[1]
    assert not [r for r in long_window["a"] if r["id"] >= 50000 or (r["v"] or "").startswith("rolled back")]
    assert any(r["k1"] == -1 for r in long_window["b"]) and seqs_are_whole(long_window)
    assert result.windows == 3
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)
    # Nothing left on disk: the spool's folders go with the transaction.
    assert set(spools.glob("databus-spool-*")) == before


def test_a_streamed_transaction_that_alters_a_table_between_its_rows_is_refused_then_bootstrapped(
        pg: PostgresHarness, tmp_path: Path, lazy_spark: Any) -> None:
    config = configured(pg, tmp_path / "lake", 64)
    pg.execute(["INSERT INTO a VALUES (1, 1, 'before', 1)"])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    checkpoint = log.checkpoint()
    pg.execute(["INSERT INTO a SELECT g, 0, repeat('w', 60), 0 FROM generate_series(10, 3009) g",
                "ALTER TABLE a ADD COLUMN note TEXT",
                "INSERT INTO a SELECT g, 0, repeat('w', 60), 0, 'after' FROM generate_series(5000, 7999) g"])
    with pytest.raises(SchemaDriftError, match="between its row changes") as stopped:
        capture.run(config, "shop")
    assert streamed_transactions(pg) >= 1, "the server streamed the transaction before its commit"
    assert "databus bootstrap --source shop" in stopped.value.fix
    assert log.checkpoint() == checkpoint and [e.event.key for e in log.read()] == [(1,)]
    capture.restart(config, "shop")
    capture.run(config, "shop")
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)
