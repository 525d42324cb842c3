"""A throwaway MariaDB server for tests and benchmarks: a temporary data directory, binary logging,
a free loopback port. Started with the distribution's ``mariadbd``; stopped in ``close()``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pymysql

from dagster_databus.spark.connect_server import free_port
from tests.support.servers import DatabaseServer

BINARIES = ("mariadbd", "mariadb-install-db")
# MariaDB's binlog compression, with a threshold low enough that nearly every query and row event is compressed.
COMPRESSED_BINLOG = ("--log-bin-compress=ON", "--log-bin-compress-min-len=10")


def find_binary(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)),
                                      None)


class MariaDBServer(DatabaseServer):
    def __init__(self, binlog: bool = True, extra_args: Sequence[str] = (), server_id: int = 1) -> None:
        missing = [b for b in BINARIES if find_binary(b) is None]
        if missing:
            raise RuntimeError(f"MariaDB server binaries not found: {missing}; install Debian's mariadb-server")
        self.root = Path(tempfile.mkdtemp(prefix="databus-mariadb-"))
        self.datadir = self.root / "data"
        self.port = free_port()
        # A temp folder of its own: a starting server deletes the `#sql*` files it finds in its tmpdir, which in a
        # shared /tmp are the temporary tables of another server running (or installing) beside it.
        tmpdir = self.root / "tmp"
        tmpdir.mkdir()
        subprocess.run(
            [find_binary("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}", f"--tmpdir={tmpdir}",
             "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root"],
            check=True, capture_output=True,
        )
        args = [find_binary("mariadbd"), "--no-defaults", f"--datadir={self.datadir}", f"--tmpdir={tmpdir}",
                f"--socket={self.root / 'sock'}", f"--port={self.port}", "--bind-address=127.0.0.1", "--user=root",
                f"--pid-file={self.root / 'pid'}", f"--log-error={self.root / 'error.log'}", f"--server-id={server_id}",
                "--innodb-buffer-pool-size=64M", "--max-connections=200"]
        if binlog:
            args += [f"--log-bin={self.datadir / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
                     "--binlog-row-metadata=FULL"]
        self.args = [*args, *extra_args]
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.connect().close()
                break
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "error.log").read_text() if (self.root / "error.log").exists() else ""
                    self.close()
                    raise RuntimeError(f"mariadbd did not start:\n{log[-3000:]}") from None
                time.sleep(0.2)

    def connect(self, database: str | None = None, user: str = "root", password: str = "") -> pymysql.Connection:
        return pymysql.connect(host="127.0.0.1", port=self.port, user=user, password=password, database=database,
                               autocommit=True, connect_timeout=5)

    def crash(self) -> None:
        """SIGKILL the server, as a crash or a pulled cable would end it."""
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        """Start the server again on the same data directory and port."""
        self._start()

    def purge_binlogs_to(self, name: str, timeout_s: float = 15) -> None:
        """PURGE BINARY LOGS TO ``name``, retried until done: MariaDB keeps a binlog until the
        InnoDB binlog checkpoint has moved past it, which takes a moment after a rotation."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.execute(f"PURGE BINARY LOGS TO '{name}'")
            if self.query("SHOW BINARY LOGS")[0][0] == name:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"binlogs before {name} were not purged within {timeout_s}s")
            time.sleep(0.1)

    def replicate_from(self, primary: MariaDBServer) -> None:
        """Become a GTID replica of ``primary`` (run this server with --log-slave-updates to chain)."""
        self.execute(f"CHANGE MASTER TO master_host='127.0.0.1', master_port={primary.port}, master_user='root', "
                     "master_password='', master_use_gtid=slave_pos, master_connect_retry=1",
                     "START SLAVE")

    def replica_status(self) -> dict[str, Any]:
        conn = self.connect()
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute("SHOW SLAVE STATUS")
                return dict(cur.fetchone() or {})
        finally:
            conn.close()

    def wait_for_gtid(self, gtid: str, timeout_s: float = 30) -> None:
        """Wait until this replica has applied transaction ``gtid`` (domain-server-seq) or a later one."""
        domain, _, seq = (int(x) for x in gtid.split("-"))
        deadline = time.monotonic() + timeout_s
        while True:
            pos = str(self.query("SELECT @@GLOBAL.gtid_slave_pos")[0][0] or "")
            have = {int(p.split("-")[0]): int(p.split("-")[2]) for p in pos.split(",") if p}
            if have.get(domain, 0) >= seq:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica did not apply {gtid} within {timeout_s}s (has {pos!r})")
            time.sleep(0.05)

    def wait_applied(self, timeout_s: float = 30) -> None:
        """Wait until the SQL thread has applied everything the IO thread received."""
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.replica_status()
            if (s.get("Relay_Master_Log_File") == s.get("Master_Log_File")
                    and s.get("Exec_Master_Log_Pos") == s.get("Read_Master_Log_Pos")):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica did not apply its relay log within {timeout_s}s: {s}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
