"""A classic Spark session's thread-local properties (job group, scheduler pool, a test's fault point) handed
to the threads a step starts (tables synced side by side)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def with_spark_properties(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` to run in another thread with this thread's Spark local properties, which a classic session keeps
    per thread; as is when no classic Spark runs here (a Connect block tags its own operations in the thread
    that runs them). Never imports pyspark: a process that has not loaded it runs no classic Spark."""
    pyspark = sys.modules.get("pyspark")
    context = pyspark.SparkContext._active_spark_context if pyspark is not None else None
    # A context another thread is still creating is already the active one, but has no JVM side (``_jsc``)
    # until the JVM's SparkContext is up: this thread has set no properties on it, so there are none to copy.
    jsc = getattr(context, "_jsc", None)
    if jsc is None:
        return fn
    properties = jsc.sc().getLocalProperties().clone()

    def run(arg: T) -> R:
        jsc.sc().setLocalProperties(properties)
        return fn(arg)

    return run
