"""Binlog positions of a MySQL source: its epoch (server identity and binlog base name), the binlog end,
file creation times, and the check that a checkpoint's position is still readable on the server capture reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing

from dagster_databus.core.scn import Scn
from dagster_databus.errors import EpochMismatchError, LogGapError
from dagster_databus.sources.generic.epoch import require_same_epoch
from dagster_databus.sources.mysql.connect import Cursor, MySQLError, OperationalError
from dagster_databus.sources.mysql.servers import MysqlServers, file_number
from dagster_databus.sources.mysql.versions import binlog_end
from dagster_databus.sources.mysql.wire.stream import FORMAT_DESCRIPTION, DumpStream


class MysqlPositions:
    """Epoch, binlog end and the checkpoint check, on the server capture reads."""

    def __init__(self, servers: MysqlServers) -> None:
        self.servers = servers
        self.name = servers.name

    def epoch(self) -> str:
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_uuid', 'server_id', "
                        "'log_bin_basename', 'gtid_domain_id')")
            v = {k.lower(): str(val) for k, val in cur.fetchall()}
        identity = v.get("server_uuid") or f"server-{v.get('server_id')}-domain-{v.get('gtid_domain_id', '0')}"
        return f"{identity}:{v.get('log_bin_basename', '').rsplit('/', 1)[-1]}"

    def end(self, cur: Cursor) -> tuple[str, int]:
        """The binlog's current file and position."""
        return binlog_end(cur, self.name)

    def high_water_mark(self) -> Scn:
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            file, pos = self.end(cur)
        return self.servers.scn(file, pos)

    def binlog_created(self, file: str) -> str:
        """The creation time of a binlog file (its format description event), as text."""
        conn = self.servers.connect(database=False)
        try:
            for event in DumpStream(conn, self.servers.config.replica_server_id(), file, 4):
                if event.type == FORMAT_DESCRIPTION:
                    return str(event.timestamp)
        except OperationalError as exc:
            self.servers.refuse_second_reader(exc)
            raise
        finally:
            conn.close()  # before the rest of the file: the dump ends with the connection
        return ""

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            file, pos = self.end(cur)
        return self.servers.scn(file, pos), self.servers.base_state(file, self.binlog_created(file))

    def gtid_pos(self, cur: Cursor) -> str:
        """MariaDB's GTID position of the binlog end (``@@gtid_binlog_pos``), '' elsewhere."""
        try:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        except MySQLError:
            return ""
        row = cur.fetchone()
        return str(row[0] or "") if row else ""

    def check(self, cur: Cursor, since: Scn, epoch: str | None, state: Mapping[str, str]) -> str:
        """The binlog file holding checkpoint ``since`` (of ``epoch``, with its ``state``), checked to be the same
        file on this server still: raises ``EpochMismatchError`` when the server or its binlogs were replaced or
        reset, ``LogGapError`` when the file was purged."""
        current_epoch = self.epoch()
        require_same_epoch(
            epoch, current_epoch, since,
            f"MySQL source {self.name!r} is now {current_epoch}, but the change log's checkpoint belongs to "
            f"{epoch}: the server was replaced or its binlogs renamed, so positions cannot be compared",
            f"run `databus bootstrap --source {self.name}`", self.name)
        cur.execute("SHOW BINARY LOGS")
        sizes = {r[0]: int(r[1]) for r in cur.fetchall()}
        files = list(sizes)
        era, number, offset = since.binlog_parts()
        if era != self.servers.era:
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is SCN {since} of failover era {era}, but capture is in "
                f"era {self.servers.era} ({self.servers.describe()}): the checkpoint's state and its SCN disagree",
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
