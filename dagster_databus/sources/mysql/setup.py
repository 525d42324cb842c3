"""What binlog capture needs of a MySQL server: settings and privileges, the standby's too (``verify``), its
install (nothing for capture; the signal table for watermark reads), and what ``validate`` tells of the
server besides (``notes``). The ``setup`` part of ``MysqlSource``.
"""

from __future__ import annotations

from contextlib import closing

from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import InstallReport, not_installed, require_installed
from dagster_databus.sources.mysql.catalog import MysqlCatalog
from dagster_databus.sources.mysql.connect import Cursor
from dagster_databus.sources.mysql.positions import MysqlPositions
from dagster_databus.sources.mysql.reads import MysqlReads
from dagster_databus.sources.mysql.servers import MysqlServers, other_role
from dagster_databus.sources.mysql.versions import ServerVersion


class MysqlChecks:
    """Server settings and privileges capture needs, on the server capture reads and its standby; install."""

    def __init__(self, servers: MysqlServers, catalog: MysqlCatalog, positions: MysqlPositions,
                 reads: MysqlReads) -> None:
        self.servers = servers
        self.catalog = catalog
        self.positions = positions
        self.reads = reads
        self.config = servers.config
        self.name = servers.name

    def installed(self) -> bool:
        return True  # nothing is installed in the server: its settings and privileges are what verify checks

    def install(self) -> InstallReport:
        """Nothing to create for capture; for watermark reads, the signal table (``sql/mysql/signal.sql``)."""
        self.require_installed()
        changed = self.reads.install_signal_table()
        return InstallReport(epoch=self.positions.epoch(), version="binlog", changed=changed,
                             unchanged=tuple(t.name for t in self.config.tables))

    def verify(self) -> list[str]:
        """Every server setting or privilege capture needs that is missing, each with its fix.

        With a standby, the other server is checked too when it answers (it must log what it
        replicates, ``log_slave_updates``), so a failover is not the first time it is looked at.
        """
        self.catalog.preflight()
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            problems = self._server_problems(cur, standby=False)
            problems += self._charset_problems(cur)
        if self.config.standby is not None:
            spare = other_role(self.servers.role)
            try:
                with closing(self.servers.connect(database=False, role=spare)) as conn, conn.cursor() as cur:
                    other = self._server_problems(cur, standby=True)
                    cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                                (self.config.database,))
                    if cur.fetchone() is None:
                        other.append(f"database {self.config.database!r} does not exist here: make this server a "
                                     "replica of the other one (CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos)")
                    problems += [f"{self.servers.describe(spare)}: {p}" for p in other]
            except SourceUnavailableError:
                pass  # a standby that is down now is not a reason to stop capturing from the server that is up
        return problems

    def _charset_problems(self, cur: Cursor) -> list[str]:
        """Captured columns whose character set capture cannot decode from the binlog."""
        charsets = self.servers.charsets(cur)
        problems = []
        for table in self.config.tables:
            cur.execute(sqlfiles.load("mysql", "column_charsets.sql"), (self.config.database, table.name))
            for column, charset in cur.fetchall():
                if charsets.charset_decoder(str(charset)) is None:
                    problems.append(f"column {table.name}.{column} is {charset} text, which capture cannot decode "
                                    f"from the binlog: ALTER TABLE `{table.name}` CONVERT TO CHARACTER SET utf8mb4 "
                                    "(or MODIFY the column to a character set docs/mysql.md lists)")
        return problems

    def _server_problems(self, cur: Cursor, standby: bool) -> list[str]:
        problems = []
        settings = server_settings(cur)
        wanted = [("log_bin", "ON", "enable binary logging: add 'log_bin' (and 'server_id') under [mysqld] "
                   "and restart the server"),
                  ("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW' (and binlog_format=ROW under "
                   "[mysqld] to keep it)"),
                  ("binlog_row_image", "FULL", "SET GLOBAL binlog_row_image = 'FULL' (and binlog_row_image=FULL "
                   "under [mysqld])")]
        if "binlog_row_metadata" in settings:
            wanted.append(("binlog_row_metadata", "FULL", "SET GLOBAL binlog_row_metadata = 'FULL' (and "
                           "binlog_row_metadata=FULL under [mysqld]); capture needs column names in the binlog"))
        if standby:
            name = "log_replica_updates" if "log_replica_updates" in settings else "log_slave_updates"
            wanted.append((name, "ON", f"add {name} under [mysqld] and restart: a standby must write what it "
                           "replicates to its own binlog for capture to read it after a failover"))
        if "PARTIAL_JSON" in settings.get("binlog_row_value_options", "").upper():
            problems.append("binlog_row_value_options is 'PARTIAL_JSON', so updates of JSON columns are logged as "
                            "diffs without the whole new value: SET GLOBAL binlog_row_value_options = '' (and "
                            "binlog_row_value_options='' under [mysqld])")
        if settings.get("mysql56_temporal_format", "ON").upper() == "OFF":
            problems.append("mysql56_temporal_format is 'OFF', so new TIME, DATETIME and TIMESTAMP columns with "
                            "fractional seconds are logged in MariaDB's old format, which the binlog does not "
                            "describe: SET GLOBAL mysql56_temporal_format = ON (and under [mysqld]), then rebuild "
                            "such columns (ALTER TABLE ... FORCE)")
        for name, value, fix in wanted:
            if settings.get(name, "").upper() != value:
                problems.append(f"{name} is {settings.get(name, 'unset')!r}, needs {value!r}: {fix}")
        if settings.get("server_id") == "0":
            problems.append("server_id is 0, so the server cannot serve replicas: set server_id under [mysqld]")
        elif settings.get("server_id") == str(self.config.replica_server_id()):
            problems.append(f"the capture's replica server id {self.config.replica_server_id()} equals the "
                            f"server's own server_id: set sources.{self.name}.server_id to another number")
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0].upper() for r in cur.fetchall())
        # The account as the server matched it ('weak'@'127.0.0.1', not 'weak'@'%'), so the hint pastes as is.
        cur.execute("SELECT CURRENT_USER()")
        current = cur.fetchone()
        assert current is not None  # a SELECT without FROM returns its one row
        user, _, host = str(current[0]).rpartition("@")
        account = f"'{user}'@'{host}'"
        for privilege in ("REPLICATION SLAVE", "REPLICATION CLIENT|BINLOG MONITOR", "SELECT"):
            options = privilege.split("|")
            if "ALL PRIVILEGES ON *.*" not in grants and not any(o in grants for o in options):
                problems.append(f"user {self.config.user!r} lacks {options[0]}: GRANT {options[0]} ON "
                                f"{'*.*' if privilege != 'SELECT' else '`' + self.config.database + '`.*'} TO "
                                f"{account}")
        return problems

    def notes(self) -> list[str]:
        """What ``validate`` tells about the server besides its problems: its version, and the binlog settings
        capture supports that users are sometimes told to turn off."""
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            version = ServerVersion.of(cur)
            settings = server_settings(cur)
        notes = [f"{version}, binlog checksum {settings.get('binlog_checksum', 'NONE')}"]
        for name in ("log_bin_compress", "binlog_transaction_compression"):
            if settings.get(name, "").upper() == "ON":
                notes.append(f"{name} is ON: compressed events are decoded (supported)")
        return notes

    def require_installed(self) -> None:
        require_installed(self, lambda problems: not_installed(
            f"MySQL source {self.name!r} ({self.servers.describe()}) is not ready for binlog capture:", problems,
            "apply each fix above, then materialize the '" + self.name + "/capture' asset again", bulleted=True,
            source=self.name))


def server_settings(cur: Cursor) -> dict[str, str]:
    """The server variables capture depends on (lower-case names), as the server has them."""
    cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image', "
                "'binlog_row_metadata', 'server_id', 'log_slave_updates', 'log_replica_updates', "
                "'binlog_row_value_options', 'mysql56_temporal_format', 'log_bin_compress', "
                "'binlog_transaction_compression', 'binlog_checksum')")
    return {k.lower(): str(v) for k, v in cur.fetchall()}
