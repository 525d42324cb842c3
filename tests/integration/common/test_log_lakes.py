"""The change log's commit point on a local lake and on an object-store lake, by the same tests:
versions created only if free, so two writers racing cannot both commit, a stale epoch is fenced,
and a writer killed at any step leaves only objects the next writer removes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError, EpochMismatchError
from dagster_databus.log import writer as log_writer
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import KEEP_VERSIONS
from dagster_databus.log.retention import apply_retention
from dagster_databus.storage.lake import Lake, as_lake
from tests.integration.common.test_changelog import SCHEMA, untagged, window
from tests.support.fixtures import ON_EACH_LAKE
from tests.support.paths import REPO


@pytest.fixture
def log_lake(lake: Path | Lake) -> Lake:
    """The suite's lake (local folder, then S3 bucket) as a Lake; another process is given its spec()."""
    return as_lake(lake)


def stored_segments(log: ChangeLog) -> list[str]:
    return sorted(log._listing("segments/"))


@ON_EACH_LAKE
def test_windows_commit_read_back_seal_and_retire_alike_on_both_lakes(log_lake) -> None:
    log = ChangeLog(log_lake, "s")
    log.part_segments = 3
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        for n in range(1, 11):
            w.append([window(10 * n)], "e1")
    reader = ChangeLog(log_lake, "s")
    assert [w.scn.value for w in reader.read_windows(Scn(25))] == [30, 40, 50, 60, 70, 80, 90, 100]
    manifest = reader.manifest()
    assert untagged([p.file for p in manifest.parts]) == [
        f"{10 * a:020d}-{10 * b:020d}-3.json" for a, b in ((1, 3), (4, 6), (7, 9))]
    assert manifest.version == 10 and reader.checkpoint().scn == Scn(100)
    assert stored_segments(reader) == sorted(s.file for s in manifest.segments)
    assert reader.continuity_problems() == []
    with log.writer() as w:
        assert apply_retention(w, Scn(40), max_age_s=0).removed_segments == 4
    assert [w.scn.value for w in reader.read_windows()] == [50, 60, 70, 80, 90, 100]
    with log.writer():  # the next writer removes the parts retention replaced
        pass
    assert sorted(log._listing("manifest.d/")) == sorted(p.file for p in log.manifest().parts)
    assert stored_segments(log) == sorted(s.file for s in log.manifest().segments)
    # Only the newest versions are kept, and a log of 16+ commits still reads whole.
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        for n in range(11, 31):
            w.append([window(10 * n)], "e1")
    assert len(log._versions()) == KEEP_VERSIONS and log.manifest().version == 31  # 30 appends, 1 retention
    assert [w.scn.value for w in log.read_windows(Scn(290))] == [300]


def open_writer(lake: Lake) -> log_writer.LogWriter:
    """A writer as one on another machine sharing only the lake gets it: on a local lake the lock
    would turn a second writer away up front, so the race is entered past it."""
    writer = ChangeLog(lake, "s").writer()
    writer._lock = None
    writer.__enter__()
    writer.register_schemas([SCHEMA])
    return writer


@ON_EACH_LAKE
def test_of_two_writers_that_read_the_same_version_only_the_first_commits(log_lake, monkeypatch) -> None:
    with ChangeLog(log_lake, "s").writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(10)], "e1")
    a, b = open_writer(log_lake), open_writer(log_lake)

    def a_commits_meanwhile(point: str) -> None:
        if point == "segment_published":  # b's segment is written, its commit not yet
            monkeypatch.setattr(log_writer, "crash_point", lambda _: None)
            a.append([window(20)], "e1")

    monkeypatch.setattr(log_writer, "crash_point", a_commits_meanwhile)
    with pytest.raises(ConcurrentRunError, match=r"another run committed version 2 .* \(through SCN 20\).*committed "
                                                 r"nothing") as caught:
        b.append([window(15, 20)], "e1")
    assert "must not overlap" in caught.value.fix
    log = ChangeLog(log_lake, "s")
    assert [[e.scn.value for e in w.events] for w in log.read_windows()] == [[10], [20]]
    assert stored_segments(log) == sorted(s.file for s in log.manifest().segments), "the loser's segment is gone"
    assert log.checkpoint().scn == Scn(20)


@ON_EACH_LAKE
def test_a_writer_of_a_stale_epoch_is_fenced_when_a_switch_commits_first(log_lake, monkeypatch) -> None:
    log = ChangeLog(log_lake, "s")
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(10)], "e1")
    stale = open_writer(log_lake)

    def failover_meanwhile(point: str) -> None:
        if point == "segment_published":  # the stale writer's segment is written, its commit not yet
            open_writer(log_lake).switch_epoch(Scn(100), "e2", {}, {"reason": "failover"})

    monkeypatch.setattr(log_writer, "crash_point", failover_meanwhile)
    with pytest.raises(EpochMismatchError, match=r"switched the change log of source 's' to epoch e2.*fenced"):
        stale.append([window(20)], "e1")
    monkeypatch.undo()
    manifest = ChangeLog(log_lake, "s").manifest()
    assert (manifest.epoch, manifest.checkpoint.scn, manifest.last_scn) == ("e2", Scn(100), Scn(10))
    assert stored_segments(log) == sorted(s.file for s in manifest.segments)
    with pytest.raises(EpochMismatchError, match="belongs to epoch e2"), log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(200)], "e1")


WRITER = """
import json, sys, time
from pathlib import Path
from dagster_databus.errors import ConcurrentRunError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.storage.lake import Lake
from tests.integration.common.test_changelog import SCHEMA, window

spec, go, me = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
log = ChangeLog(Lake.from_spec(spec), "s")
while not go.exists():
    time.sleep(0.005)
won = lost = 0
for n in range(1, 31):
    try:
        with log.writer() as w:
            w.register_schemas([SCHEMA])
            w.append([window(10 * n)], "e1")
        won += 1
    except ConcurrentRunError:
        lost += 1
    except ValueError as exc:  # the other writer committed this window already
        assert "commit order" in str(exc), exc
        lost += 1
print(json.dumps({"me": me, "won": won, "lost": lost}))
"""


@ON_EACH_LAKE
def test_two_capture_processes_with_separate_disks_commit_each_window_exactly_once(log_lake, tmp_path: Path) -> None:
    go = tmp_path / "go"
    writers = []
    for me in range(2):
        # Separate temporary folders: the processes share nothing but the lake.
        env = {**os.environ, "TMPDIR": tempfile.mkdtemp(dir=tmp_path)}
        writers.append(subprocess.Popen([sys.executable, "-c", WRITER, log_lake.spec(), str(go), str(me)],
                                        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    time.sleep(1.0)
    go.touch()
    results = []
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    log = ChangeLog(log_lake, "s")
    windows = [w.scn.value for w in log.read_windows()]
    assert windows == sorted(set(windows)), "no window twice, in commit order"
    assert sum(r["won"] for r in results) == len(log.manifest().segments) == log.manifest().version
    assert windows[-1] == 300 and log.checkpoint().scn == Scn(300)
    with log.writer():
        pass
    assert stored_segments(log) == sorted(s.file for s in log.manifest().segments)


CRASHER = """
import sys
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.storage.lake import Lake
from tests.integration.common.test_changelog import SCHEMA, window

log = ChangeLog(Lake.from_spec(sys.argv[1]), "s")
log.part_segments = 3
with log.writer() as w:
    w.register_schemas([SCHEMA])
    w.append([window(25, 30)], "e1")
"""


@ON_EACH_LAKE
@pytest.mark.parametrize("point", ["segment_written", "segment_published", "manifest_part_written",
                                   "manifest_committed"])
def test_a_writer_killed_at_each_step_leaves_nothing_the_next_writers_do_not_clean(log_lake, point: str,
                                                                                   monkeypatch) -> None:
    log = ChangeLog(log_lake, "s")
    log.part_segments = 3
    with log.writer() as w:
        w.register_schemas([SCHEMA])
        w.append([window(10)], "e1")
        w.append([window(20)], "e1")
    crashed = subprocess.run([sys.executable, "-c", CRASHER, log_lake.spec()], cwd=REPO,
                             env={**os.environ, "DATABUS_CRASH_AT": point}, capture_output=True, text=True)
    assert crashed.returncode == -9, crashed.stderr
    committed = point == "manifest_committed"
    assert log.committed_scn() == Scn(30 if committed else 20)
    with log.writer() as w:  # recovers; capture resumes after what was committed
        w.register_schemas([SCHEMA])
        if not committed:
            w.append([window(25, 30)], "e1")
        w.append([window(40)], "e1")
    assert [[e.scn.value for e in w.events] for w in log.read_windows()] == [[10], [20], [25, 30], [40]]
    assert log.checkpoint().scn == Scn(40)
    with log.writer():  # the log has moved past every SCN the dead writer's segment held
        pass
    assert stored_segments(log) == sorted(s.file for s in log.manifest().segments)
    # A part no version names may be another machine's commit in flight: a store keeps it for a grace period.
    monkeypatch.setattr(log_writer, "SWEEP_GRACE_S", 0.0)
    with log.writer():
        pass
    assert sorted(log._listing("manifest.d/")) == sorted(p.file for p in log.manifest().parts)
    assert log.continuity_problems() == []
