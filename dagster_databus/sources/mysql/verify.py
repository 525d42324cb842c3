"""What binlog capture needs of a MySQL server (settings, privileges, the standby's too) and the
"install" of a binlog source: nothing for capture, the signal table for watermark reads.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

import pymysql

from dagster_databus.errors import CaptureNotInstalledError, ConfigError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import InstallReport, not_installed, require_installed
from dagster_databus.sources.catalog import null_key_problem, null_key_query
from dagster_databus.sources.mysql.positions import MysqlPositions
from dagster_databus.sources.mysql.servers import other_role

SIGNAL_TABLE = "_databus_signal"


class MysqlVerify(MysqlPositions):
    """Server settings and privileges capture needs (``verify``), and ``install``."""

    def installed(self) -> bool:
        return True  # nothing is installed in the server: its settings and privileges are what verify checks

    def verify(self) -> list[str]:
        """Every server setting or privilege capture needs that is missing, each with its fix.

        With a standby, the other server is checked too when it answers (it must log what it
        replicates, ``log_slave_updates``), so a failover is not the first time it is looked at.
        """
        self.preflight()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            problems = self._server_problems(cur, standby=False)
        if self.config.standby is not None:
            spare = other_role(self.role)
            try:
                with closing(self.connect(database=False, role=spare)) as conn, conn.cursor() as cur:
                    other = self._server_problems(cur, standby=True)
                    cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                                (self.config.database,))
                    if cur.fetchone() is None:
                        other.append(f"database {self.config.database!r} does not exist here: make this server a "
                                     "replica of the other one (CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos)")
                    problems += [f"{self.describe(spare)}: {p}" for p in other]
            except SourceUnavailableError:
                pass  # a standby that is down now is not a reason to stop capturing from the server that is up
        return problems

    def _server_problems(self, cur: Any, standby: bool) -> list[str]:
        problems = []
        settings = self._settings(cur)
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
        user, _, host = str(self._query_one(cur, "SELECT CURRENT_USER()")[0]).rpartition("@")
        account = f"'{user}'@'{host}'"
        for privilege in ("REPLICATION SLAVE", "REPLICATION CLIENT|BINLOG MONITOR", "SELECT"):
            options = privilege.split("|")
            if "ALL PRIVILEGES ON *.*" not in grants and not any(o in grants for o in options):
                problems.append(f"user {self.config.user!r} lacks {options[0]}: GRANT {options[0]} ON "
                                f"{'*.*' if privilege != 'SELECT' else '`' + self.config.database + '`.*'} TO "
                                f"{account}")
        return problems

    @staticmethod
    def _settings(cur: Any) -> dict[str, str]:
        """The server variables capture depends on (lower-case names), as the server has them."""
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image', "
                    "'binlog_row_metadata', 'server_id', 'log_slave_updates', 'log_replica_updates', "
                    "'binlog_row_value_options', 'mysql56_temporal_format', 'log_bin_compress', "
                    "'binlog_transaction_compression', 'binlog_checksum')")
        return {k.lower(): str(v) for k, v in cur.fetchall()}

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with closing(self.connect()) as conn, conn.cursor() as cur:
            for schema in self.schemas().values():
                cur.execute(null_key_query(f"`{schema.table}`", [f"`{k}`" for k in schema.primary_key]) + " LIMIT 1")
                problem = null_key_problem(schema, cur.fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def notes(self) -> list[str]:
        """What ``validate`` tells about the server besides its problems: its version, and the binlog settings
        capture supports that users are sometimes told to turn off."""
        with closing(self.connect()) as conn, conn.cursor() as cur:
            version = self.server_version(cur)
            settings = self._settings(cur)
        notes = [f"{version}, binlog checksum {settings.get('binlog_checksum', 'NONE')}"]
        for name in ("log_bin_compress", "binlog_transaction_compression"):
            if settings.get(name, "").upper() == "ON":
                notes.append(f"{name} is ON: compressed events are decoded (supported)")
        return notes

    def require_installed(self) -> None:
        require_installed(self, lambda problems: not_installed(
            f"MySQL source {self.name!r} ({self.describe()}) is not ready for binlog capture:", problems,
            "apply each fix above, then materialize the '" + self.name + "/capture' asset again", bulleted=True,
            source=self.name))

    def install(self) -> InstallReport:
        """Nothing to create for capture; for watermark reads, the signal table (``sql/mysql/signal.sql``)."""
        self.require_installed()
        changed: tuple[str, ...] = ()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            if self._reads_here(cur)[0] == "watermark" and self._signal_problem(cur):
                try:
                    cur.execute(sqlfiles.load("mysql", "signal.sql"))
                except pymysql.err.MySQLError as exc:
                    grant = (f"GRANT CREATE, INSERT, DELETE ON `{self.config.database}`.`{SIGNAL_TABLE}` TO "
                             f"'{self.config.user}'")
                    raise CaptureNotInstalledError(
                        f"cannot create the signal table {self.config.database}.{SIGNAL_TABLE} for watermark "
                        f"reads: {exc.args[-1] if exc.args else exc}",
                        f"as an administrator: {grant}; or set bootstrap_reads: lock", source=self.name) from None
                changed = (SIGNAL_TABLE,)
        return InstallReport(epoch=self.epoch(), version="binlog", changed=changed,
                             unchanged=tuple(t.name for t in self.config.tables))


    def _reads_here(self, cur: Any) -> tuple[str, bool]:
        """(``bootstrap_reads`` with ``auto`` resolved for this server, whether it reports snapshot positions)."""
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
        reports = cur.fetchone() is not None
        reads = self.config.bootstrap_reads
        return (("snapshot" if reports else "watermark") if reads == "auto" else reads), reports

    def _bootstrap_reads(self, cur: Any) -> str:
        """``bootstrap_reads`` resolved for this server and checked: a watermark read's signal table first."""
        reads, reports = self._reads_here(cur)
        if reads == "snapshot" and not reports:
            raise ConfigError(self._field("bootstrap_reads"), f"{self.describe()} reports no binlog position for a "
                              "consistent snapshot (binlog_snapshot_file is MariaDB's)",
                              "set bootstrap_reads: watermark (or auto), or lock")
        if reads == "watermark":
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_order_commits'")
            order = cur.fetchone()  # MySQL's; MariaDB always commits in binlog order
            if order is not None and str(order[1]).upper() == "OFF":
                raise ConfigError(self._field("bootstrap_reads"), f"{self.describe()} has binlog_order_commits OFF, "
                                  "so a committed watermark does not show that earlier transactions are visible",
                                  "SET GLOBAL binlog_order_commits = ON (and in my.cnf), or set bootstrap_reads: lock")
            problem = self._signal_problem(cur)
            if problem:
                raise CaptureNotInstalledError(problem, f"run `databus install --source {self.name}`, or set "
                                               "bootstrap_reads: lock", source=self.name)
        return reads

    def _signal_problem(self, cur: Any) -> str | None:
        """Why watermark reads cannot write their signal row here, or None."""
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (self.config.database, SIGNAL_TABLE))
        if cur.fetchone() is None:
            return (f"the signal table {self.config.database}.{SIGNAL_TABLE} that watermark reads write to does not "
                    "exist")
        return None
