"""MySQL binlog capture on one binlog: our capture into the change log vs a bare python-mysql-replication
read loop vs `mysqlbinlog` decoding the same binlog file (row events decoded to text)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import best_of
from dagster_databus import pipeline
from dagster_databus.config import parse_config
from tests.mariadb import MariaDBServer, find_binary


def main(rows: int = 100_000) -> None:
    server = MariaDBServer()
    work = Path(tempfile.mkdtemp(prefix="bench-mysql-"))
    try:
        server.execute("CREATE DATABASE bench", "CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), "
                       "price DOUBLE, qty INT, note VARCHAR(20))")
        config = parse_config({"lake": str(work / "lake"), "sources": [
            {"name": "b", "kind": "mysql", "port": server.port, "user": "root", "database": "bench",
             "poll": {"chunk_rows": 20_000}, "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
        pipeline.install(config, "b")
        start_file, start_pos = server.query("SHOW MASTER STATUS")[0][:2]
        conn = server.connect("bench")
        with conn.cursor() as cur:
            for first in range(0, rows, 1_000):  # transactions of 1,000 rows
                conn.begin()
                cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                                [(i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x")
                                 for i in range(first, min(rows, first + 1_000))])
                conn.commit()
        conn.close()
        events = rows
        checkpoint = (work / "lake" / "log" / "b").resolve()
        saved = work / "start"
        shutil.copytree(checkpoint, saved)

        def ours() -> None:
            pipeline.capture(config, "b")

        def reset() -> None:
            shutil.rmtree(checkpoint)
            shutil.copytree(saved, checkpoint)

        def bare() -> None:
            from pymysqlreplication import BinLogStreamReader
            from pymysqlreplication.row_event import WriteRowsEvent

            stream = BinLogStreamReader(
                connection_settings={"host": "127.0.0.1", "port": server.port, "user": "root", "passwd": ""},
                server_id=99, resume_stream=True, blocking=False, log_file=start_file, log_pos=start_pos,
                only_events=[WriteRowsEvent])
            n = sum(len(e.rows) for e in stream)
            stream.close()
            assert n == events, n

        binlog = server.datadir / start_file

        def mysqlbinlog() -> None:
            subprocess.run([find_binary("mysqlbinlog") or "mysqlbinlog", "--base64-output=decode-rows", "-v",
                            f"--start-position={start_pos}", str(binlog)], check=True, stdout=subprocess.DEVNULL)

        timings = [("our capture into the change log", best_of(ours, setup=reset)),
                   ("bare python-mysql-replication loop", best_of(bare)),
                   ("mysqlbinlog decoding rows to text", best_of(mysqlbinlog))]
        ours_s = timings[0][1]
        print(f"\nMySQL binlog capture ({events:,} row events in {events // 1000:,} transactions, one binlog)")
        for name, seconds in timings:
            ratio = "" if seconds is ours_s else f"   ours takes {ours_s / seconds:5.2f}x its time"
            print(f"  {name:<38}{seconds:8.3f}s {events / seconds:>12,.0f} events/s{ratio}")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
