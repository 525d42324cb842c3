"""A test seam inside Spark tasks: lose the worker a task runs on, at a named point.

The driver sets the local property ``databus.fault`` to ``<point>:<marker file>`` on the thread that
starts a job; the first task to reach ``point`` creates the marker (so exactly one task does this)
and SIGKILLs the standalone worker it runs under, with its executor and their Python workers: a
machine lost mid-job.
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
    # This Python worker's group is PySpark's daemon's; its parent is the executor, whose group (a
    # standalone worker started in a session of its own) holds the worker and the executor.
    daemon_group = os.getpgrp()
    executor = _stat(daemon_group)[1]
    worker_group = _stat(executor)[2] if executor else 0
    try:
        with open(f"/proc/{worker_group}/cmdline", "rb") as f:
            leader = f.read()
    except OSError:
        return
    if b"deploy.worker.Worker" not in leader:
        return  # not under a standalone worker (local mode: that group would be the driver's own)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.killpg(worker_group, signal.SIGKILL)
    os.killpg(daemon_group, signal.SIGKILL)


def _stat(pid: int) -> tuple[int, int, int]:
    """(pid, parent pid, process group) from /proc; zeros when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0, 0
    return pid, int(fields[1]), int(fields[2])
