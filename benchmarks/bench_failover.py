"""Failover position search on a standby with many binlogs: ours by GTID and by commit time vs the
server's own GTID positioning (a GTID-mode replica connect) vs `mysqlbinlog` reading every binlog
(the floor of a linear scan); plus a whole capture run that fails over, vs one that does not."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from benchmarks.common import best_of
from dagster_databus import capture
from dagster_databus.config import parse_config
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.mysql.failover import find_after_gtid, find_by_time
from dagster_databus.sources.mysql.source import MysqlSource
from tests.support.mariadb import MariaDBServer, find_binary


def main(transactions: int = 40_000, files: int = 8) -> None:
    primary = MariaDBServer(server_id=1)
    replica = MariaDBServer(server_id=2, extra_args=["--log-slave-updates"])
    work = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    try:
        replica.replicate_from(primary)
        primary.execute("CREATE DATABASE bench", "CREATE TABLE bench.kv (k INT PRIMARY KEY, v INT)")
        conn = primary.connect("bench")
        with conn.cursor() as cur:
            for i in range(transactions):  # one-row transactions: the search walks transactions
                cur.execute("INSERT INTO kv VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)", (i % 5000, i))
                if i and i % (transactions // files) == 0:
                    cur.execute("FLUSH BINARY LOGS")
                    replica.execute("FLUSH BINARY LOGS")  # a replica rotates its own binlogs
                if i == transactions * 9 // 10:
                    time.sleep(1.1)  # a commit-second boundary near the end, for the timestamp search
        conn.close()
        gtid = primary.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
        replica.wait_for_gtid(gtid)
        config = parse_config({"lake": str(work / "lake"), "sources": [
            {"name": "b", "kind": "mysql", "port": primary.port, "user": "root", "database": "bench",
             "standby": {"host": "127.0.0.1", "port": replica.port},
             "failover": {"retries": 1, "interval_s": 0, "fallback_interval_s": 1},
             "tables": [{"name": "kv", "primary_key": ["k"]}]}]}, base=work)
        source = open_source(config.source("b"))
        assert isinstance(source, MysqlSource)
        servers = source.servers
        servers.role = "standby"
        domain, server_id, seq = gtid.split("-")
        target = f"{domain}-{server_id}-{int(seq) - transactions // 10}"  # 10% from the end
        since_ts = int(time.time()) - 1

        def by_gtid() -> None:
            with closing(servers.connect()) as c, c.cursor() as cur:
                find_after_gtid(servers, cur, target)

        def by_time() -> None:
            with closing(servers.connect()) as c, c.cursor() as cur:
                find_by_time(servers, cur, since_ts)

        def server_gtid() -> None:
            from pymysqlreplication import BinLogStreamReader

            stream = BinLogStreamReader(connection_settings=servers.connection_settings(), server_id=98,
                                        blocking=False, auto_position=target, is_mariadb=True)
            next(iter(stream), None)
            stream.close()

        names = [r[0] for r in replica.query("SHOW BINARY LOGS")]

        def mysqlbinlog() -> None:
            subprocess.run([find_binary("mysqlbinlog") or "mysqlbinlog", *[str(replica.datadir / n) for n in names]],
                           check=True, stdout=subprocess.DEVNULL)

        timings = [("ours: find the position by GTID", best_of(by_gtid)),
                   ("ours: find it by commit time", best_of(by_time)),
                   ("MariaDB's own GTID positioning", best_of(server_gtid)),
                   ("mysqlbinlog reading every binlog", best_of(mysqlbinlog))]
        print(f"\nFailover position search ({transactions:,} transactions in {len(names)} binlogs on the standby)")
        ours = timings[0][1]
        for name, seconds in timings:
            ratio = "" if seconds is ours else f"   GTID search takes {ours / seconds:6.2f}x its time"
            print(f"  {name:<38}{seconds * 1000:9.1f} ms{ratio}")

        capture.install(config, "b")
        primary.execute("INSERT INTO bench.kv VALUES (1, -1) ON DUPLICATE KEY UPDATE v = -1")
        replica.wait_for_gtid(primary.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])
        started = time.perf_counter()
        capture.run(config, "b")
        normal = time.perf_counter() - started
        primary.crash()
        started = time.perf_counter()
        result = capture.run(config, "b")
        switched = time.perf_counter() - started
        assert result.failover is not None and ChangeLog(config.lake, "b").manifest().lineage
        print(f"  {'a capture run that fails over':<38}{switched * 1000:9.1f} ms   "
              f"{switched / normal:6.2f}x a run that does not ({normal * 1000:.1f} ms)")
    finally:
        replica.close()
        primary.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
