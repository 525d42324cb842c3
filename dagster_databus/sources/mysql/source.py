"""``MysqlSource``, the capture adapter of a MySQL/MariaDB source (``base.Source`` and ``base.Failover``): a
record of its four parts, each in the module named after it, built over collaborators of this package:

- ``catalog`` (``catalog.MysqlCatalog``): the tables' schemas, as the server and then the binlog describe them;
- ``setup`` (``setup.MysqlChecks``): the server settings and privileges capture needs, and install;
- ``stream`` (``stream.BinlogReader``): the binlog, polled into change batches;
- ``reads`` (``reads.MysqlReads``): consistent reads, key ranges for tasks, fingerprints;

and beneath them ``servers`` (which server capture reads, connections to it, one binlog reader per replica
server id), ``positions`` (the epoch, the binlog end, the check of a checkpoint's position) and ``failover``
(the switch between primary and standby, which the source itself answers as ``base.Failover``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from dagster_databus.config import MysqlSourceConfig
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources.base import SwitchPlan
from dagster_databus.sources.mysql.catalog import MysqlCatalog
from dagster_databus.sources.mysql.failover import MysqlFailover
from dagster_databus.sources.mysql.positions import MysqlPositions
from dagster_databus.sources.mysql.reads import MysqlReads
from dagster_databus.sources.mysql.servers import MysqlServers
from dagster_databus.sources.mysql.setup import MysqlChecks
from dagster_databus.sources.mysql.stream import BinlogReader

if TYPE_CHECKING:
    from dagster_databus.log.manifest import Checkpoint


class MysqlSource:
    kind = "mysql"
    sees_ddl = True  # DDL arrives in the binlog: a changed table is re-bootstrapped, not refused
    install_repairs = False  # verify's problems are server settings and privileges, each with its own fix
    reads: MysqlReads  # with the signal table of watermark reads (``uninstall``)

    def __init__(self, config: MysqlSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.servers = servers = MysqlServers(config)
        self.positions = positions = MysqlPositions(servers)
        self.catalog = catalog = MysqlCatalog(servers)
        self.reads = reads = MysqlReads(servers, catalog)
        self.setup = MysqlChecks(servers, catalog, positions, reads)
        self.stream = BinlogReader(servers, catalog, positions)
        self.failover = MysqlFailover(servers, positions)

    # -- failover (base.Failover) ------------------------------------------------------

    def attach(self, state: Mapping[str, str]) -> None:
        self.servers.attach(state)

    def check_server(self, state: Mapping[str, str], progress: Progress) -> SourceUnavailableError | None:
        return self.failover.check_server(state, progress)

    def plan_switch(self, checkpoint: Checkpoint, down: SourceUnavailableError,
                    progress: Progress) -> SwitchPlan | None:
        planned = self.failover.plan_switch(checkpoint, down, progress)
        if planned is None:
            return None
        switch, state = planned
        return SwitchPlan(Scn.parse(switch.resume_scn), switch.to_epoch, state, switch.record())

    def has_standby(self) -> bool:
        return self.config.standby is not None

    def uninstall(self) -> tuple[str, ...]:
        """This source's row of the signal table, and the table when no other source of the database uses it
        (``Uninstallable``): a binlog reader leaves nothing else on the server."""
        return self.reads.uninstall_signal_table()
