"""Oracle capture: Databus's trigger + ``sy$txlog`` design, with python-oracledb (thin mode).

``OracleSource`` (``base.Source``) is a record of its four parts, each in the module named after it:
``catalog`` (``catalog.OracleCatalog``: connections, and the tables as the data dictionary has them), ``setup``
(``setup.OracleInstall``: ``sql/oracle/`` applied idempotently, checked and removed), ``stream``
(``stream.OraclePoller``: the database SCN at a poll's start is its bound, chunk ends are found over
``sy$txlog``, and each table's ``sy$<table>`` view and delete-shadow table are read with Databus for Oracle's
query shape) and ``reads`` (``reads.OracleReads``: flashback reads ``AS OF SCN``).
"""

from __future__ import annotations

from dagster_databus.config import OracleSourceConfig
from dagster_databus.sources.oracle.catalog import OracleCatalog
from dagster_databus.sources.oracle.reads import OracleReads
from dagster_databus.sources.oracle.setup import OracleInstall
from dagster_databus.sources.oracle.stream import OraclePoller


class OracleSource:
    kind = "oracle"
    sees_ddl = False
    install_repairs = True  # verify's problems are the capture objects, which install creates or updates

    def __init__(self, config: OracleSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.catalog = catalog = OracleCatalog(config)
        self.setup = OracleInstall(catalog)
        self.stream = OraclePoller(catalog)
        self.reads = OracleReads(catalog)

    def uninstall(self) -> tuple[str, ...]:
        """Remove everything install created for this source's tables, then the core objects (``Uninstallable``)."""
        return self.setup.uninstall()

    def alert_wait_s(self) -> int:
        return self.config.alert_wait_s

    def wait_for_changes(self, max_wait_s: int) -> str | None:
        """Block up to ``max_wait_s`` in sync_alert.waitForEvent; the source name if changes were signalled."""
        return self.stream.wait_for_changes(max_wait_s)
