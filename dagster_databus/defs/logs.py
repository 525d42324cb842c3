"""What a databus run prints to the console: the steps' own lines at INFO, Dagster's engine events only when asked.

Dagster's console logger prints every engine event at DEBUG (a sync run: ~70 lines, most of them outputs and
check evaluations the UI shows anyway). Every job databus defines (the sync a schedule runs, the ad-hoc
bootstrap, rebuild, refresh, reconcile and upkeep runs) carries a default run config that sets the console to
INFO, or to ``DATABUS_LOG_LEVEL`` when that is set; a run's own config can set another level. Runs of an
asset selection (``dagster asset materialize``, the UI's "Materialize all") take no job's config: Dagster
prints them at its instance's level, ``python_logs.python_log_level`` in ``$DAGSTER_HOME/dagster.yaml``
(docs/operations.md). The run's events reach Dagster's event log at every level whatever the console shows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from dagster_databus.errors import ConfigError

LOG_LEVEL_ENV = "DATABUS_LOG_LEVEL"
DEFAULT_LEVEL = "INFO"


def default_level() -> str:
    """The console's level when a run's config sets none: ``DATABUS_LOG_LEVEL``, else INFO. A name Python's
    logging does not know is refused here, at definitions load, not in the middle of a run."""
    level = os.environ.get(LOG_LEVEL_ENV, DEFAULT_LEVEL).strip().upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ConfigError(LOG_LEVEL_ENV, f"{os.environ[LOG_LEVEL_ENV]!r} is not a log level",
                          f"set {LOG_LEVEL_ENV} to DEBUG, INFO, WARNING, ERROR or CRITICAL, or unset it for INFO")
    return level


def job_config(config: Mapping[str, Any] | None = None, level: str | None = None) -> dict[str, Any]:
    """A job's run config: ``config`` with Dagster's console logger at ``level`` (default: ``default_level``)."""
    return {**(config or {}), "loggers": {"console": {"config": {"log_level": level or default_level()}}}}
