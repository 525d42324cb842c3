"""The change log: commit order, epochs, one writer, and crash safety at every publish step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.core.event_columns import EVENT_NAMES
from dagster_databus.core.events import ChangeEvent, Op, Window, key_partition
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ChangeLogCorruptError, ConcurrentRunError, EpochMismatchError, UnsupportedTypeError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match
from tests.support.harness import SqliteHarness, make_config
from tests.support.paths import REPO

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
         "import sys,time; from pathlib import Path; from dagster_databus.log.changelog import ChangeLog\n"
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


CRASH_POINTS = ["segment_written", "segment_published", "manifest_committed"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_while_publishing_loses_nothing_and_duplicates_nothing(
    point: str, tmp_path: Path, spark: object
) -> None:
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER)"])
    source_cfg = source.source_config("shop", [("items", ["id"])])
    config = make_config(tmp_path / "lake", source_cfg)
    capture.install(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, ?)", (i, i)) for i in range(1, 6)])
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    source.execute([("UPDATE items SET qty = qty * 10 WHERE id <= ?", (3,)), "DELETE FROM items WHERE id = 5",
                    ("INSERT INTO items VALUES (?, ?)", (6, 6))])

    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps({"lake": str(config.lake), "sources": [source_cfg]}))
    crashed = subprocess.run(
        [sys.executable, "jobs/capture.py", "--config", str(config_file), "--source", "shop", "--no-install"],
        env={**os.environ, "DATABUS_CRASH_AT": point}, capture_output=True, text=True,
        cwd=REPO,
    )
    assert crashed.returncode == -9, crashed.stderr  # SIGKILL

    capture.run(config, "shop")  # recovers, then captures whatever is left
    log = ChangeLog(config.lake, "shop")
    scns = [e.event.scn for e in log.read()]
    assert len(scns) == len(set(scns)) == 10, "each change exactly once in the log"
    assert scns == sorted(scns)
    assert sorted(p.name for p in log.segments_dir.iterdir()) == sorted(s.file for s in log.manifest().segments)
    assert log.checkpoint().scn == log.committed_scn()
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)


def untagged(names: list[str]) -> list[str]:
    """Part names without the writer's tag that makes each its own (``<first>-<last>-<n>-<tag>.json``)."""
    return [name.rsplit("-", 1)[0] + ".json" for name in names]


def sealed_log(tmp_path: Path, segments: int, part_segments: int = 3) -> ChangeLog:
    """A log of ``segments`` one-window segments (window SCNs 10, 20, ...), sealing every ``part_segments``."""
    log = ChangeLog(tmp_path, "s")
    log.part_segments = part_segments
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        for n in range(1, segments + 1):
            w.append([window(10 * n)], "e1")
    return log


def test_old_segments_are_sealed_into_parts_so_a_commit_rewrites_only_the_newest(tmp_path: Path) -> None:
    log = sealed_log(tmp_path, 10)
    doc = json.loads(log.manifest_path.read_text())
    assert doc["format"] == 2
    assert untagged([p["file"] for p in doc["parts"]]) == [
        f"{10 * a:020d}-{10 * b:020d}-3.json" for a, b in ((1, 3), (4, 6), (7, 9))]
    assert [s["first_scn"] for s in doc["segments"]] == [100]  # the manifest names only the newest
    assert sorted(p.name for p in log.parts_dir.iterdir()) == [p["file"] for p in doc["parts"]]
    reader = ChangeLog(tmp_path, "s")  # reading needs no knowledge of the part size
    assert [s.last_scn for s in reader.manifest().segments] == [10 * n for n in range(1, 11)]
    assert [w.scn.value for w in reader.read_windows(Scn(25))] == [30, 40, 50, 60, 70, 80, 90, 100]
    assert reader.continuity_problems() == []


def test_retention_reseals_a_part_it_cut_and_the_next_writer_deletes_parts_no_longer_named(tmp_path: Path) -> None:
    from dagster_databus.log.retention import apply_retention

    log = sealed_log(tmp_path, 10)
    with log.writer() as w:
        dropped = apply_retention(w, Scn(40), max_age_s=0, max_bytes=None)
    assert dropped.removed_segments == 4
    doc = json.loads(log.manifest_path.read_text())
    # 10..30 went whole; 40..60 lost its first segment and was sealed again as 50..60; 70..90 is reused.
    assert untagged([p["file"] for p in doc["parts"]]) == [f"{50:020d}-{60:020d}-2.json",
                                                             f"{70:020d}-{90:020d}-3.json"]
    assert [w.scn.value for w in ChangeLog(tmp_path, "s").read_windows()] == [50, 60, 70, 80, 90, 100]
    with log.writer():
        pass
    assert sorted(p.name for p in log.parts_dir.iterdir()) == [p["file"] for p in doc["parts"]]
    with log.writer() as w:  # and the log keeps growing from there
        w.register_schemas([SCHEMA])
        w.append([window(110)], "e1")
    assert [s.last_scn for s in log.manifest().segments] == [50, 60, 70, 80, 90, 100, 110]


def test_a_crash_after_sealing_a_part_leaves_the_previous_commit_and_a_missing_part_is_named(tmp_path: Path) -> None:
    log = sealed_log(tmp_path, 2)
    crashed = subprocess.run(
        [sys.executable, "-c",
         "from pathlib import Path\nfrom dagster_databus.log.changelog import ChangeLog\n"
         "from tests.integration.common.test_changelog import SCHEMA, window\n"
         f"log = ChangeLog(Path({str(tmp_path)!r}), 's')\nlog.part_segments = 3\n"
         "with log.writer() as w:\n    w.register_schemas([SCHEMA])\n    w.append([window(30)], 'e1')\n"],
        env={**os.environ, "DATABUS_CRASH_AT": "manifest_part_written"}, capture_output=True, text=True,
        cwd=REPO)
    assert crashed.returncode == -9, crashed.stderr
    assert untagged([p.name for p in log.parts_dir.iterdir()]) == [f"{10:020d}-{30:020d}-3.json"]  # never named
    assert [w.scn.value for w in log.read_windows()] == [10, 20] and log.committed_scn() == Scn(20)
    with log.writer() as w:  # recovery removes the unnamed part and segment; capture resumes
        assert not any(log.parts_dir.iterdir())
        assert sorted(p.name for p in log.segments_dir.iterdir()) == [s.file for s in log.manifest().segments]
        w.register_schemas([SCHEMA])
        w.append([window(30)], "e1")
    assert [w.scn.value for w in log.read_windows()] == [10, 20, 30]

    [part] = log.parts_dir.iterdir()
    part.unlink()
    with pytest.raises(ChangeLogCorruptError, match=f"manifest part {part.name} .* missing") as caught:
        log.writer().__enter__()  # this process read the part before: the damage check still sees it gone
    assert "databus bootstrap --source s" in caught.value.fix
    fresh = subprocess.run(  # a process that never read it cannot list the log's segments at all
        [sys.executable, "-c", f"from pathlib import Path\nfrom dagster_databus.log.changelog import ChangeLog\n"
                               f"ChangeLog(Path({str(tmp_path)!r}), 's').manifest()"],
        capture_output=True, text=True, cwd=REPO)
    assert f"ChangeLogCorruptError: manifest part {part.name}" in fresh.stderr
    assert "databus bootstrap --source s" in fresh.stderr


def test_a_segment_holds_each_event_as_its_tables_row_record_readable_by_any_avro_reader(tmp_path: Path) -> None:
    import fastavro

    other = TableSchema("s", "order-items", (Column("id", ColumnType("long")),
                                             Column("price", ColumnType.parse("decimal(10,2)"))), ("id",))
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA, other])
        item = ChangeEvent(Scn(3), 1, "order-items", Op.UPDATE, (7,), {"id": 7, "price": Decimal("12.50")}, 1_003)
        w.append([window(1, 2), Window(Scn(3), (ChangeEvent(Scn(3), 0, "t", Op.DELETE, (3,), {"id": 3, "v": None},
                                                            1_003), item))], "e1")
    [segment] = log.manifest().segments
    with open(log.segments_dir / segment.file, "rb") as f:
        reader = fastavro.reader(f, return_record_name=True)
        rows = json.loads(reader.metadata["databus.rows"])
        union = reader.writer_schema
        records = list(reader)
    assert rows == {"r0": ["order-items", 1], "r1": ["t", 1]}
    assert [[f["name"] for f in r["fields"]] for r in union] == [
        ["id", "price", *EVENT_NAMES], ["id", "v", *EVENT_NAMES]]
    assert records[0] == ("databus.segment.r1", {"id": 1, "v": "v1", "__scn": 1, "__window_scn": 2, "__seq": 0,
                                                 "__op": "i", "__key": "[1]", "__partition": key_partition("[1]"),
                                                 "__commit_ts_ms": 1_001})
    assert records[-1][0] == "databus.segment.r0" and records[-1][1]["price"] == Decimal("12.50")
    assert [(e.table, e.op, e.row) for e in (x.event for x in log.read(Scn(2)))] == [
        ("t", Op.DELETE, {"id": 3, "v": None}), ("order-items", Op.UPDATE, {"id": 7, "price": Decimal("12.50")})]

    clashing = TableSchema("s", "bad", (Column("id", ColumnType("long")), Column("__op", ColumnType("string"))),
                           ("id",))
    with log.writer() as w:
        w.register_schemas([clashing])
        with pytest.raises(UnsupportedTypeError, match=r"table 'bad' .* columns named __op"):
            w.append([Window(Scn(9), (ChangeEvent(Scn(9), 0, "bad", Op.INSERT, (1,), {"id": 1, "__op": "x"}, 1),))],
                     "e1")
    assert log.committed_scn() == Scn(3)


def test_a_log_written_before_manifest_versions_reads_the_same_and_moves_to_versions_on_its_next_commit(
        tmp_path: Path) -> None:
    log = sealed_log(tmp_path, 5)
    expected = [[e.scn.value for e in w.events] for w in log.read_windows()]
    # The layout of earlier versions: manifest.json (no checkpoint inside) beside checkpoint.json,
    # the checkpoint one commit behind (a crash between the two writes).
    doc = json.loads(log.manifest_path.read_text())
    checkpoint = doc.pop("checkpoint")
    checkpoint["scn"] = "40"
    for version in (log.root / "manifest").iterdir():
        version.unlink()
    (log.root / "manifest").rmdir()
    (log.root / "manifest.json").write_text(json.dumps(doc))
    (log.root / "checkpoint.json").write_text(json.dumps(checkpoint))
    old = ChangeLog(tmp_path, "s")
    assert old.manifest().version == 0 and old.checkpoint().scn == Scn(40)
    assert [[e.scn.value for e in w.events] for w in old.read_windows()] == expected
    with old.writer() as w:  # rolls the checkpoint forward: the first version
        assert old.manifest().version == 1 and old.checkpoint().scn == Scn(50)
        w.register_schemas([SCHEMA])
        w.append([window(60)], "e1")
    assert not (log.root / "manifest.json").exists() and not (log.root / "checkpoint.json").exists()
    assert [[e.scn.value for e in w.events] for w in ChangeLog(tmp_path, "s").read_windows()] == [*expected, [60]]
    assert ChangeLog(tmp_path, "s").manifest().version == 2
