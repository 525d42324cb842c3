"""The epoch check a source runs before it reads changes after a checkpoint: positions compare only within one
epoch (a database, server or set of capture objects), so a checkpoint of another epoch cannot be resumed."""

from __future__ import annotations

from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import EpochMismatchError


def require_same_epoch(checkpoint: str | None, current: str, since: Scn, problem: str, fix: str, source: str) -> None:
    """Refuse to read on from ``since`` when the change log's ``checkpoint`` epoch is not the source's ``current``
    one (no checkpoint epoch: nothing to compare), with the kind's own ``problem`` and ``fix``."""
    if checkpoint is not None and not Position(checkpoint, since).same_epoch(Position(current, since)):
        raise EpochMismatchError(problem, fix, source=source)
