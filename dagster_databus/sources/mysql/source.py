"""``MysqlSource``, the capture adapter of a MySQL/MariaDB source: the layers of this package
(servers, schema, positions, verify, binlog, bootstrap, fingerprint), plus failover on resume."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dagster_databus.core.scn import Scn
from dagster_databus.sources.mysql.failover import Switch, resume
from dagster_databus.sources.mysql.fingerprint import MysqlFingerprint

if TYPE_CHECKING:
    from dagster_databus.log.changelog import ChangeLog


class MysqlSource(MysqlFingerprint):
    kind = "mysql"
    sees_ddl = True  # DDL arrives in the binlog: a changed table is re-bootstrapped, not refused

    def resume(self, log: ChangeLog, progress: Callable[[str], None]) -> Switch | None:
        """Read from the checkpoint's server; fail over to the other one if it stays down."""
        return resume(self, log, progress)

    def release(self, through: Scn) -> None:
        """Binlogs are the server's to expire; capture keeps nothing on the source."""
