"""Progress of long steps, reported at a steady interval: done / total estimate, rate, time left.

Steps report through a plain callable (``Dagster``'s ``context.log.info``, ``print`` in the CLI and
jobs), so the core stays free of Dagster. A ``Ticker`` is fed counts as work is done and speaks
at most every ``every_s`` seconds, then once more when the step ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

Progress = Callable[[str], None]
T = TypeVar("T")
EVERY_S = 10.0


def quiet(_: str) -> None:
    """A ``Progress`` that reports nothing."""


class Ticker:
    def __init__(self, progress: Progress, what: str, unit: str, total: int | None = None,
                 every_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.progress, self.what, self.unit, self.total = progress, what, unit, total
        self.every_s, self.clock = EVERY_S if every_s is None else every_s, clock
        self.done = 0
        self.started = self.last = clock()

    def add(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self.progress(self._line(now))

    def finish(self) -> None:
        self.progress(self._line(self.clock(), final=True))

    def counted(self, items: Iterable[T], size: Callable[[T], int]) -> Iterator[T]:
        """``items`` passed through, each counted by ``size`` as it goes by."""
        for item in items:
            self.add(size(item))
            yield item

    def _line(self, now: float, final: bool = False) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        head = f"{self.what}: {self.done:,}"
        if self.total:
            head += f" of ~{self.total:,} {self.unit} ({min(100.0, 100 * self.done / self.total):.0f}%)"
        else:
            head += f" {self.unit}"
        tail = f", {rate:,.0f} {self.unit}/s"
        if final:
            return f"{head} in {elapsed:.1f}s{tail}"
        if self.total and rate > 0 and self.done < self.total:
            tail += f", ~{(self.total - self.done) / rate:.0f}s left"
        return head + tail
