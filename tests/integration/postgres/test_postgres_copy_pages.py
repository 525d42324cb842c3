"""A PostgreSQL bootstrap reads every byte of every COPY page: a byte-order mark, whitespace and control characters
survive at each position of a page (its first value, its last, keys and non-keys), with both engines."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sources import open_source
from dagster_databus.sources.postgres import reads as postgres_reads
from dagster_databus.sources.registry import source_kind
from dagster_databus.spark.runtime import SparkRuntime
from tests.support.checks import cycle
from tests.support.harness import PostgresHarness, make_config

# What a reader could take for framing: a byte-order mark, ASCII and Unicode whitespace, control characters.
ODD = ["\ufeff", "\t", "\r", "\n", "\r\n", "\v", "\f", "\x01", "\xa0", "\u2028", " "]


def rows(harness: PostgresHarness, table: str) -> list[dict[str, Any]]:
    """The table's rows as the server holds them (not through a COPY page)."""
    conn = harness.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            names = [d.name for d in cur.description]
            return sorted((dict(zip(names, r, strict=True)) for r in cur.fetchall()), key=repr)
    finally:
        conn.close()


def snapshot(config: Any, table: str) -> list[dict[str, Any]]:
    found = DeltaSnapshot(config.lake, "shop", table).read().to_pylist()
    return sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in found), key=repr)


def bounded(batches: Any, pages: int) -> list[dict[str, Any]]:
    """The rows of at most ``pages`` pages: a reader that cut a key would page from the cut key, round again."""
    return sorted((r for b in islice(batches, pages) for r in b.to_pylist()), key=repr)


def test_odd_leading_and_trailing_characters_survive_at_every_position_of_a_page_with_both_engines(
        pg: PostgresHarness, tmp_path: Path, spark: SparkRuntime) -> None:
    """One row a page (and a range) for each reader: every value is the first or the last of its page, keys in the
    first column of one table, non-keys in the first column of the other; a BOM in the middle and at the end too.
    After an update of the row whose key starts with a BOM, the snapshot holds that row once (no ghost of a cut
    key)."""
    keyed = [(f"{c}k{i}{c}", f"{c}v\ufeff{i}{c}", c if i % 2 else None) for i, c in enumerate(ODD)]
    keyed += [("\ufeffa-bom-key", "\ufeff", "")]
    noted = [(f"{c}n{i}{c}", i) for i, c in enumerate(ODD)] + [("\ufeff", 100)]
    pg.execute(["CREATE TABLE keyed (k TEXT PRIMARY KEY, v TEXT NOT NULL, w TEXT)",
                "CREATE TABLE noted (body TEXT, id INTEGER PRIMARY KEY)",
                *[("INSERT INTO keyed VALUES (?, ?, ?)", r) for r in keyed],
                *[("INSERT INTO noted VALUES (?, ?)", r) for r in noted]])
    doc = pg.source_config("shop", [("keyed", ["k"]), ("noted", ["id"])], bootstrap_chunk_rows=1)
    # Each reader on its own first (a bounded number of pages): this process's, and the range reader of tasks.
    config = make_config(tmp_path / "readers", doc)
    capture.install(config, "shop")
    source = open_source(config.sources[0], config.lake)
    for table in ("keyed", "noted"):
        want = rows(pg, table)
        assert bounded(source.reads.read_table(table).batches, len(want) + 2) == want, table
        read = source.reads.ranges(table, 1)
        ranges = [bounded(source_kind("postgres").read_range(read, i).batches, 3) for i in range(len(read.ranges))]
        assert sorted((r for found in ranges for r in found), key=repr) == want, table
        del read
    # Then both engines end to end, three rows a page (fewer Spark tasks): first, middle and last values.
    doc = {**doc, "bootstrap_chunk_rows": 3}
    for engine in ("local", "spark"):
        config = make_config(tmp_path / engine, doc, merge={"engine": engine})
        cycle(config, spark)
        for table in ("keyed", "noted"):
            assert snapshot(config, table) == rows(pg, table), (engine, table)
    pg.execute([("UPDATE keyed SET w = ? WHERE k = ?", ("\ufeffchanged", "\ufeffa-bom-key"))])
    for engine in ("local", "spark"):
        config = make_config(tmp_path / engine, doc, merge={"engine": engine})
        cycle(config, spark)
        assert snapshot(config, "keyed") == rows(pg, "keyed"), engine


def test_pages_are_bounded_by_bytes_and_narrow_rows_come_in_few_pages(pg: PostgresHarness, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A page holds at most the rows asked for and about ``PAGE_BYTES`` of text, by the width of the page before:
    a table of 2 KiB rows pages a few rows at a time under a 64 KiB bound, one of narrow rows at the most asked
    for. Every row arrives once, exactly, in key order."""
    monkeypatch.setattr(postgres_reads, "PAGE_BYTES", 64 << 10)
    pg.execute(["CREATE TABLE wide (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
                "INSERT INTO wide SELECT g, repeat(chr(97 + g % 26), 2048) FROM generate_series(1, 3000) g",
                "CREATE TABLE narrow (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)",
                "INSERT INTO narrow SELECT g, g * 3 FROM generate_series(1, 12000) g"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("wide", ["id"]), ("narrow", ["id"])]))
    capture.install(config, "shop")
    source = open_source(config.sources[0], config.lake)
    pages = {t: [b.to_pylist() for b in source.reads.read_table(t, batch_rows=5_000).batches]
             for t in ("wide", "narrow")}
    sizes = {t: [len(p) for p in found] for t, found in pages.items()}
    # The first page learns the width (FIRST_PAGE_ROWS rows); then about 64 KiB of 2 KiB rows, or 5,000 narrow ones.
    assert sizes["wide"][0] == postgres_reads.FIRST_PAGE_ROWS and max(sizes["wide"][1:]) <= 32
    assert sizes["narrow"] == [100, 5_000, 5_000, 1_900]
    assert [r["id"] for p in pages["wide"] for r in p] == list(range(1, 3001))
    assert all(r["body"] == chr(97 + r["id"] % 26) * 2048 for p in pages["wide"] for r in p)
    assert [(r["id"], r["v"]) for p in pages["narrow"] for r in p] == [(i, i * 3) for i in range(1, 12001)]
