"""The suite's layout by cost (README's "Tests and checks"): tests/unit/ (plain ``pytest``),
tests/integration/<kind>/ and tests/integration/common/, tests/spark/, tests/ui/, tests/package/, tests/faults/ and
tests/soak/. Each folder's conftest.py sets its marker (``unit``, ``integration``, ``server``, ``spark``, ``ui``,
``wheel``, ``fault``); this one adds ``spark``, ``server`` and ``wheel`` to a test anywhere whose fixtures or
parameters need one (a suite run with each engine or source kind is marked per parameter), and keeps tests/soak/
out unless it is named. The fixtures and helpers are the plugin in tests/support/."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.support.fixtures"]

# What marks a test ``spark``: a fixture that starts a Spark session or cluster, or, for a test that takes
# ``lazy_spark``, a parameter naming an engine that runs on Spark.
SPARK_FIXTURES = {"spark", "spark_cluster", "spark_connect_server", "connect_spark"}
SPARK_ENGINES = {"spark", "delta-spark"}
# What marks a test ``server``: a fixture that starts one (here or in its test module: MariaDB pairs and
# shards, an Oracle harness, `dagster dev`), or a parameter that puts the source, the lake or its objects on
# one (whatever the parameter is called). A test that starts a server in its body carries the mark itself.
SERVER_FIXTURES = {"mariadb", "mariadb_compressed", "own_server", "s3", "pair", "servers", "oracle", "dagster_ui",
                   "postgres", "pg_server", "pg_shop"}
SERVER_PARAMS = {"mysql", "mysql-compressed", "oracle", "s3", "postgres"}
# What marks a test ``wheel``: it builds the package and installs it into a fresh environment
# (``tests.support.wheel``), or runs on that road (a parameter named so).
WHEEL_FIXTURES = {"installed_wheel", "made", "project"}
# The soaks (hundreds of runs each): collected only when their folder or a file in it is named (`make soak`), so
# `make test`, `make test-faults` and `make test-fast` never collect them.
SOAK_SUITE = Path(__file__).resolve().parent / "soak"


# First: the folders' hooks (tests.support.markers) check what this one marks; all run before `-m` selects.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        params = set(map(str, getattr(getattr(item, "callspec", None), "params", {}).values()))
        spark = bool(fixtures & SPARK_FIXTURES or ("lazy_spark" in fixtures and SPARK_ENGINES & params))
        wheel = bool(fixtures & WHEEL_FIXTURES or "wheel" in params)
        if spark:
            item.add_marker(pytest.mark.spark)
        if fixtures & SERVER_FIXTURES or SERVER_PARAMS & params:
            item.add_marker(pytest.mark.server)
        if wheel:
            item.add_marker(pytest.mark.wheel)
        # Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`): the tests on the session's Spark
        # cluster and Connect server run in one worker, and so do those on the built wheel, so each is started or
        # built once a run, as without workers; the rest go to whichever worker is free.
        if spark or wheel:
            item.add_marker(pytest.mark.xdist_group("spark" if spark else "wheel"))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path != SOAK_SUITE and SOAK_SUITE not in collection_path.parents:
        return None
    named = [(config.invocation_params.dir / str(arg).split("::")[0]).resolve() for arg in config.args]
    return True if not any(p == SOAK_SUITE or SOAK_SUITE in p.parents for p in named) else None
