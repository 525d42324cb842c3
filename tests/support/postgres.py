"""A throwaway PostgreSQL server for tests and benchmarks: a temporary cluster (``initdb``) with
``wal_level=logical``, trust authentication on loopback and its own socket directory, a free port.
Started with the distribution's ``postgres`` (``pg_config --bindir``); stopped in ``close()``.

PostgreSQL refuses to run as root, so under root the cluster belongs to the ``postgres`` system user and
both ``initdb`` and ``postgres`` run as it (``setpriv``, which execs: the child's pid is the server's)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psycopg2
import psycopg2.extensions

from dagster_databus.spark.connect_server import free_port
from tests.support.servers import DatabaseServer

# What tests run with: logical decoding on, room for many slots and walsenders, no durability (speed).
SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "100",
    "max_prepared_transactions": "10",  # a test leaves one open (PREPARE TRANSACTION), as an application may
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "listen_addresses": "127.0.0.1",
    "log_min_messages": "warning",
}
# Members of this role authenticate with a password (scram-sha-256), everyone else by trust: a test of a
# wrong password creates ``CREATE ROLE u LOGIN PASSWORD 'p' IN ROLE password_auth``.
PASSWORD_ROLE = "password_auth"
PG_HBA = f"""\
# TYPE  DATABASE     USER            ADDRESS       METHOD
local   all          +{PASSWORD_ROLE}                scram-sha-256
local   replication  +{PASSWORD_ROLE}                scram-sha-256
host    all          +{PASSWORD_ROLE}  127.0.0.1/32  scram-sha-256
host    replication  +{PASSWORD_ROLE}  127.0.0.1/32  scram-sha-256
local   all          all                           trust
local   replication  all                           trust
host    all          all             127.0.0.1/32  trust
host    replication  all             127.0.0.1/32  trust
"""
SERVICE_USER = "postgres"


def find_pg_bindir() -> Path | None:
    """The PostgreSQL server binaries' folder (``initdb``, ``postgres``), or None when not installed.
    Debian's ``pg_config`` (libpq-dev / postgresql-common) names it; else the newest /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], check=True, capture_output=True, text=True).stdout
            candidates.append(Path(out.strip()))
        except (OSError, subprocess.CalledProcessError):
            pass
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    return next((c for c in candidates if (c / "initdb").exists() and (c / "postgres").exists()), None)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


class PostgresServer(DatabaseServer):
    """One cluster, one server process. ``host``/``port`` reach it over TCP; superuser ``postgres``
    (no password); databases ``postgres`` and ``databus``."""

    host = "127.0.0.1"

    def __init__(self, extra_settings: Mapping[str, str] = {}) -> None:
        bindir = find_pg_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (pg_config --bindir, /usr/lib/postgresql/*/bin); "
                               "install Debian's postgresql")
        self.bindir = bindir
        self.as_service_user = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="databus-pg-"))
        self.datadir = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        if self.as_service_user:
            entry = pwd.getpwnam(SERVICE_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        try:
            subprocess.run(
                self._as_owner([str(bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres", "-A", "trust",
                                "-E", "UTF8", "--locale=C", "--no-sync"]),
                check=True, capture_output=True, cwd=self.root,
            )
        except subprocess.CalledProcessError as e:
            shutil.rmtree(self.root, ignore_errors=True)
            raise RuntimeError(f"initdb failed:\n{e.stdout.decode()}{e.stderr.decode()}") from None
        (self.datadir / "pg_hba.conf").write_text(PG_HBA)
        self.set({**SETTINGS, "port": str(self.port), "unix_socket_directories": str(self.root),
                  **extra_settings}, restart=False)
        self._start()
        self.execute(f"CREATE ROLE {PASSWORD_ROLE} NOLOGIN", "CREATE DATABASE databus")

    def _as_owner(self, args: Sequence[str]) -> list[str]:
        if not self.as_service_user:
            return list(args)
        return ["setpriv", f"--reuid={SERVICE_USER}", f"--regid={SERVICE_USER}", "--init-groups", "--", *args]

    def _start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self._as_owner([str(self.bindir / "postgres"), "-D", str(self.datadir)]),
                                            stdout=log, stderr=log, cwd=self.root)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.connect().close()
                return
            except psycopg2.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log_text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
                    self.close()
                    raise RuntimeError(f"postgres did not start:\n{log_text[-3000:]}") from None
                time.sleep(0.1)

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user=postgres dbname=postgres"

    def connect(self, database: str = "postgres", user: str = "postgres", autocommit: bool = True,
                password: str | None = None) -> psycopg2.extensions.connection:
        conn = psycopg2.connect(host=self.host, port=self.port, user=user, dbname=database, password=password,
                                connect_timeout=5, application_name="databus-tests")
        conn.autocommit = autocommit
        return conn

    def create_database(self, name: str) -> None:
        self.execute(f'CREATE DATABASE "{name}"')

    def set(self, settings: Mapping[str, str], restart: bool = True) -> None:
        """Change server settings (appended to postgresql.conf: the last line wins). ``restart``: restart
        the server, which settings such as wal_level need; else reload, which is enough for sighup ones."""
        with open(self.datadir / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {_quote(str(value))}\n" for key, value in settings.items())
        if self.process is None:
            return
        if restart:
            self.restart()
        else:
            self.execute("SELECT pg_reload_conf()")

    def reload(self, settings: Mapping[str, str]) -> None:
        self.set(settings, restart=False)

    def setting(self, name: str) -> str:
        return str(self.query("SELECT current_setting(%s)", (name,))[0][0])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (SIGINT: disconnect, checkpoint), ``immediate`` (SIGQUIT: crash-like,
        recovery on the next start), ``kill`` (SIGKILL the postmaster)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            if mode == "kill":
                self.process.kill()
            else:
                self.process.send_signal({"fast": signal.SIGINT, "smart": signal.SIGTERM,
                                          "immediate": signal.SIGQUIT}[mode])
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if mode == "kill":
            # The postmaster's children outlive a SIGKILL; wait for them to see it and exit.
            pid_file = self.datadir / "postmaster.pid"
            deadline = time.monotonic() + 10
            while pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)

    def crash(self) -> None:
        """Stop as a crash would: no shutdown checkpoint, recovery on the next start."""
        self.stop("immediate")

    def restart(self) -> None:
        """Start the server again (stopping it first if it runs) on the same data directory and port."""
        self.stop("fast")
        self._start()

    def lose_slot(self, slot: str, database: str = "postgres") -> None:
        """Invalidate replication slot ``slot`` as a server that ran out of room would
        (``pg_replication_slots.wal_status = 'lost'``): cap the WAL slots keep, write past it, checkpoint.
        The slot must not be in use."""
        self.reload({"max_slot_wal_keep_size": "1MB"})
        try:
            for _ in range(50):
                self.execute("CREATE TABLE IF NOT EXISTS databus_wal_filler (x int)",
                             "INSERT INTO databus_wal_filler SELECT generate_series(1, 10)",
                             "SELECT pg_switch_wal()", "CHECKPOINT", database=database)
                status = self.query("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                if not status:
                    raise ValueError(f"no replication slot {slot!r}")
                if status[0][0] == "lost":
                    return
            raise TimeoutError(f"slot {slot!r} was not invalidated (wal_status {status[0][0]!r})")
        finally:
            self.execute("DROP TABLE IF EXISTS databus_wal_filler", database=database)
            self.reload({"max_slot_wal_keep_size": "-1"})

    def close(self) -> None:
        # Immediate: the data directory goes, so a shutdown checkpoint would be wasted work.
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
