"""A test seam inside Spark tasks: lose the worker a task runs on, at a named point.

The driver sets the local property ``databus.fault`` to ``<point>:<marker file>`` on the thread that
starts a job; the first task to reach ``point`` creates the marker (so exactly one task does this)
and SIGKILLs its own process group, which on a standalone worker started in its own session is the
worker, its executor and their Python workers: a machine lost mid-job.
"""

from __future__ import annotations

import os
import signal

FAULT_PROPERTY = "databus.fault"


def task_fault(point: str) -> None:
    from pyspark import TaskContext

    context = TaskContext.get()
    wanted = context.getLocalProperty(FAULT_PROPERTY) if context is not None else None
    if not wanted:
        return
    name, _, marker = wanted.partition(":")
    if name != point:
        return
    group = os.getpgrp()
    try:
        with open(f"/proc/{group}/cmdline", "rb") as f:
            leader = f.read()
    except OSError:
        return
    if b"deploy.worker.Worker" not in leader:
        return  # not under a standalone worker (local mode: the group is the driver's own)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.killpg(group, signal.SIGKILL)
