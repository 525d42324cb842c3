"""Cron expressions as Dagster's schedules accept them, checked when the config loads.

An expression Dagster refuses breaks the whole code location at load time, far from the config
line that caused it; checking here names the field instead. Five fields (minute, hour, day of
month, month, day of week) or an ``@`` macro; lists, ranges, steps, month and day names, and
the ``?``, ``L`` and ``#`` forms Dagster takes. ``tests/unit/test_config.py`` holds this to Dagster's own
check on a table of expressions.
"""

from __future__ import annotations

import re

MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                           "dec"))}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (name, lowest, highest, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS))
# Beyond plain cron, Dagster takes ``?`` in either day field, ``L`` (last) in the day of month and
# ``<weekday>#<n>`` (n-th weekday of the month) in the day of week.
_DOM_EXTRA = re.compile(r"^(\?|L)$")
_DOW_EXTRA = re.compile(r"^(\?|([0-7]|sun|mon|tue|wed|thu|fri|sat)#[1-5])$", re.IGNORECASE)


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a cron schedule Dagster accepts, or None when it is one."""
    text = expression.strip()
    if text.lower() in MACROS:
        return None
    parts = text.split()
    if len(parts) != len(_FIELDS):
        return f"{expression!r} has {len(parts)} fields; a cron schedule has 5 (minute hour day month weekday)"
    for part, (name, low, high, names) in zip(parts, _FIELDS, strict=True):
        for item in part.split(","):
            extra = {"day of month": _DOM_EXTRA, "day of week": _DOW_EXTRA}.get(name)
            problem = None if extra is not None and extra.match(item) else _item_problem(item, low, high, names)
            if problem:
                return f"{expression!r}: the {name} field {part!r} {problem}"
    return None


def _item_problem(item: str, low: int, high: int, names: dict[str, int]) -> str | None:
    base, _, step = item.partition("/")
    if step and (not step.isdigit() or int(step) == 0):
        return f"has step {step!r}; a step is a whole number from 1"
    if base == "*":
        return None
    for value in base.split("-", 1):
        number = names.get(value.lower()) if not value.isdigit() else int(value)
        if number is None:
            return f"has {value!r}, not a number{' or a name' if names else ''}"
        if not low <= number <= high:
            return f"has {value}, outside {low}..{high}"
    return None
