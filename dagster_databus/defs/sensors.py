"""The alert sensor of a source whose database signals new commits (``sources.base.Alerting``, a database
alert): each evaluation waits (bounded) for the signal and asks for a poll run when it comes."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from dagster_databus.config import SourceConfig
from dagster_databus.errors import DatabusError
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Alerting

Waiter = Callable[[int], str | None]


def alerting(source: SourceConfig) -> Alerting | None:
    """The source's adapter where its kind signals new commits, else None (nothing is connected to)."""
    adapter = open_source(source)
    return adapter if isinstance(adapter, Alerting) else None


def build_alert_sensor(source: SourceConfig, job: dg.UnresolvedAssetJobDefinition,
                       wait: Waiter | None = None) -> dg.SensorDefinition | None:
    """The sensor, for a source whose kind is ``Alerting`` (None for others); ``wait`` replaces its wait."""
    adapter = alerting(source)
    if adapter is None:
        return None
    waiter = wait or adapter.wait_for_changes
    wait_s = adapter.alert_wait_s()

    @dg.sensor(name=f"{source.name}_alerts", job=job, minimum_interval_seconds=1,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Requests a {source.name} sync when the database signals new transactions "
                           f"(waits up to {wait_s}s per evaluation).")
    def alerts(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        try:
            signalled = waiter(wait_s)
        except DatabusError as exc:
            return dg.SkipReason(f"cannot wait for alerts: {exc}")
        if signalled is None:
            return dg.SkipReason(f"no changes signalled within {wait_s}s")
        return dg.SensorResult(run_requests=[dg.RunRequest(tags={"databus/trigger": "alert"})])

    return alerts
