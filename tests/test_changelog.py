"""The change log: commit order, epochs, one writer, and crash safety at every publish step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_databus import pipeline
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConcurrentRunError, EpochMismatchError
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.merge import sync_source
from tests.conftest import assert_snapshots_match
from tests.harness import SqliteHarness, make_config

SCHEMA = TableSchema("s", "t", (Column("id", ColumnType("long")), Column("v", ColumnType("string"))), ("id",))


def window(*scns: int) -> Window:
    events = tuple(ChangeEvent(Scn(s), i, "t", Op.INSERT, (s,), {"id": s, "v": f"v{s}"}, 1_000 + s)
                   for i, s in enumerate(scns))
    return Window(scn=Scn(scns[-1]), events=events)


def test_append_and_read_back_whole_windows(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(1, 2), window(5)], "e1")
        w.append([window(7, 8, 9)], "e1")
    assert [w.scn.value for w in log.read_windows()] == [2, 5, 9]
    assert [[e.row for e in w.events] for w in log.read_windows(Scn(5))] == [
        [{"id": 7, "v": "v7"}, {"id": 8, "v": "v8"}, {"id": 9, "v": "v9"}]]
    assert log.checkpoint().scn == Scn(9) and log.committed_scn() == Scn(9)
    assert [(s.first_scn, s.last_scn, s.events) for s in log.manifest().segments] == [(1, 5, 3), (7, 9, 3)]


def test_the_log_refuses_to_go_backwards(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(5, 6)], "e1")
        with pytest.raises(ValueError, match="commit order"):
            w.append([window(6, 7)], "e1")
    assert log.committed_scn() == Scn(6)


def test_an_epoch_switch_is_recorded_and_keeps_the_log_and_its_id(tmp_path: Path) -> None:
    from dagster_databus.log.retention import apply_retention

    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(1, 2)], "e1")
        w.append([window(5)], "e1")
        log_id = log.manifest().log_id
        with pytest.raises(ValueError, match="resume after"):
            w.switch_epoch(Scn(5), "e2", {"server": "standby"}, {"method": "gtid"})
        w.switch_epoch(Scn(100), "e2", {"server": "standby"}, {"method": "gtid"})
        assert (log.checkpoint().scn, log.checkpoint().epoch, log.checkpoint().state) == (
            Scn(100), "e2", {"server": "standby"})
        with pytest.raises(EpochMismatchError):
            w.append([window(101)], "e1")  # the old epoch may not write any more
        w.append([window(101)], "e2")
        apply_retention(w, Scn(101), max_age_s=None, max_bytes=1)
    manifest = log.manifest()
    assert log_id and manifest.log_id == log_id  # the switch and retention keep the log's identity
    assert manifest.epoch == "e2" and manifest.knows_epoch("e1") and not manifest.knows_epoch("e0")
    [entry] = manifest.lineage
    assert (entry["epoch"], entry["until_scn"], entry["to_epoch"], entry["resume_scn"], entry["method"]) == (
        "e1", "5", "e2", "100", "gtid")
    assert [w.scn.value for w in log.read_windows()] == [101]
    other = ChangeLog(tmp_path / "other", "s")
    with other.writer() as w:
        w.start_at(Scn(7), "e1")
    assert other.manifest().log_id not in ("", log_id)


def test_a_writer_from_another_epoch_cannot_commit(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(1)], "e1")
        with pytest.raises(EpochMismatchError, match="may not append"):
            w.append([window(2)], "e2")
    assert log.committed_scn() == Scn(1)


def test_only_one_writer_per_source(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys,time; from pathlib import Path; from dagster_databus.log.store import ChangeLog\n"
         f"w = ChangeLog(Path({str(tmp_path)!r}), 's').writer(); w.__enter__(); print('locked', flush=True); "
         "time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConcurrentRunError, match=f"pid {holder.pid}"), log.writer():
            pass
    finally:
        holder.kill()
        holder.wait()
    with log.writer():  # released when the holder died
        pass


CRASH_POINTS = ["segment_written", "segment_published", "manifest_committed", "checkpoint_written"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_while_publishing_loses_nothing_and_duplicates_nothing(
    point: str, tmp_path: Path, spark: object
) -> None:
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER)"])
    source_cfg = source.source_config("shop", [("items", ["id"])])
    config = make_config(tmp_path / "lake", source_cfg)
    pipeline.install(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, ?)", (i, i)) for i in range(1, 6)])
    pipeline.capture(config, "shop")
    sync_source(spark, config, "shop")
    source.execute([("UPDATE items SET qty = qty * 10 WHERE id <= ?", (3,)), "DELETE FROM items WHERE id = 5",
                    ("INSERT INTO items VALUES (?, ?)", (6, 6))])

    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps({"lake": str(config.lake), "sources": [source_cfg]}))
    crashed = subprocess.run(
        [sys.executable, "jobs/capture.py", "--config", str(config_file), "--source", "shop", "--no-install"],
        env={**os.environ, "DATABUS_CRASH_AT": point}, capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert crashed.returncode == -9, crashed.stderr  # SIGKILL

    pipeline.capture(config, "shop")  # recovers, then captures whatever is left
    log = ChangeLog(config.lake, "shop")
    scns = [e.event.scn for e in log.read()]
    assert len(scns) == len(set(scns)) == 10, "each change exactly once in the log"
    assert scns == sorted(scns)
    assert sorted(p.name for p in log.segments_dir.iterdir()) == sorted(s.file for s in log.manifest().segments)
    assert log.checkpoint().scn == log.committed_scn()
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)
