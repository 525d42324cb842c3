"""``MysqlSource``, the capture adapter of a MySQL/MariaDB source: the layers of this package
(servers, schema, positions, verify, binlog, bootstrap, fingerprint), plus failover on resume."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from dagster_databus.core.scn import Scn
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources.base import SwitchPlan
from dagster_databus.sources.mysql.failover import check_server, plan_switch
from dagster_databus.sources.mysql.fingerprint import MysqlFingerprint

if TYPE_CHECKING:
    from dagster_databus.log.manifest import Checkpoint


class MysqlSource(MysqlFingerprint):
    kind = "mysql"
    sees_ddl = True  # DDL arrives in the binlog: a changed table is re-bootstrapped, not refused
    install_repairs = False  # verify's problems are server settings and privileges, each with its own fix

    def check_server(self, state: Mapping[str, str], progress: Callable[[str], None]) -> SourceUnavailableError | None:
        """Read from the server a checkpoint's ``state`` names; why it is down, if failing over is called for."""
        return check_server(self, state, progress)

    def plan_switch(self, checkpoint: Checkpoint, down: SourceUnavailableError,
                    progress: Callable[[str], None]) -> SwitchPlan | None:
        """The failover to the other server, decided under the log's writer lock (``failover.plan_switch``)."""
        planned = plan_switch(self, checkpoint, down, progress)
        if planned is None:
            return None
        switch, state = planned
        return SwitchPlan(Scn.parse(switch.resume_scn), switch.to_epoch, state, switch.record())

    def release(self, through: Scn) -> None:
        """Binlogs are the server's to expire; capture keeps nothing on the source."""
