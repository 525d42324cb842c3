"""``databus capture``, ``databus merge`` and ``databus sync``: the pipeline without Dagster, by the same code,
under the same locks, with the figures Dagster's metadata shows, and the jobs/ scripts as thin callers of them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.cli import EXIT_TRANSIENT, main
from dagster_databus.config import load_config
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.log.changelog import ChangeLog
from tests.support.checks import assert_snapshots_match
from tests.support.paths import REPO

TABLES = ["customers", "orders", "order_items"]


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db").run(20)
    path = tmp_path / "databus.yaml"
    keys = {"customers": ["id"], "orders": ["id"], "order_items": ["order_id", "line_no"]}
    path.write_text(json.dumps({"lake": "lake", "merge": {"engine": "local"}, "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db",
         "tables": [{"name": t, "primary_key": keys[t]} for t in TABLES]}]}))
    return path


def json_lines(out: str) -> list[dict[str, object]]:
    """Every line of a ``--json`` command's stdout, parsed: stdout holds JSON objects only (progress is stderr's)."""
    objects = [json.loads(line) for line in out.splitlines()]
    assert objects and all(isinstance(o, dict) for o in objects), out
    return objects


def test_sync_installs_captures_and_merges_with_one_summary_line_a_step(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "sync", "--source", "shop"]) == 0
    out = capsys.readouterr().out
    config = load_config(config_path)
    assert_snapshots_match(config)
    events = sum(1 for _ in ChangeLog(config.lake, "shop").read())
    [captured] = [line for line in out.splitlines() if line.startswith("shop: captured SCN")]
    assert f"{events:,} events" in captured and "0 SCNs behind the source" in captured
    merged = [line for line in out.splitlines() if line.startswith("shop.") and " SCN " in line]
    assert sorted(line.split(":")[0] for line in merged) == [f"shop.{t}" for t in sorted(TABLES)]
    assert all("0 SCNs behind the log" in line and "local engine" in line for line in merged)


def test_capture_then_merge_print_the_figures_dagster_shows(config_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(config_path)
    assert main(["--config", str(config_path), "sync", "--source", "shop"]) == 0
    capsys.readouterr()
    with sqlite3.connect(config_path.parent / "shop.db") as conn:
        conn.execute("INSERT INTO customers (id, name, email) VALUES (9001, 'new', 'n@example.com')")
        conn.execute("UPDATE customers SET name = 'renamed' WHERE id IN (SELECT id FROM customers WHERE id < 9001 "
                     "ORDER BY id LIMIT 2)")
        conn.execute("DELETE FROM order_items WHERE rowid IN (SELECT rowid FROM order_items LIMIT 3)")
    assert main(["--config", str(config_path), "capture", "--source", "shop", "--json"]) == 0
    [capture] = json_lines(capsys.readouterr().out)
    manifest = ChangeLog(config.lake, "shop").manifest()
    assert (capture["step"], capture["inserts"], capture["updates"], capture["deletes"]) == ("capture", 1, 2, 3)
    assert capture["events_by_table"] == {"customers": 3, "order_items": 3}
    assert (capture["log_segments"], capture["lag_scn"]) == (len(manifest.segments), 0)
    assert capture["scn_to"] == str(manifest.checkpoint.scn)  # type: ignore[union-attr]
    assert main(["--config", str(config_path), "merge", "--source", "shop", "--tables", "customers",
                 "order_items", "--json"]) == 0
    merged = {m["table"]: m for m in json_lines(capsys.readouterr().out)}
    assert set(merged) == {"customers", "order_items"}
    assert (merged["customers"]["rows_inserted"], merged["customers"]["rows_updated"]) == (1, 2)
    assert merged["order_items"]["rows_deleted"] == 3
    assert all(m["applied_scn"] == capture["scn_to"] and m["engine"] == "local" for m in merged.values())
    assert_snapshots_match(config)


def test_a_capture_while_another_holds_the_log_is_turned_away_as_transient(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(config_path)
    capture.install(config, "shop")
    with ChangeLog(config.lake, "shop").writer():  # what a running capture (CLI or Dagster step) holds
        assert main(["--config", str(config_path), "capture", "--source", "shop"]) == EXIT_TRANSIENT
    err = capsys.readouterr().err
    assert "another" in err and "Fix:" in err, err
    assert ChangeLog(config.lake, "shop").manifest().segments == ()


def test_an_unknown_source_or_table_is_refused_naming_the_choices(config_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "sync", "--source", "nope"]) == 2
    assert "shop" in capsys.readouterr().err
    assert main(["--config", str(config_path), "merge", "--source", "shop", "--tables", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "customers" in err, err


def test_the_jobs_scripts_are_the_cli_commands(config_path: Path) -> None:
    run = [subprocess.run([sys.executable, script, "--config", str(config_path), "--source", "shop", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
           for script in ("jobs/capture.py", "jobs/merge_snapshots.py")]
    assert [r.returncode for r in run] == [0, 0], [r.stderr[-2000:] for r in run]
    steps = [json_lines(r.stdout) for r in run]
    assert [s["step"] for s in steps[0]] == ["capture"] and [s["step"] for s in steps[1]] == ["merge"] * 3
    assert_snapshots_match(load_config(config_path))


JVM_ARGS = """
from dagster_databus.config import SparkConfig
from dagster_databus.spark.classic import open_classic

session = open_classic(SparkConfig())
assert session.range(0, 100, 1, 2).selectExpr("id % 7 AS k").groupBy("k").count().count() == 7
args = session.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print("ARGS", " ".join(str(a) for a in args))
session.stop()
"""


@pytest.mark.spark  # local Spark in child processes
def test_warm_writes_the_spark_drivers_class_data_archive_and_sessions_use_it_only_whole(tmp_path: Path) -> None:
    """The archive takes seconds off a local Spark run's start (docs/performance.md); the JVM crashes on a
    truncated one, so a session takes it only as a JVM ran with it."""
    env = {**os.environ, "DATABUS_CACHE_DIR": str(tmp_path / "cache")}
    warm = subprocess.run([sys.executable, "-m", "dagster_databus.cli", "warm"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert warm.returncode == 0, warm.stderr[-3000:]
    [archive] = (tmp_path / "cache").glob("spark-driver-*.jsa")
    assert f"Spark driver class-data archive {archive}" in warm.stdout
    assert int(archive.with_name(archive.name + ".size").read_text()) == archive.stat().st_size > 2**20
    assert not list((tmp_path / "cache").glob("*.tmp"))

    def driver_args() -> str:
        run = subprocess.run([sys.executable, "-c", JVM_ARGS], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        return next(line for line in run.stdout.splitlines() if line.startswith("ARGS "))

    assert f"-XX:SharedArchiveFile={archive}" in driver_args()
    # Cut short behind the JVM's back (a full disk, a bad copy): runs go on without it, they do not crash.
    data = archive.read_bytes()
    archive.chmod(0o644)
    archive.write_bytes(data[: len(data) // 2])
    assert "SharedArchiveFile" not in driver_args()


def test_warm_names_the_fix_when_the_java_it_finds_cannot_start_spark(tmp_path: Path) -> None:
    jdk = tmp_path / "jdk" / "bin"
    jdk.mkdir(parents=True)
    (jdk / "java").write_text("#!/bin/sh\necho 'this java is broken' >&2\nexit 1\n")
    (jdk / "java").chmod(0o755)
    env = {**os.environ, "JAVA_HOME": str(jdk.parent), "DATABUS_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "dagster_databus.cli", "warm"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 2, run.stderr[-3000:]
    [said] = run.stderr.strip().splitlines()[-1:]
    assert said.startswith("error: the Spark driver's class-data archive was not written: the driver archive's "
                           "dump run failed") and "Fix: make `java -version` (Java 17+)" in said, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert not list((tmp_path / "cache").glob("*.jsa*")), "no archive, no record, nothing staged"


def test_warm_names_the_fix_when_its_cache_folder_cannot_hold_the_driver_archive(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    env = {**os.environ, "DATABUS_CACHE_DIR": str(tmp_path / "a-file" / "cache")}
    run = subprocess.run([sys.executable, "-m", "dagster_databus.cli", "warm"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert f"{tmp_path / 'a-file' / 'cache'} cannot hold it" in run.stderr
    assert "set DATABUS_CACHE_DIR to a folder this user can write" in run.stderr


def test_a_sessions_driver_options_keep_the_configs_own_and_take_the_archive_only_whole(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """What ``open_classic`` gives the driver JVM: the config's own options kept, the class-data archive added
    only where its recorded size matches, never beside an archive the config names itself."""
    from dagster_databus.spark.classdata import archive_path, driver_java_options

    monkeypatch.setenv("DATABUS_CACHE_DIR", str(tmp_path))
    archive = archive_path()
    assert archive is not None and archive.parent == tmp_path
    assert driver_java_options("-Xss4m") == "-Xss4m" and driver_java_options(None) is None  # no archive yet
    archive.write_bytes(b"\0" * 4096)
    assert driver_java_options("-Xss4m") == "-Xss4m"  # no record: no JVM ran with it
    record = archive.with_name(archive.name + ".size")
    record.write_text("4095")
    assert driver_java_options(None) is None  # a record of another size: cut short or replaced
    record.write_text("not a size")
    assert driver_java_options(None) is None
    record.write_text("4096")
    assert driver_java_options(None) == f"-XX:SharedArchiveFile={archive}"
    assert driver_java_options(" -Xss4m ") == f"-Xss4m -XX:SharedArchiveFile={archive}"
    mine = "-XX:SharedArchiveFile=/opt/mine.jsa -Xss4m"
    assert driver_java_options(mine) == mine


def test_sync_verifies_a_slice_of_each_table_and_status_shows_the_rotation(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``databus sync`` is the scheduled run: after the merge, each table's slice compared and repaired, one line
    (or one JSON object) a table; ``databus status`` shows each table's last whole pass and its repairs."""
    from deltalake import DeltaTable

    from dagster_databus.dataplane.delta import DeltaSnapshot

    assert main(["--config", str(config_path), "sync", "--source", "shop"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if "not verified this run" in line] == TABLES
    config = load_config(config_path)
    snap = DeltaSnapshot(config.lake, "shop", "customers")
    first = min(snap.read().column("id").to_pylist())
    DeltaTable(snap.uri).update(predicate=f"id = {first}", updates={"city": "'Atlantis'"})
    assert main(["--config", str(config_path), "sync", "--source", "shop", "--json"]) == 0
    verified = {o["table"]: o for o in json_lines(capsys.readouterr().out) if o["step"] == "verify"}
    assert verified["customers"]["differing_keys"] == verified["customers"]["repaired_keys"] == 1
    [difference] = verified["customers"]["differences"]
    assert difference["key"] == [first] and difference["columns"] == ["city"]
    assert verified["orders"]["differing_keys"] == 0 and verified["orders"]["rows"] > 0
    assert_snapshots_match(config)
    assert main(["--config", str(config_path), "status"]) == 0
    status = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert "fully verified" in status["customers"] and status["customers"].endswith("repairs 1")
    assert status["orders"].endswith("repairs 0")
