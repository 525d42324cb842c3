"""Binlog positions of a MySQL source: its epoch (server identity and binlog base name), the binlog end,
file creation times, the check that a checkpoint's position is still readable here, and the lock that
keeps one binlog reader per replica server id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from typing import Any

import pymysql

from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import ConcurrentRunError, EpochMismatchError, LogGapError
from dagster_databus.sources.mysql.schema import MysqlSchemas
from dagster_databus.sources.mysql.servers import file_number
from dagster_databus.sources.mysql.versions import ServerVersion, binlog_end
from dagster_databus.sources.mysql.wire.stream import FORMAT_DESCRIPTION, DumpStream


class MysqlPositions(MysqlSchemas):
    """Epoch, binlog end and the checkpoint check, on the server capture reads."""

    def epoch(self) -> str:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_uuid', 'server_id', "
                        "'log_bin_basename', 'gtid_domain_id')")
            v = {k.lower(): str(val) for k, val in cur.fetchall()}
        identity = v.get("server_uuid") or f"server-{v.get('server_id')}-domain-{v.get('gtid_domain_id', '0')}"
        return f"{identity}:{v.get('log_bin_basename', '').rsplit('/', 1)[-1]}"

    def _master_status(self, cur: Any) -> tuple[str, int]:
        return binlog_end(cur, self.name)

    def server_version(self, cur: Any) -> ServerVersion:
        return ServerVersion.of(cur)

    def high_water_mark(self) -> Scn:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            file, pos = self._master_status(cur)
        return self.scn(file, pos)

    def binlog_created(self, file: str) -> str:
        """The creation time of a binlog file (its format description event), as text."""
        conn = self.connect(database=False)
        try:
            for event in DumpStream(conn, self.config.replica_server_id(), file, 4):
                if event.type == FORMAT_DESCRIPTION:
                    return str(event.timestamp)
        except pymysql.err.OperationalError as exc:
            self._refuse_second_reader(exc)
            raise
        finally:
            conn.close()  # before the rest of the file: the dump ends with the connection
        return ""

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A server-side named lock per replica server id, held on its own connection for the run (a crash
        frees it with the connection). Without it two runs can each open the binlog while the other is
        between reads, and the server turns both away (``_refuse_second_reader``)."""
        name = f"databus.binlog.{self.config.replica_server_id()}"
        conn = self.connect(database=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, 0), IS_USED_LOCK(%s)", (name, name))
                got, holder = cur.fetchone()
            if got != 1:
                raise ConcurrentRunError(
                    f"the binlog of source {self.name!r} is locked by another run (lock {name!r} held by "
                    f"connection {holder} on {self.describe()})",
                    "runs of one source must not overlap (one schedule or sensor per source); nothing was "
                    "committed by this run, and the next run continues from the log as the other left it",
                    source=self.name)
            try:
                yield
            finally:
                # Released here rather than with the connection: the server frees a closed connection's
                # locks a moment after the close, when the next run of this process may be asking already.
                with suppress(pymysql.err.MySQLError), conn.cursor() as cur:
                    cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        finally:
            conn.close()

    def _refuse_second_reader(self, exc: pymysql.err.OperationalError) -> None:
        """The server allows one binlog reader per replica server id: another capture of this source is
        reading (MariaDB refuses the newcomer, 4052; MySQL drops the older reader, 1236)."""
        text = str(exc.args[-1]) if exc.args else ""
        if exc.args and (exc.args[0] == 4052 or "same server_uuid/server_id" in text):
            raise ConcurrentRunError(
                f"another capture of source {self.name!r} is reading the binlog with replica server id "
                f"{self.config.replica_server_id()} ({text})",
                "runs of one source must not overlap (one schedule or sensor per source); nothing was committed "
                "by this run, and the next run continues from the log as the other left it",
                source=self.name) from None

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            file, pos = self._master_status(cur)
        return self.scn(file, pos), self.base_state(file, self.binlog_created(file))

    def gtid_pos(self, cur: Any) -> str:
        """MariaDB's GTID position of the binlog end (``@@gtid_binlog_pos``), '' elsewhere."""
        try:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        except pymysql.err.MySQLError:
            return ""
        row = cur.fetchone()
        return str(row[0] or "") if row else ""

    def _check_position(self, cur: Any, since: Scn, epoch: str | None, state: Mapping[str, str]) -> str:
        current_epoch = self.epoch()
        if epoch is not None and not Position(epoch, since).same_epoch(Position(current_epoch, since)):
            raise EpochMismatchError(
                f"MySQL source {self.name!r} is now {current_epoch}, but the change log's checkpoint belongs to "
                f"{epoch}: the server was replaced or its binlogs renamed, so positions cannot be compared",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        cur.execute("SHOW BINARY LOGS")
        sizes = {r[0]: int(r[1]) for r in cur.fetchall()}
        files = list(sizes)
        era, number, offset = since.binlog_parts()
        if era != self.era:
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is SCN {since} of failover era {era}, but capture is in "
                f"era {self.era} ({self.describe()}): the checkpoint's state and its SCN disagree",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        base = files[-1].rsplit(".", 1)[0]
        name = state.get("binlog_file") or f"{base}.{number:06d}"
        numbers = [file_number(f) for f in files]
        if number > max(numbers):
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is in binlog {name}, beyond the server's newest "
                f"{files[-1]}: the binlogs were reset (RESET MASTER) or the server restored",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        if name not in files:
            raise LogGapError(
                f"binlog {name} holding the checkpoint of source {self.name!r} (offset {offset}) was purged from "
                f"the server (oldest left: {files[0]}): the changes after the checkpoint are gone",
                f"run `databus bootstrap --source {self.name}`, or set sources.{self.name}.on_purged: bootstrap; "
                "keep binlogs longer (binlog_expire_logs_seconds / expire_logs_days) than the poll interval",
                source=self.name)
        if offset > sizes[name]:
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is at offset {offset} of {name}, but that file is only "
                f"{sizes[name]} bytes: the binlogs were reset (RESET MASTER) and the name reused",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        created = state.get("binlog_created")
        if created and created != self.binlog_created(name):
            raise EpochMismatchError(
                f"binlog {name} on source {self.name!r} is not the file the checkpoint was taken in (created "
                f"{self.binlog_created(name)}, expected {created}): the binlogs were reset (RESET MASTER)",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        return name
