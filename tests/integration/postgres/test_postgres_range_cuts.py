"""A PostgreSQL bootstrap's key ranges cut at keys of a sample of a large table's pages (``KeyedReads.sampled_cuts``)
instead of a walk through its whole key index: the ranges still cover every key exactly once, are about the size
asked for, and a bootstrap read by them is exact. A table with no estimate, or too small, is walked as before.

The tables are small for a test, so the sample is made to apply by sampling fewer pages a range."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from dagster_databus.sources import open_source
from dagster_databus.sources.base import KeyRange, RowSelection
from dagster_databus.sources.generic import reads as generic_reads
from dagster_databus.spark.runtime import SparkRuntime
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import PostgresHarness, make_config

ROWS, PER_RANGE = 60_000, 5_000


@pytest.fixture
def few_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three pages a range: a 60,000-row table's sample is then a tenth of its pages, under the share that
    makes sampling worth it."""
    monkeypatch.setattr(generic_reads, "SAMPLED_PAGES", 3)


def load(pg: PostgresHarness, table: str, key: str = "id", analyze: bool = True) -> None:
    pg.execute([f"CREATE TABLE {table} ({key} INTEGER PRIMARY KEY, grp INTEGER NOT NULL, pad TEXT) "
                "WITH (autovacuum_enabled = off)",
                f"INSERT INTO {table} SELECT g, g % 2, repeat('x', 20) FROM generate_series(1, {ROWS}) g",
                *([f"ANALYZE {table}"] if analyze else [])])


def cut(pg: PostgresHarness, tmp_path: Path, table: str, key: str = "id", where: str | None = None
        ) -> tuple[KeyRange, ...]:
    config = make_config(tmp_path / "lake", pg.source_config("shop", [(table, [key])]))
    return open_source(config.source("shop"), config.lake).reads.ranges(table, PER_RANGE, RowSelection(where=where)
                                                                         ).ranges


def counts(pg: PostgresHarness, table: str, ranges: tuple[KeyRange, ...], key: str = "id",
           where: str | None = None) -> list[int]:
    """Each range's rows, counted by the server."""
    conn = pg.connect()
    try:
        found = []
        with conn.cursor() as cur:
            for r in ranges:
                clauses: list[str] = [where] if where else []
                params: list[Any] = []
                if r.after is not None:
                    clauses.append(f"{key} > %s")
                    params += r.after
                if r.through is not None:
                    clauses.append(f"{key} <= %s")
                    params += r.through
                cur.execute(f"SELECT count(*) FROM {table}" + (" WHERE " + " AND ".join(clauses) if clauses else ""),
                            params)
                found.append(cur.fetchone()[0])
        return found
    finally:
        conn.close()


def assert_chained(ranges: tuple[KeyRange, ...]) -> None:
    """Open at both ends, each range starting after the key the one before it ends at, in key order."""
    assert ranges[0].after is None and ranges[-1].through is None
    assert all(a.through == b.after for a, b in itertools.pairwise(ranges))
    cuts = [int(r.through[0]) for r in ranges[:-1]]
    assert cuts == sorted(set(cuts))


def test_a_large_table_is_cut_from_a_sample_of_its_pages_into_ranges_of_about_the_size_asked(
        pg: PostgresHarness, tmp_path: Path, few_pages: None) -> None:
    load(pg, "items")
    ranges = cut(pg, tmp_path, "items")
    assert_chained(ranges)
    sizes = counts(pg, "items", ranges)
    assert sum(sizes) == ROWS and min(sizes) > 0
    assert ROWS // PER_RANGE // 2 <= len(ranges) <= ROWS // PER_RANGE * 2
    # Not walked: a walk cuts every PER_RANGE-th key exactly, a sample near it.
    assert sizes[:-1] != [PER_RANGE] * (len(sizes) - 1)
    assert max(sizes) < 3 * PER_RANGE


def test_a_table_never_analyzed_or_too_small_is_cut_by_walking_its_keys(pg: PostgresHarness, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    load(pg, "unknown", analyze=False)  # reltuples -1: no estimate to size a sample by
    load(pg, "small")  # analyzed, but fifty pages a range would read most of it
    monkeypatch.setattr(generic_reads, "SAMPLED_PAGES", 3)
    ranges = cut(pg, tmp_path / "unknown", "unknown")
    assert_chained(ranges)
    assert counts(pg, "unknown", ranges) == [PER_RANGE] * (ROWS // PER_RANGE)
    monkeypatch.setattr(generic_reads, "SAMPLED_PAGES", 50)
    ranges = cut(pg, tmp_path / "small", "small")
    assert_chained(ranges)
    assert counts(pg, "small", ranges) == [PER_RANGE] * (ROWS // PER_RANGE)


def test_a_sample_keeps_to_the_filter_and_a_key_named_like_its_row_number(pg: PostgresHarness, tmp_path: Path,
                                                                           few_pages: None) -> None:
    load(pg, "odd", key="databus_sample_0")
    where = "grp = 1"
    ranges = cut(pg, tmp_path, "odd", key="databus_sample_0", where=where)
    assert_chained(ranges)
    sizes = counts(pg, "odd", ranges, key="databus_sample_0", where=where)
    # Half the rows match: about half the ranges, each of about the size asked.
    assert sum(sizes) == ROWS // 2 and min(sizes) > 0
    assert sizes[:-1] != [PER_RANGE] * (len(sizes) - 1)  # sampled, not walked
    assert ROWS // 2 // PER_RANGE // 2 <= len(ranges) <= ROWS // 2 // PER_RANGE * 2


def test_a_bootstrap_read_by_sampled_ranges_is_exact(pg: PostgresHarness, tmp_path: Path, few_pages: None,
                                                     spark: SparkRuntime) -> None:
    load(pg, "items")
    pg.execute(["CREATE TABLE pairs (a INTEGER, b TEXT, v NUMERIC(12, 2), PRIMARY KEY (a, b))",
                f"INSERT INTO pairs SELECT g / 7, 'b' || (g % 7), g * 0.25 FROM generate_series(1, {ROWS}) g",
                "ANALYZE pairs"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("items", ["id"]), ("pairs", ["a", "b"])],
                                                             bootstrap_chunk_rows=PER_RANGE))
    [items, pairs] = sorted(cycle(config, spark), key=lambda r: r.table)
    assert items.key_ranges is not None and pairs.key_ranges is not None
    assert items.bootstrap_rows == pairs.bootstrap_rows == ROWS
    assert items.key_ranges.ranges > 1 and pairs.key_ranges.ranges > 1
    assert_snapshots_match(config)


def test_a_stale_count_changes_the_samples_cost_not_the_ranges(pg: PostgresHarness, tmp_path: Path,
                                                               few_pages: None) -> None:
    """Counted at 60,000 rows, then nine tenths deleted with no count since: the sample's pages are mostly empty, and
    the ranges still cover every live key once, about the size asked (one or two, not twelve)."""
    load(pg, "shrunk")
    pg.execute(["DELETE FROM shrunk WHERE id > 6000"])
    ranges = cut(pg, tmp_path, "shrunk")
    assert_chained(ranges)
    sizes = counts(pg, "shrunk", ranges)
    assert sum(sizes) == 6000 and min(sizes) > 0 and len(ranges) <= 3
