"""``install``: a source's capture objects created or updated, and where a brand-new change log starts."""

from __future__ import annotations

from dagster_databus.capture.failover import resume
from dagster_databus.config import DatabusConfig
from dagster_databus.core.progress import Progress
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import InstallReport
from dagster_databus.storage.lake import require_writable_lake


def install(config: DatabusConfig, source: str, progress: Progress = lambda _: None) -> InstallReport:
    """Create or update a source's capture objects (idempotent).

    A source whose log starts at its current position (a binlog) has that position recorded
    the first time, so every change after install is captured.
    """
    require_writable_lake(config.lake)  # before the source is touched: triggers without a log would fill the txlog
    src = open_source(config.source(source))
    log = ChangeLog(config.lake, source)
    resume(src, log, progress)
    report = src.setup.install()
    if log.checkpoint() is None:
        start, state = src.stream.start_position()
        if not start.is_beginning:
            with log.writer() as writer:
                writer.start_at(start, report.epoch, state)
    return report
