"""The Oracle alert sensor: waits (bounded) on ``sync_alert.waitForEvent`` and asks for a poll run
when the J_CALL_SIGNAL job signals new transactions."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from dagster_databus.config import OracleSourceConfig
from dagster_databus.errors import DatabusError

Waiter = Callable[[int], str | None]


def oracle_waiter(source: OracleSourceConfig) -> Waiter:
    def wait(max_wait_s: int) -> str | None:
        from dagster_databus.sources.oracle.source import OracleSource

        return OracleSource(source).wait_for_changes(max_wait_s)

    return wait


def build_alert_sensor(source: OracleSourceConfig, job: dg.UnresolvedAssetJobDefinition,
                       wait: Waiter | None = None) -> dg.SensorDefinition:
    waiter = wait or oracle_waiter(source)

    @dg.sensor(name=f"{source.name}_alerts", job=job, minimum_interval_seconds=1,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Requests a `{source.name}` sync when sync_alert signals new transactions "
                           f"(waits up to {source.alert_wait_s}s per evaluation).")
    def alerts(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        try:
            signalled = waiter(source.alert_wait_s)
        except DatabusError as exc:
            return dg.SkipReason(f"cannot wait for alerts: {exc}")
        if signalled is None:
            return dg.SkipReason(f"no changes signalled within {source.alert_wait_s}s")
        return dg.SensorResult(run_requests=[dg.RunRequest(tags={"databus/trigger": "alert"})])

    return alerts
