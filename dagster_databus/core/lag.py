"""How far one position is behind another: in SCN units, and in source commit time.

Capture lag (the source ahead of the change log), snapshot lag (the log ahead of a snapshot) and a
consumer's lag (the log ahead of its cursor) are all this one measure. A position ahead of what it is
compared with (a bootstrap reads the source at a later position than the log has reached) is no
lag, never a negative one.
"""

from __future__ import annotations

from dagster_databus.core.scn import Scn


def scn_lag(ahead: Scn, behind: Scn) -> int:
    """How many SCN units ``behind`` is behind ``ahead`` (0 at or past it)."""
    return max(0, ahead.value - behind.value)


def time_lag(ahead: Scn, behind: Scn, ahead_ms: int | None, behind_ms: int | None) -> float | None:
    """How much older, in seconds, the newest commit ``behind`` holds (at ``behind_ms``) is than ``ahead``'s
    (``ahead_ms``: its newest commit, or now when the source has commits not yet captured). 0.0 when
    ``behind`` has caught up; None when a commit time is unknown (0 is unknown: rows without one carry it)."""
    if behind >= ahead:
        return 0.0
    if not ahead_ms or not behind_ms:
        return None
    return max(0, ahead_ms - behind_ms) / 1000
