"""PostgreSQL capture and bootstrap, side by side in one run.

Capture, on one WAL range, on one core (the benchmark pins itself once the server runs, so the server's
walsender decodes on the other): our capture into the durable change log (stream, pgoutput decode, type
conversion, Avro, fsync, manifest) beside a bare psycopg2 replication loop that only receives the messages,
and ``pg_recvlogical`` writing them to a file. Two workloads: 300,000 row changes (inserts, updates,
deletes) in transactions of 1 to 10,000 changes across three tables of ints, text, numeric, timestamptz and
bool; and 20,000 one-row transactions, where each transaction's fixed cost shows. Each reader streams a slot
of its own copied (``pg_copy_logical_replication_slot``) from one template slot made before the workload, so
all start at the same LSN, and each stops at the end LSN of the workload's last commit; a round's slot is
copied afresh before it (a read confirms its slot). Ours' CPU time is printed too: on a shared machine it moves
far less than wall time (docs/performance.md).

Bootstrap of a 1,000,000-row table of the same kinds of columns, as ``bench_bootstrap`` measures MariaDB's:
the spark engine (key ranges read by Spark tasks) and the local engine (one connection) beside a bare
``COPY (SELECT ...) TO STDOUT`` parsed into Arrow by ``pyarrow.csv`` and written to Parquet.

    python -m benchmarks.bench_postgres [changes] [rows]

``changes`` scales every transaction count of the workload (300,000: the one above).
"""

from __future__ import annotations

import io
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import psycopg2
import psycopg2.extras
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.bench_bootstrap import MASTER, bootstrap
from benchmarks.common import best_of, report
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.dataplane.results import BOOTSTRAP_PHASES
from dagster_databus.sources.postgres.connect import SESSION_OPTIONS
from tests.support.postgres import PostgresServer

# No autovacuum: its WAL after the workload would only move the poll's bound past the last commit.
SETTINGS = {"autovacuum": "off", "max_wal_size": "4GB", "shared_buffers": "256MB"}
TEMPLATE = "bench_template"  # the slot every reader's slot is copied from
SLOT = "bench_ours"  # capture's slot (config `slot`)

TABLES = (
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, balance numeric(12,2), "
    "updated_at timestamptz, active boolean)",
    "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text, total numeric(12,2), "
    "placed_at timestamptz, paid boolean)",
    "CREATE TABLE order_lines (order_id bigint, line int, sku text, qty int, price numeric(10,2), "
    "shipped_at timestamptz, PRIMARY KEY (order_id, line))",
)
CUSTOMERS = 20_000
# A timestamptz with microseconds, from the generated row number g.
AT = ("timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' "
      "+ (g::bigint * 7919 % 1000000) * interval '1 microsecond'")


def _workload(scale: float) -> tuple[list[str], int, int]:
    """The workload's statements (``DO`` blocks that commit each transaction), its changes and transactions, for
    ``scale`` = 1 meaning 300,000 changes in 14,610 transactions (other scales multiply each count):

    - 10,000 one-change transactions: a customer's update;
    - 4,000 of 10: an order and its 9 lines inserted;
    - 100 of 1,000: orders inserted;
    - 500 of 100: orders updated (status, paid);
    - 10 of 10,000: 6 of order lines inserted, 4 of orders deleted.
    """
    small, tens, thousands, hundreds, big_inserts, big_deletes = (max(1, round(count * scale))
                                                                  for count in (10_000, 4_000, 100, 500, 6, 4))
    first = tens + 1  # the bulk orders' first id
    lines_from = first + thousands * 1_000  # order ids the big line inserts use (no order row: no FK here)
    statements = [
        f"""DO $$ BEGIN FOR i IN 1..{small} LOOP
              UPDATE customers SET balance = balance + 1.25, updated_at = clock_timestamp()
               WHERE id = i % {CUSTOMERS} + 1;
              COMMIT; END LOOP; END $$""",
        f"""DO $$ BEGIN FOR o IN 1..{tens} LOOP
              INSERT INTO orders VALUES (o, o % {CUSTOMERS} + 1, 'new', o * 3.17 % 10000, clock_timestamp(), false);
              INSERT INTO order_lines SELECT o, g, 'sku-' || (o * g % 5000), g, g * 1.99, NULL
                FROM generate_series(1, 9) g;
              COMMIT; END LOOP; END $$""",
        f"""DO $$ BEGIN FOR t IN 0..{thousands - 1} LOOP
              INSERT INTO orders SELECT g, g % {CUSTOMERS} + 1, 'new', g * 3.17 % 10000, {AT}, g % 3 = 0
                FROM generate_series({first} + t * 1000, {first} + t * 1000 + 999) g;
              COMMIT; END LOOP; END $$""",
        f"""DO $$ BEGIN FOR t IN 0..{hundreds - 1} LOOP
              UPDATE orders SET status = 'shipped', paid = true, total = total + 0.01
               WHERE id BETWEEN {first} + t * 100 AND {first} + t * 100 + 99;
              COMMIT; END LOOP; END $$""",
        f"""DO $$ BEGIN FOR t IN 0..{big_inserts - 1} LOOP
              INSERT INTO order_lines SELECT {lines_from} + t * 1000 + g / 10, g % 10, 'sku-' || g, g % 7 + 1,
                     g % 1000 * 0.99, CASE WHEN g % 2 = 0 THEN {AT} END
                FROM generate_series(0, 9999) g;
              COMMIT; END LOOP; END $$""",
        f"""DO $$ BEGIN FOR t IN 0..{big_deletes - 1} LOOP
              DELETE FROM orders WHERE id BETWEEN {lines_from} - 1 - (t + 1) * 10000 + 1
                                             AND {lines_from} - 1 - t * 10000;
              COMMIT; END LOOP; END $$""",
    ]
    assert big_deletes * 10_000 <= thousands * 1_000, "the deletes take bulk-inserted orders"
    changes = small + tens * 10 + thousands * 1_000 + hundreds * 100 + (big_inserts + big_deletes) * 10_000
    transactions = small + tens + thousands + hundreds + big_inserts + big_deletes
    return statements, changes, transactions


def _config(server: PostgresServer, work: Path) -> DatabusConfig:
    return parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "postgres", "port": server.port, "user": "postgres", "database": "bench",
         "slot": SLOT, "poll": {"chunk_rows": 20_000},
         "tables": [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]},
                    {"name": "order_lines", "primary_key": ["order_id", "line"]}]}]}, base=work)


def _fresh_slot(server: PostgresServer, name: str) -> None:
    """Slot ``name`` as a copy of the template: at the workload's start LSN, nothing confirmed past it."""
    deadline = time.monotonic() + 10
    while server.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (name,)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"slot {name} stays active")
        time.sleep(0.01)  # the last reader's walsender is exiting
    server.execute(("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (name,)), ("SELECT pg_copy_logical_replication_slot(%s, %s)", (TEMPLATE, name)),
                   database="bench")  # a copy of a logical slot belongs to the database it is made in


def _lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def one_row_workload(transactions: int) -> tuple[list[str], int, int]:
    """``transactions`` one-row transactions, as an OLTP source commits them: a customer's update each."""
    return [f"""DO $$ BEGIN FOR i IN 1..{transactions} LOOP
                  UPDATE customers SET balance = balance + 1.25, updated_at = clock_timestamp()
                   WHERE id = i % {CUSTOMERS} + 1;
                  COMMIT; END LOOP; END $$"""], transactions, transactions


def compare(server: PostgresServer, workload: tuple[list[str], int, int], title: str) -> None:
    """Our capture vs the bare psycopg2 loop vs pg_recvlogical, on one WAL range: the workload's."""
    work = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    try:
        server.execute("DROP DATABASE IF EXISTS bench WITH (FORCE)", "CREATE DATABASE bench")
        server.execute(*TABLES, f"INSERT INTO customers SELECT g, 'customer ' || g, CASE WHEN g % 5 > 0 THEN "
                       f"'c' || g || '@example.com' END, g % 1000 * 1.5, {AT}, g % 4 > 0 "
                       f"FROM generate_series(1, {CUSTOMERS}) g", database="bench")
        config = _config(server, work)
        source = config.source("b")
        publication = source.publication_name  # type: ignore[union-attr]
        capture.install(config, "b")
        server.execute(("SELECT pg_copy_logical_replication_slot(%s, %s)", (SLOT, TEMPLATE)), database="bench")
        start = server.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                             (TEMPLATE,))[0][0]
        statements, changes, transactions = workload
        # Committed synchronously: the last commit is flushed, so every reader can decode it at once.
        server.execute("SET synchronous_commit = on", *statements, database="bench")
        # The end LSN of the workload's last commit, and its changes, as the server's own pgoutput gives them.
        end_text, decoded = server.query(
            "SELECT max(lsn)::text, count(*) FILTER (WHERE get_byte(data, 0) IN (73, 85, 68)) "  # I, U, D
            "FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
            "'publication_names', %s)", (TEMPLATE, publication), database="bench")[0]
        assert decoded == changes, (decoded, changes)
        end = _lsn(end_text)
        wal = end - _lsn(start)
        checkpoint = (work / "lake" / "log" / "b").resolve()
        saved = work / "start"
        shutil.copytree(checkpoint, saved)

        cpu: list[float] = []  # this process's CPU time per run of ours: what the machine's other load moves least

        def ours() -> None:
            started = time.process_time()
            result = capture.run(config, "b")
            cpu.append(time.process_time() - started)
            assert result.events == changes, (result.events, changes)
            assert result.until.value == end, (result.until, end_text)

        def reset() -> None:
            shutil.rmtree(checkpoint)
            shutil.copytree(saved, checkpoint)
            _fresh_slot(server, SLOT)

        seen = received = 0

        def bare() -> None:
            nonlocal seen, received
            conn = psycopg2.connect(host=server.host, port=server.port, user="postgres", dbname="bench",
                                    options=SESSION_OPTIONS,
                                    connection_factory=psycopg2.extras.LogicalReplicationConnection)
            cur = conn.cursor()
            cur.start_replication(slot_name="bench_bare", decode=False, start_lsn=_lsn(start),
                                  options={"proto_version": "1", "publication_names": publication})
            seen = received = 0
            while True:
                message = cur.read_message()
                if message is None:
                    select.select([cur], [], [], 1.0)
                    continue
                payload = message.payload
                received += len(payload)
                if payload[0] in b"IUD":
                    seen += 1
                elif message.data_start >= end:  # a commit's message is at its end LSN
                    break
            conn.close()

        recvlogical_out = work / "recvlogical.out"

        def recvlogical() -> None:
            subprocess.run([str(server.bindir / "pg_recvlogical"), "--start", "--no-loop", "-d",
                            f"host={server.host} port={server.port} user=postgres dbname=bench",
                            "--slot", "bench_recvlogical", f"--endpos={end_text}", "-f", str(recvlogical_out),
                            "-o", "proto_version=1", "-o", f"publication_names={publication}"],
                           check=True, stdout=subprocess.DEVNULL)

        timings = [("our capture into the change log", best_of(ours, setup=reset), changes),
                   ("bare psycopg2 replication loop", best_of(bare, setup=lambda: _fresh_slot(server, "bench_bare")),
                    seen),
                   ("pg_recvlogical writing to a file",
                    best_of(recvlogical, setup=lambda: _fresh_slot(server, "bench_recvlogical")), changes)]
        ours_s = timings[0][1]
        print(f"\nPostgreSQL capture, {title}: {changes:,} row changes in {transactions:,} transactions; "
              f"{wal / 2**20:.1f} MiB of WAL, {received / 2**20:.1f} MiB of pgoutput messages (asked: ours <= 1.3x "
              "the bare loop)")
        for name, seconds, delivered in timings:
            ratio = "" if seconds is ours_s else f"   ours takes {ours_s / seconds:5.2f}x its time"
            lost = "" if delivered == changes else f"   (delivered {delivered:,} of {changes:,} changes)"
            print(f"  {name:<38}{seconds:8.3f}s {changes / seconds:>12,.0f} changes/s{ratio}{lost}")
        print(f"  ours used {min(cpu):.3f}s of CPU at best ({changes / min(cpu):,.0f} changes per CPU second)")
    finally:
        for slot in (SLOT, TEMPLATE, "bench_bare", "bench_recvlogical"):
            server.execute(("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                            "WHERE slot_name = %s AND NOT active", (slot,)))
        shutil.rmtree(work, ignore_errors=True)


ITEMS = ("CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, price numeric(12,2), qty int, "
         "placed_at timestamptz, paid boolean, note text)")
ITEM_TYPES = {"id": pa.int64(), "name": pa.string(), "price": pa.decimal128(12, 2), "qty": pa.int32(),
              "placed_at": pa.timestamp("us", tz="UTC"), "paid": pa.bool_(), "note": pa.string()}


def load_items(server: PostgresServer, n: int) -> None:
    server.execute("DROP DATABASE IF EXISTS bootbench WITH (FORCE)", "CREATE DATABASE bootbench")
    server.execute(ITEMS, f"INSERT INTO items SELECT g, 'item ' || g, g * 0.5, g % 97, {AT}, g % 3 = 0, "
                   f"CASE WHEN g % 3 = 0 THEN 'x' END FROM generate_series(0, {n - 1}) g",
                   "VACUUM ANALYZE items", database="bootbench")


def bootstrap_case(server: PostgresServer, work: Path, n: int) -> None:
    load_items(server, n)
    config = parse_config({"lake": str(work / "plake"), "spark": {"master": MASTER}, "merge": {"file_rows": 250_000},
                           "sources": [{"name": "p", "kind": "postgres", "port": server.port, "user": "postgres",
                                        "database": "bootbench", "bootstrap_chunk_rows": 125_000,
                                        "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    capture.install(config, "p")
    bootstrap(config)  # warm
    query = f"COPY (SELECT {', '.join(ITEM_TYPES)} FROM items) TO STDOUT WITH (FORMAT csv)"

    bare_phases: dict[str, float] = {}

    def bare() -> None:
        started = time.perf_counter()
        conn = psycopg2.connect(host=server.host, port=server.port, user="postgres", dbname="bootbench",
                                options=SESSION_OPTIONS)
        buffer = io.BytesIO()
        with conn.cursor() as cur:
            cur.copy_expert(query, buffer)
        conn.close()
        copied = time.perf_counter()
        buffer.seek(0)
        table = pacsv.read_csv(buffer, read_options=pacsv.ReadOptions(column_names=list(ITEM_TYPES)),
                               convert_options=pacsv.ConvertOptions(
                                   column_types=ITEM_TYPES, true_values=["t"], false_values=["f"],
                                   strings_can_be_null=True, quoted_strings_can_be_null=False))
        assert table.num_rows == n
        parsed = time.perf_counter()
        pq.write_table(table, work / "pbare.parquet")
        bare_phases.update(copy=copied - started, parse=parsed - copied, write=time.perf_counter() - parsed)

    phases: list[Mapping[str, float]] = []

    def spark_run() -> None:
        ranges = bootstrap(config).key_ranges
        assert ranges is not None
        phases.append(ranges.seconds)

    spark, floor, local = (best_of(spark_run, 3), best_of(bare, 3), best_of(lambda: bootstrap(config, "local"), 3))
    report("PostgreSQL bootstrap", n, ("ours: spark engine, key ranges in tasks", spark),
           ("bare COPY -> pyarrow.csv -> Parquet", floor), ("ours: local engine, one connection", local))
    print(f"  the spark engine takes {spark / floor:5.2f}x the bare COPY's time (asked: at most 1.3x); the local "
          f"engine {local / floor:5.2f}x")
    fastest = min(phases, key=lambda p: sum(p[k] for k in ("planning", "starting", "tasks", "committing")))
    print("  where the spark engine's time went, its fastest run (seconds; the task phases are summed over tasks "
          "that run side by side):\n    " + ", ".join(f"{k} {fastest[k]:.3f}" for k in BOOTSTRAP_PHASES))
    print("  the bare COPY's, its last run: " + ", ".join(f"{k} {v:.3f}" for k, v in bare_phases.items()))


def main(changes: int = 300_000, rows: int = 1_000_000) -> None:
    scale = changes / 300_000
    server = PostgresServer(extra_settings=SETTINGS)
    cores = os.sched_getaffinity(0)
    work = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    try:
        os.sched_setaffinity(0, {min(cores)})  # one core for capture (the goal is per core); the server has both
        try:
            compare(server, _workload(scale), "transactions of 1 to 10,000 changes across 3 tables")
            compare(server, one_row_workload(max(1, round(20_000 * scale))), "one-row transactions")
        finally:
            os.sched_setaffinity(0, cores)
        bootstrap_case(server, work, rows)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300_000, int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000)
