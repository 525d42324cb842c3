"""Keys compare as the source compares them: a DEFERRABLE key permuted within one transaction, a float key moved
between 0 and -0, NaN as a key. Each ends with the snapshot (both engines) equal to the source."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.consumer.history import as_of
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.errors import NaNKeyError
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import assert_snapshots_match
from tests.support.harness import PostgresHarness, make_config

pytestmark = pytest.mark.server


def _synced(pg: PostgresHarness, lake: Path, tables: list[tuple[str, list[str]]], ddl: list[str],
            engine: str, spark: Any) -> Any:
    pg.execute(ddl)
    document = pg.source_config("shop", tables)
    for table in document["tables"]:  # a history table too: its fold takes each transaction's state at commit
        table["history"] = True
    config = make_config(lake, document, merge={"engine": engine})
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)
    return config


def _cycle(config: Any, spark: Any) -> None:
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)
    for table in config.source("shop").tables:  # reconciliation agrees, by its fingerprints
        assert reconcile_table(config, config.source("shop"), table.name).equal, table.name
        reached = HistoryTable(config.lake, "shop", table.name).applied_scn()
        history = as_of(config.lake, "shop", table.name, scn=reached).to_pylist()
        assert sorted(history, key=repr) == sorted(DeltaSnapshot(config.lake, "shop", table.name).read().to_pylist(),
                                                   key=repr), table.name


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_deferrable_key_permuted_in_one_transaction(pg: PostgresHarness, tmp_path: Path, engine: str,
                                                      request: pytest.FixtureRequest) -> None:
    spark = request.getfixturevalue("lazy_spark") if engine == "spark" else None
    config = _synced(pg, tmp_path / "lake", [("pos", ["id"]), ("pair", ["a", "b"])], [
        "CREATE TABLE pos (id INT PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v TEXT)",
        "INSERT INTO pos SELECT g, 'p' || g FROM generate_series(1, 5) g",
        "CREATE TABLE pair (a INT, b TEXT, v TEXT, PRIMARY KEY (a, b) DEFERRABLE)",
        "INSERT INTO pair VALUES (0, 'b3', 'x'), (0, 'b4', 'y'), (1, 'b3', 'z')",
    ], engine, spark)
    pg.execute(["UPDATE pos SET id = 6 - id"])  # 1<->5, 2<->4: each key taken before its old row leaves
    pg.execute(["UPDATE pair SET b = CASE b WHEN 'b3' THEN 'b4' ELSE 'b3' END WHERE a = 0"])
    _cycle(config, spark)
    # A row moved away and back within one transaction: its key is gone, then present, as at commit.
    pg.execute(["BEGIN; UPDATE pos SET id = 10 WHERE id = 1; UPDATE pos SET id = 11 WHERE id = 10; "
                "SET CONSTRAINTS ALL DEFERRED; UPDATE pos SET id = 2 WHERE id = 3; UPDATE pos SET id = 3 WHERE id = 2 "
                "AND v = 'p4'; COMMIT"])
    # In one window: a new key inserted and deleted, and one deleted and inserted again.
    pg.execute(["BEGIN; INSERT INTO pos VALUES (20, 'new'); DELETE FROM pos WHERE id = 20; "
                "DELETE FROM pos WHERE id = 5; INSERT INTO pos VALUES (5, 'again'); COMMIT"])
    _cycle(config, spark)
    # Several transactions merged at once: the permutation in the second, then the key moved on in the third.
    pg.execute(["UPDATE pos SET v = v || '+'", "UPDATE pos SET id = 100 - id",
                "UPDATE pos SET id = id - 1 WHERE id = 95"])
    _cycle(config, spark)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_float_key_moved_between_zero_and_negative_zero(pg: PostgresHarness, tmp_path: Path, engine: str,
                                                          request: pytest.FixtureRequest) -> None:
    spark = request.getfixturevalue("lazy_spark") if engine == "spark" else None
    config = _synced(pg, tmp_path / "lake", [("f", ["k"]), ("g", ["k"])], [
        "CREATE TABLE f (k DOUBLE PRECISION PRIMARY KEY, v TEXT)",
        "INSERT INTO f VALUES (0, 'zero'), (1.5, 'x')",
        "CREATE TABLE g (k REAL PRIMARY KEY, v TEXT)",
        "INSERT INTO g VALUES ('-0', 'negzero')",
    ], engine, spark)
    pg.execute(["UPDATE f SET k = '-0', v = 'negzero' WHERE k = 0", "UPDATE g SET k = 0, v = 'zero'"])
    _cycle(config, spark)
    # Python's == calls -0 and 0 equal: the sign, as the source holds it, is checked on its own.
    signs = {t: {r["v"]: math.copysign(1, r["k"]) for r in DeltaSnapshot(config.lake, "shop", t).read().to_pylist()}
             for t in ("f", "g")}
    assert signs == {"f": {"negzero": -1.0, "x": 1.0}, "g": {"zero": 1.0}}
    pg.execute(["UPDATE f SET v = 'again' WHERE k = 0", "DELETE FROM g WHERE k = '-0'"])
    _cycle(config, spark)


def test_a_nan_key_is_refused_by_bootstrap_and_capture_naming_the_row(pg: PostgresHarness, tmp_path: Path) -> None:
    pg.execute(["CREATE TABLE n (k DOUBLE PRECISION PRIMARY KEY, v TEXT)", "INSERT INTO n VALUES ('NaN', 'nan')"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("n", ["k"])]), merge={"engine": "local"})
    capture.install(config, "shop")
    with pytest.raises(NaNKeyError, match=r"table 'n': key column\(s\) k hold NaN.*Fix|WHERE k = 'NaN'"):
        sync_source(None, config, "shop")
    pg.execute(["DELETE FROM n", "INSERT INTO n VALUES (1, 'one')"])
    sync_source(None, config, "shop")
    pg.execute(["INSERT INTO n VALUES ('NaN', 'nan')"])
    with pytest.raises(NaNKeyError, match=r"key column\(s\) k hold NaN \(the change events"):
        capture.run(config, "shop")
    # Nothing of the refused window reached the log: the snapshot keeps what was merged.
    sync_source(None, config, "shop")
    assert DeltaSnapshot(config.lake, "shop", "n").read().select(["k", "v"]).to_pylist() == [{"k": 1.0, "v": "one"}]
