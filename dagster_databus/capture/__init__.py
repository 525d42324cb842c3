"""Capture, in plain Python without Dagster: a source's changes since the checkpoint, appended to its change log.
The Dagster assets, the CLI and the tests all call these:

- ``install``: create or update a source's capture objects, and where a brand-new log starts;
- ``validate``: every check install and capture make, for every source, all reported at once, with the damage
  found in the lake (``lake_damage``);
- ``run``: one capture run, the poll loop (``loop``), failing over to a standby or restarting the log as the
  source's config says;
- ``restart``: the log and snapshots started afresh at the source's current position (``databus bootstrap``);
- ``figures``: a run's figures; ``enforce_retention``: the log's retention limits applied;
- ``row_selection``: the rows an on-demand snapshot reads again, from what a user typed (``check_row_choice``: the
  same checks without a database, at a run's launch).
"""

from dagster_databus.capture.figures import figures, lag_seconds
from dagster_databus.capture.install import install
from dagster_databus.capture.loop import CaptureResult, run
from dagster_databus.capture.restart import restart
from dagster_databus.capture.retention import enforce_retention
from dagster_databus.capture.selection import check_row_choice, row_selection
from dagster_databus.capture.validate import Validation, lake_damage, validate

__all__ = ["CaptureResult", "Validation", "check_row_choice", "enforce_retention", "figures", "install", "lag_seconds",
           "lake_damage", "restart", "row_selection", "run", "validate"]
