"""The delta-spark engine (Spark's own Delta MERGE). It needs delta-spark's jars on the Spark classpath,
which come from Maven; where they are not available the test skips and says how to provide them, and a
config that asks for the engine is refused with that fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError
from dagster_databus.sync.merge import engine_for, sync_table
from tests.support.checks import assert_snapshots_match, cycle, require_delta_spark
from tests.support.harness import SqliteHarness, make_config


def test_delta_spark_engine_bootstraps_merges_and_ignores_replays(tmp_path: Path, spark) -> None:
    require_delta_spark(spark, "to run this test")
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO items VALUES (1, 'a')"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"engine": "delta-spark"})
    assert cycle(config, spark)[0].engine == "delta-spark"
    source.execute(["INSERT INTO items VALUES (2, 'b')", "UPDATE items SET name = 'z' WHERE id = 1"])
    cycle(config, spark)
    snap = DeltaSnapshot(config.lake, "shop", "items")
    version = snap.version()
    again = sync_table(config, config.sources[0], "items", engine_for(spark, config))
    assert again.events == 0 and snap.version() == version
    assert_snapshots_match(config)


def test_asking_for_delta_spark_without_its_jars_names_the_fix(tmp_path: Path, spark) -> None:
    if spark.delta_spark_available():
        pytest.skip("delta-spark's jars are on this session's classpath")
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO items VALUES (1, 'a')"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"engine": "delta-spark"})
    with pytest.raises(ConfigError, match="delta-spark") as err:
        cycle(config, spark)
    assert "merge.engine: spark" in err.value.fix
    assert not DeltaSnapshot(config.lake, "shop", "items").exists()
    auto = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]), merge={"engine": "auto"})
    assert engine_for(spark, auto).name == "spark"
