"""The package as users install it (``support/wheel.py``): the sdist and the wheel carry every SQL file, the installed
package runs from its own folder with the checkout out of sight, and ``databus warm`` (docs/deployment.md's image
build step) compiles and caches every kernel, so that a MySQL capture on the warmed machine compiles none. The
wheel's ``databus sync`` of every source kind is a road of ``test_roads``."""

from __future__ import annotations

import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

from tests.support.harness import MysqlHarness
from tests.support.mariadb import MariaDBServer
from tests.support.wheel import REPO, InstalledWheel, warm

Installed = tuple[InstalledWheel, subprocess.CompletedProcess[str]]


def test_the_sdist_and_the_wheel_carry_every_sql_file(installed_wheel: Installed) -> None:
    installed, _ = installed_wheel
    sql = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "sql").rglob("*.sql"))
    assert len(sql) > 50
    with zipfile.ZipFile(installed.wheel) as wheel:
        assert sorted(n[len("dagster_databus/"):] for n in wheel.namelist() if n.endswith(".sql")) == sql
    with tarfile.open(installed.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert set(sql) <= names and "build_support/sql_into_package.py" in names


PROBE = """
import json, sys
import dagster_databus
from dagster_databus.sources import sqlfiles
print(json.dumps({"package": dagster_databus.__file__, "sql": str(sqlfiles.sql_root()), "path": sys.path,
                  "install": sqlfiles.load("sqlite", "install.sql")[:2]}))
"""


def test_the_installed_package_runs_from_its_own_folder_with_the_checkout_out_of_sight(
        installed_wheel: Installed, tmp_path: Path) -> None:
    installed, _ = installed_wheel
    run = installed.run([str(installed.python), "-c", PROBE], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert Path(seen["package"]).is_relative_to(installed.venv), seen
    assert Path(seen["sql"]).is_relative_to(Path(seen["package"]).parent), seen
    assert seen["install"] == "--" and not [p for p in seen["path"] if p and Path(p).resolve() == REPO], seen


# A MySQL capture in a process of its own; prints the binlog row kernels it compiled and those it loaded from
# numba's cache.
BINLOG_CAPTURE = """
import json, sys
from numba.core.dispatcher import Dispatcher
from dagster_databus import capture
from dagster_databus.config import load_config
from dagster_databus.sources.mysql.wire import kernels

result = capture.run(load_config(sys.argv[1]), "m")
dispatchers = {n: d for n in dir(kernels) if isinstance(d := getattr(kernels, n), Dispatcher)}
print(json.dumps({"events": result.events,
                  "compiled": sorted(n for n, d in dispatchers.items() if d.stats.cache_misses),
                  "loaded": sorted(n for n, d in dispatchers.items() if d.stats.cache_hits)}))
"""
EVERY_BINLOG_LAYOUT = (
    "CREATE TABLE t (id INT PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED, "
    "f FLOAT, d DOUBLE, y YEAR, dc DECIMAL(12,2), dt DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), "
    "b1 BIT(1), b12 BIT(12), e ENUM('a','b'), s SET('a','b'), j JSON, vc VARCHAR(80), c CHAR(8), bn BINARY(8), "
    "bl BLOB, tx TEXT, u UUID)")


def test_warm_compiles_and_caches_every_kernel_so_a_mysql_capture_compiles_none(
        installed_wheel: Installed, mariadb: MariaDBServer, tmp_path: Path) -> None:
    """The installed wheel's first ``databus warm --no-spark`` (into an empty cache, a new machine's): the sample
    pipeline's kernels and each kind's own (the MySQL binlog's, no server: each kernel called with no rows)."""
    installed, first = installed_wheel
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"numba cache: {installed.numba_cache}" in first.stdout
    assert "MySQL/MariaDB binlog row kernels" in first.stdout, first.stdout
    cached = {p.name.split("-")[0]: p.stat().st_mtime_ns for p in installed.numba_cache.rglob("*.nbc")}
    assert {"encode_kernels.sizes_of", "encode_kernels.write", "decode_kernels.decode_records", "crc32._crc32",
            "fingerprint._md5_prefixes", "scan._scan", "kernels.scan", "kernels.decimals_text"} <= set(cached), \
        sorted(cached)
    again = warm(installed, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    after = {p.name.split("-")[0]: p.stat().st_mtime_ns for p in installed.numba_cache.rglob("*.nbc")}
    assert {name: after[name] for name in cached} == cached, "warm compiled again what was cached"

    source = MysqlHarness(mariadb)
    source.execute([EVERY_BINLOG_LAYOUT])
    spec = source.source_config("m", [("t", ["id"])])
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps({"lake": str(tmp_path / "lake"), "sources": [spec]}))
    install = installed.run([str(installed.command("databus")), "--config", str(config_file), "install"], cwd=tmp_path)
    assert install.returncode == 0, install.stderr[-3000:]
    row = ("1, 2, 3, -4, 5, 1.5, 2.5, 2024, 12.34, '2024-02-29', '2024-02-29 12:34:56.789012', "
           "'2024-02-29 12:34:56.789', '-838:59:59.99', 1, 4095, 'b', 'a,b', '{\"k\": [1, 2.5]}', 'v', 'c', 'bn', "
           "'bl', 'tx', 'f47ac10b-58cc-4372-a567-0e02b2c3d479'")
    source.execute([f"INSERT INTO t VALUES ({row.replace('1, ', f'{i}, ', 1)})" for i in range(1, 40)]
                   + ["UPDATE t SET id = id + 100, vc = 'w' WHERE id % 3 = 0", "DELETE FROM t WHERE id % 5 = 0"])
    run = installed.run([str(installed.python), "-c", BINLOG_CAPTURE, str(config_file)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["events"] >= 39 and seen["compiled"] == [], seen
    assert {"scan", "keys_changed", "decimals_text", "datetimes2", "timestamps", "times2", "dates", "sets_text",
            "gather_var", "gather_fixed", "int24"} <= set(seen["loaded"]), seen
