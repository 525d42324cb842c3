"""A run's server: a source with a standby reads from the server its checkpoint names, failing over if it is down
(``sources.base.Failover``); what install and every capture run do before they read."""

from __future__ import annotations

from dagster_databus.core.progress import Progress
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.base import Failover, Source


def resume(src: Source, log: ChangeLog, progress: Progress) -> None:
    """Sources with a standby read from the server their checkpoint names, failing over if it is down. The
    source decides the switch under the log's writer lock, and it is committed to the log (lineage and
    checkpoint) before any change is read from the new server: sources read the log, they do not write it."""
    checkpoint = log.checkpoint()
    if not isinstance(src, Failover) or checkpoint is None:
        return
    down = src.check_server(checkpoint.state, progress)
    if down is None:
        return
    with log.writer() as writer:
        checkpoint = log.checkpoint()  # again, under the lock: another run may have switched already
        assert checkpoint is not None
        plan = src.plan_switch(checkpoint, down, progress)
        if plan is not None:
            writer.switch_epoch(plan.resume, plan.epoch, plan.state, plan.record)
