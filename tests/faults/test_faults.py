"""The fault suite: after each scenario, lost = 0, phantom = 0, and the snapshot equals the source at
one SCN. Every scenario runs on SQLite and on MariaDB; those not about the local disk (a full disk, the
host clock) run on a local lake and on an object-store lake (the S3-compatible test server)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.cli import EXIT_TRANSIENT
from dagster_databus.config import DatabusConfig
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.resume import BootstrapProgress
from dagster_databus.errors import ChangeLogCorruptError, ConfigError, DiskFullError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import engine_for, sync_source
from tests.support.checks import require_tool
from tests.support.fixtures import ON_EACH_LAKE
from tests.support.harness import (
    MysqlHarness,
    PostgresHarness,
    SourceHarness,
    SqliteHarness,
    config_document,
    make_config,
)
from tests.support.loadgen import DDL, TABLE, LoadGenerator, check

REPO = Path(__file__).resolve().parents[2]
FAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                             "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1") if Path(p).exists()), None)


@pytest.fixture(params=["sqlite", "mysql", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def harness_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SourceHarness:
    if kind == "sqlite":
        return SqliteHarness(tmp_path / "source.db")
    if kind == "postgres":
        harness = PostgresHarness(request.getfixturevalue("postgres"))
        request.addfinalizer(harness.close)
        return harness
    return MysqlHarness(request.getfixturevalue("mariadb"))


def prepared(kind: str, tmp_path: Path, request: pytest.FixtureRequest, lake: Path | Lake | None = None,
             chunk_rows: int = 50):
    harness = harness_for(kind, tmp_path, request)
    harness.execute([DDL])
    source = harness.source_config("faults", [(TABLE, ["k"])], poll={"chunk_rows": chunk_rows})
    config = make_config(lake or tmp_path / "lake", source)
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps(config_document(config, [source])))
    capture.install(config, "faults")
    return harness, config, config_file, LoadGenerator(harness)


def cycle(config: DatabusConfig, spark: object) -> None:
    capture.run(config, "faults")
    sync_source(spark, config, "faults")


def job(script: str, config_file: Path, crash_at: str | None = None, extra_env: dict | None = None):
    env = {**os.environ, **(extra_env or {})}
    if crash_at:
        env["DATABUS_CRASH_AT"] = crash_at
    args = ["--config", str(config_file), "--source", "faults"]
    if script == "capture":
        args.append("--no-install")
    return subprocess.run([sys.executable, f"jobs/{script}.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def assert_clean(config: DatabusConfig, generator: LoadGenerator) -> None:
    report = check(config, generator)
    assert report.clean, report


CAPTURE_POINTS = ["segment_written", "segment_published", "manifest_committed"]
MERGE_POINTS = ["delta_commit", "delta_committed"]


@ON_EACH_LAKE
@pytest.mark.parametrize("point", CAPTURE_POINTS + MERGE_POINTS)
def test_sigkill_at_each_boundary_then_rerun(kind: str, point: str, lake: Path | Lake, tmp_path: Path, request,
                                            spark) -> None:
    _, config, config_file, generator = prepared(kind, tmp_path, request, lake)
    generator.run(40)
    cycle(config, spark)
    generator.run(40)
    if point in MERGE_POINTS:
        capture.run(config, "faults")
    killed = job("capture" if point in CAPTURE_POINTS else "merge_snapshots", config_file, crash_at=point)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    generator.run(20)
    cycle(config, spark)
    assert_clean(config, generator)
    assert check(config, generator).duplicates == 0, "a published window is never appended twice"


@ON_EACH_LAKE
def test_a_truncated_segment_stops_the_pipeline_until_bootstrap(kind: str, lake: Path | Lake, tmp_path: Path, request,
                                                                spark) -> None:
    _, config, _, generator = prepared(kind, tmp_path, request, lake)
    generator.run(40)
    cycle(config, spark)
    generator.run(40)
    capture.run(config, "faults")
    log = ChangeLog(config.lake, "faults")
    segment = f"{log.key}segments/{log.manifest().segments[-1].file}"
    data = config.lake.objects.read(segment)
    config.lake.objects.write(segment, data[:random.Random(7).randrange(1, len(data))])
    with pytest.raises(ChangeLogCorruptError, match=r"(?s)is .* bytes, the manifest says.*databus bootstrap"):
        sync_source(spark, config, "faults")
    with pytest.raises(ChangeLogCorruptError):
        capture.run(config, "faults")
    capture.restart(config, "faults")
    generator.run(20)
    cycle(config, spark)
    assert_clean(config, generator)


def mount_tmpfs(path: Path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True,
                   capture_output=True)


def fill(path: Path) -> Path:
    """Take all free space on the filesystem holding ``path``."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"),
                    reason="mounting a size-limited tmpfs needs root (CI and these machines run as root)")
def test_a_full_disk_during_segment_and_delta_writes(kind: str, tmp_path: Path, request, spark) -> None:
    lake = tmp_path / "small"
    mount_tmpfs(lake, 64)
    try:
        _, config, _, generator = prepared(kind, tmp_path, request, lake=lake / "lake")
        generator.run(40)
        cycle(config, spark)
        checkpoint = ChangeLog(config.lake, "faults").checkpoint()

        generator.run(200)
        filler = fill(lake)
        with pytest.raises(DiskFullError, match=r"no space left.*segment"):
            capture.run(config, "faults")
        assert ChangeLog(config.lake, "faults").checkpoint() == checkpoint
        filler.unlink()
        capture.run(config, "faults")  # space is back: the next run succeeds

        applied = DeltaSnapshot(config.lake, "faults", TABLE).applied_scn()
        filler = fill(lake)
        with pytest.raises(DiskFullError, match=r"no space left.*Delta"):
            sync_source(spark, config, "faults")
        assert DeltaSnapshot(config.lake, "faults", TABLE).applied_scn() == applied
        filler.unlink()
        cycle(config, spark)
        assert_clean(config, generator)
    finally:
        subprocess.run(["umount", "-l", str(lake)], capture_output=True)


@ON_EACH_LAKE
def test_two_runs_of_one_source_at_once(kind: str, lake: Path | Lake, tmp_path: Path, request, spark) -> None:
    _, config, config_file, generator = prepared(kind, tmp_path, request, lake, chunk_rows=20)
    generator.run(40)
    cycle(config, spark)
    generator.run(400)  # enough for a capture to take a while
    # Each run with a temporary folder of its own: on the object-store lake they share nothing but the lake.
    runs = [subprocess.Popen([sys.executable, "jobs/capture.py", "--config", str(config_file), "--source", "faults",
                              "--no-install"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": tempfile.mkdtemp(dir=tmp_path)})
            for _ in range(2)]
    outcomes = [(r.wait(timeout=300), r.stderr.read()) for r in runs]
    assert any(code == 0 for code, _ in outcomes), outcomes
    # Turned away up front by the local lock or (MySQL) the server's lock on the binlog reader, or, sharing
    # only an object-store lake, by the commit: as a transient error (exit 75), which running again cures.
    refusals = ("locked by another run", "another run committed")
    for code, err in outcomes:
        assert code == 0 or (code == EXIT_TRANSIENT and any(r in err for r in refusals)), outcomes
    cycle(config, spark)
    report = check(config, generator)
    assert report.clean and report.duplicates == 0, report


@ON_EACH_LAKE
def test_replayed_and_out_of_order_windows_change_nothing(kind: str, lake: Path | Lake, tmp_path: Path, request,
                                                          spark) -> None:
    _, config, _, generator = prepared(kind, tmp_path, request, lake)
    generator.run(30)
    cycle(config, spark)
    for _ in range(3):
        generator.run(30)
        cycle(config, spark)
    snap = DeltaSnapshot(config.lake, "faults", TABLE)
    version, rows = snap.version(), snap.read().to_pylist()
    log = ChangeLog(config.lake, "faults")
    schema = log.schemas.latest(TABLE)[1]
    windows = list(log.read_windows())
    random.Random(3).shuffle(windows)
    engine = engine_for(spark, config)
    for window in windows[:5]:  # old windows again, in a shuffled order
        since = Scn(window.first_scn.value - 1)
        assert engine.merge(snap, log, schema, since, window.scn, lambda _: None) is None
    assert snap.version() == version and snap.read().to_pylist() == rows
    assert_clean(config, generator)
    # The old windows once more, each now ending where the log does, past a window the snapshot has not
    # applied: the merge runs, reading the log from the snapshot's SCN on, so no replayed window is read again.
    generator.run(30)
    capture.run(config, "faults")
    log = ChangeLog(config.lake, "faults")
    until = log.committed_scn()
    unapplied = sum(len(w.events) for w in log.read_windows(snap.applied_scn()))
    merged = [engine.merge(snap, log, schema, Scn(w.first_scn.value - 1), until, lambda _: None) for w in windows[:5]]
    assert merged[0] is not None and merged[0].stats.events == unapplied > 0
    assert merged[1:] == [None] * (len(merged) - 1) and snap.applied_scn() == until
    assert_clean(config, generator)


def test_clock_jumps_on_the_capture_host_do_not_reorder_anything(kind: str, tmp_path: Path, request, spark) -> None:
    require_tool(FAKETIME is not None,
                 "Debian's faketime package (libfaketime) is not installed: apt-get install faketime")
    _, config, config_file, generator = prepared(kind, tmp_path, request)
    generator.run(30)
    cycle(config, spark)
    for offset in ("-3d", "+400d", "-1y", "+0"):
        generator.run(30)
        ran = job("capture", config_file, extra_env={"LD_PRELOAD": FAKETIME, "FAKETIME": offset,
                                                      "DONT_FAKE_MONOTONIC": "1"})
        assert ran.returncode == 0, ran.stderr
    updated = ChangeLog(config.lake, "faults").checkpoint().updated_ms
    assert abs(updated / 1000 - time.time()) < 120, "the last capture ran at the real time"
    sync_source(spark, config, "faults")
    events = [(e.event.scn, e.event.seq) for e in ChangeLog(config.lake, "faults").read()]
    assert events == sorted(events) and len(set(events)) == len(events)
    assert_clean(config, generator)


@ON_EACH_LAKE
def test_a_database_that_disappears_mid_run_is_a_clear_error_and_writes_nothing(kind: str, lake: Path | Lake,
                                                                                  tmp_path: Path, request,
                                                                                  spark) -> None:
    harness, config, _, generator = prepared(kind, tmp_path, request, lake)
    generator.run(20)
    cycle(config, spark)
    log = ChangeLog(config.lake, "faults")
    manifest, checkpoint = log.manifest(), log.checkpoint()
    generator.run(10)
    if kind == "sqlite":
        Path(config.sources[0].path).unlink()
        field = "sources.faults.path"
    elif isinstance(harness, PostgresHarness):
        harness.close()  # its slot first: PostgreSQL keeps a database that a slot belongs to
        field = "sources.faults.database"
    else:
        harness.server.execute(f"DROP DATABASE {harness.database}")
        field = "sources.faults.database"
    with pytest.raises(ConfigError) as err:
        capture.run(config, "faults")
    assert err.value.field == field and "Fix:" in str(err.value)
    assert log.manifest() == manifest and log.checkpoint() == checkpoint


@ON_EACH_LAKE
def test_a_bootstrap_killed_mid_table_resumes_and_reads_each_range_at_most_twice(kind: str, lake: Path | Lake,
                                                                                 tmp_path: Path, request,
                                                                                 spark) -> None:
    harness = harness_for(kind, tmp_path, request)
    harness.execute([DDL])
    small = {"bootstrap_chunk_rows": 40} if kind != "sqlite" else {}  # SQLite ranges follow merge.file_rows
    source = harness.source_config("faults", [(TABLE, ["k"])], **small)
    config = make_config(lake, source, merge={"file_rows": 40})
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps({**config_document(config, [source]), "merge": {"file_rows": 40}}))
    capture.install(config, "faults")
    generator = LoadGenerator(harness, keys=6000, seed=4)
    generator.run(300, per_txn=10)
    capture.run(config, "faults")

    store = BootstrapProgress(config.lake, "faults", TABLE)
    run = subprocess.Popen([sys.executable, "jobs/merge_snapshots.py", "--config", str(config_file), "--source",
                            "faults"], cwd=REPO, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    want = random.Random(kind).randrange(3, 12)  # killed after a random number of finished ranges
    deadline = time.monotonic() + 240
    while run.poll() is None and time.monotonic() < deadline:
        plan = store.plan()
        if plan is not None and want <= len(store.done()) < len(plan.ranges):
            break
        time.sleep(0.02)
    os.killpg(run.pid, signal.SIGKILL)
    output = run.communicate()[0]
    assert run.returncode == -9, output
    plan, first = store.plan(), store.done()
    assert plan is not None and want <= len(first) < len(plan.ranges), output
    assert DeltaSnapshot(config.lake, "faults", TABLE).applied_scn() is None  # nothing was committed
    assert config.lake.objects.folders("snapshot/faults/") in ([], [TABLE])  # progress lives beside the tables

    generator.run(30, per_txn=10)  # the table changes between the two runs
    capture.run(config, "faults")
    [result] = sync_source(spark, config, "faults")
    assert result.key_ranges is not None and result.key_ranges.ranges == len(plan.ranges)
    assert result.key_ranges.resumed >= len(first)
    assert result.key_ranges.most_reads <= 2
    assert store.plan() is None and not config.lake.objects.list(store.key)  # progress cleared once committed
    assert_clean(config, generator)
    snap = DeltaSnapshot(config.lake, "faults", TABLE)
    prefix = f"{snap.key}/{plan.prefix}"
    named = set(snap.delta(version=0).get_add_actions(flatten=True)["path"].to_pylist())  # the bootstrap's commit
    stray = [o.key for o in config.lake.objects.list(prefix) if o.key.rpartition("/")[2] not in named]
    assert not stray, "the killed run's partial files are deleted once the bootstrap commits"
