"""Spark's errors, read: a typed error a Spark task raised, re-raised as itself (``task_errors``); a module
Spark's Python could not import, named with the fix (``missing_module``); a Spark error's condition."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from dagster_databus.errors import SparkEnvironmentError, from_task


@contextmanager
def task_errors() -> Iterator[None]:
    """Re-raise a typed error a Spark task raised (``errors.for_task``) as itself, not a PythonException; a
    module Spark's Python could not import as ``SparkEnvironmentError``, with the fix."""
    try:
        yield
    except Exception as exc:
        error = from_task(exc) or missing_module(exc)
        if error is None:
            raise
        raise error from None


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def missing_module(exc: BaseException) -> SparkEnvironmentError | None:
    """The module a Spark error says Spark's Python (a worker's, or a Connect server's) could not import."""
    if not type(exc).__module__.startswith("pyspark"):
        return None  # this process's own import failed: its traceback says so
    found = _MISSING_MODULE.search(str(exc))
    if found is None:
        return None
    module = found.group(1)
    if module.split(".")[0] == "dagster_databus":
        fix = ("install this package (the same version) into the Python the Spark workers run (PYSPARK_PYTHON on "
               "the executors, or on the Spark Connect server), or, with spark.remote, set spark.ship_package: true "
               "to send it with every session (docs/deployment.md)")
    else:
        fix = (f"install {module.split('.')[0]} into the Python the Spark workers run, with the rest of this "
               "package's dependencies (pyproject.toml: pyarrow, numba, numpy, deltalake, obstore, fastavro...)")
    return SparkEnvironmentError(f"Spark's Python cannot import {module!r}: the Spark tasks of this package "
                                 "cannot run there", fix, module=module)


def condition(exc: BaseException) -> str:
    """A Spark error's condition (``INVALID_HANDLE.SESSION_CLOSED``), or ``""``."""
    get = getattr(exc, "getCondition", None)
    return str(get() or "") if callable(get) else ""
