"""MySQL binlog capture, side by side on the same binlog in one run: our capture into the durable change log,
the bare python-mysql-replication read loop, and `mysqlbinlog` decoding the same rows to text; with the
binlog plain and compressed (MariaDB's log_bin_compress). This process runs on one core, and the server on
the others.

Then a 1,000,000-row transaction captured whole: the capture's peak memory growth beside the transaction's
size in the binlog.

    python -m benchmarks.bench_mysql [rows]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import best_of, peak_rss_growth
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from tests.support.mariadb import COMPRESSED_BINLOG, MariaDBServer, find_binary

ROUNDS = 5
ITEMS = "CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), price DOUBLE, qty INT, note VARCHAR(20))"


def _config(server: MariaDBServer, work: Path) -> DatabusConfig:
    return parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "mysql", "port": server.port, "user": "root", "database": "bench",
         "poll": {"chunk_rows": 20_000}, "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)


def _write(server: MariaDBServer, rows: int, per_transaction: int) -> None:
    conn = server.connect("bench")
    with conn.cursor() as cur:
        for first in range(0, rows, per_transaction):
            conn.begin()
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                            [(i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x")
                             for i in range(first, min(rows, first + per_transaction))])
            conn.commit()
    conn.close()


def _binlog_bytes(server: MariaDBServer) -> int:
    return sum(int(r[1]) for r in server.query("SHOW BINARY LOGS"))


def compare(server: MariaDBServer, rows: int, per_transaction: int, label: str) -> None:
    """Our capture vs python-mysql-replication vs mysqlbinlog, on ``rows`` inserts ``per_transaction`` a
    transaction."""
    work = Path(tempfile.mkdtemp(prefix="bench-mysql-"))
    try:
        server.execute("DROP DATABASE IF EXISTS bench", "CREATE DATABASE bench", ITEMS)
        config = _config(server, work)
        capture.install(config, "b")
        start_file, start_pos = server.query("SHOW BINLOG STATUS")[0][:2]
        before = _binlog_bytes(server)
        _write(server, rows, per_transaction)
        size = _binlog_bytes(server) - before
        checkpoint = (work / "lake" / "log" / "b").resolve()
        saved = work / "start"
        shutil.copytree(checkpoint, saved)

        def ours() -> None:
            result = capture.run(config, "b")
            assert result.events == rows, (result.events, rows)

        def reset() -> None:
            shutil.rmtree(checkpoint)
            shutil.copytree(saved, checkpoint)

        seen = 0

        def bare() -> None:
            from pymysqlreplication import BinLogStreamReader
            from pymysqlreplication.row_event import WriteRowsEvent

            nonlocal seen
            stream = BinLogStreamReader(
                connection_settings={"host": "127.0.0.1", "port": server.port, "user": "root", "passwd": ""},
                server_id=99, resume_stream=True, blocking=False, log_file=start_file, log_pos=start_pos,
                only_events=[WriteRowsEvent])
            seen = sum(len(e.rows) for e in stream)
            stream.close()

        binlog = server.datadir / start_file

        def mysqlbinlog() -> None:
            subprocess.run([find_binary("mysqlbinlog") or "mysqlbinlog", "--base64-output=decode-rows", "-v",
                            f"--start-position={start_pos}", str(binlog)], check=True, stdout=subprocess.DEVNULL)

        # Best of five each: on a shared machine a run of a few tenths of a second moves by a fifth between runs.
        timings = [("our capture into the change log", best_of(ours, ROUNDS, setup=reset), rows),
                   ("bare python-mysql-replication loop", best_of(bare, ROUNDS), seen),
                   ("mysqlbinlog decoding rows to text", best_of(mysqlbinlog, ROUNDS), rows)]
        ours_s = timings[0][1]
        print(f"\n{label}: {rows:,} row events, {per_transaction:,} a transaction ({rows // per_transaction:,} "
              f"transactions), {size / 2**20:.1f} MiB of binlog")
        for name, seconds, delivered in timings:
            ratio = "" if seconds is ours_s else f"   ours takes {ours_s / seconds:5.2f}x its time"
            lost = "" if delivered == rows else f"   (delivered {delivered:,} of {rows:,} row events)"
            print(f"  {name:<38}{seconds:8.3f}s {rows / seconds:>12,.0f} events/s{ratio}{lost}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def large_transaction(server: MariaDBServer, rows: int, label: str) -> None:
    """One transaction of ``rows`` inserts, captured whole into one log commit, by a process of its own that
    has just captured a one-row transaction of the same table (imports and compiled kernels loaded): the
    peak growth of that process's memory while it captures the large one, in three such processes (the
    allocators make it vary by some tens of MiB)."""
    server.execute("DROP DATABASE IF EXISTS bench", "CREATE DATABASE bench", ITEMS)
    measured = [_capture_in_a_process(server, rows, run) for run in range(3)]
    size = measured[0][1]
    growths = ", ".join(f"{growth / 2**20:.0f}" for growth, _ in measured)
    print(f"\n{label}: one transaction of {rows:,} row events, {size / 2**20:.1f} MiB of binlog: capture's peak "
          f"memory growth {growths} MiB in three processes (asked: <= 200 MiB)")


def _capture_in_a_process(server: MariaDBServer, rows: int, run: int) -> tuple[int, int]:
    """A fresh log; one row written and captured by a new process, then ``rows`` in one transaction captured
    by it: (its peak memory growth, the transaction's bytes of binlog)."""
    work = Path(tempfile.mkdtemp(prefix="bench-mysql-"))
    first = run * (rows + 1)
    try:
        capture.install(_config(server, work), "b")
        server.execute(f"INSERT INTO bench.items VALUES ({first}, 'item', 0, 0, 'x')")
        capturer = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_mysql", "--measure", str(server.port),
                                     str(work), str(rows)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert capturer.stdin is not None and capturer.stdout is not None
        assert capturer.stdout.readline().strip() == "warm"
        before = _binlog_bytes(server)
        server.execute(f"INSERT INTO bench.items SELECT {first} + seq, CONCAT('item ', seq), seq * 0.5, seq % 97, "
                       f"IF(seq % 3, NULL, 'x') FROM seq_1_to_{rows}", database="bench")
        size = _binlog_bytes(server) - before
        capturer.stdin.write("go\n")
        capturer.stdin.flush()
        growth = int(capturer.stdout.readline())
        assert capturer.wait() == 0
        return growth, size
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure(port: int, work: Path, rows: int) -> None:
    """The capturing process: a warm-up capture, then, once told, the measured one."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    server = MariaDBServer.__new__(MariaDBServer)
    server.port = port
    config = _config(server, work)
    assert capture.run(config, "b").events == 1
    print("warm", flush=True)
    sys.stdin.readline()
    events = 0

    def run() -> None:
        nonlocal events
        events = capture.run(config, "b").events

    growth = peak_rss_growth(run)
    assert events == rows, (events, rows)
    print(growth, flush=True)


def _off_our_core(server: MariaDBServer) -> None:
    """Keep the server's threads (and those they start: each connection's) off this process's core, where
    they would share the measured core with capture. ``mysqlbinlog`` reads the file without them."""
    ours = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - ours
    if not others:
        return
    for thread in os.listdir(f"/proc/{server.process.pid}/task"):
        os.sched_setaffinity(int(thread), others)


def main(rows: int = 100_000) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core: the goal is per core
    for label, args in (("plain binlog", ()), ("compressed binlog (log_bin_compress)", COMPRESSED_BINLOG)):
        server = MariaDBServer(extra_args=args)
        _off_our_core(server)
        try:
            compare(server, rows, 1_000, label)
            compare(server, rows // 5, 1, label)
            large_transaction(server, 1_000_000, label)
        finally:
            server.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        _measure(int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
