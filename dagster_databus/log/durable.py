"""File primitives the log's durability rests on: fsync + atomic rename, locks, crash points."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dagster_databus.errors import ConcurrentRunError

CRASH_ENV = "DATABUS_CRASH_AT"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new bytes, never a mix."""
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def crash_point(name: str) -> None:
    """Test seam: die here, like a killed process, when ``DATABUS_CRASH_AT`` names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os._exit(86)


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, fix: str) -> Iterator[None]:
    """Hold an advisory lock on ``path`` for the block; fail at once if another process has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise ConcurrentRunError(f"{what} is locked by another run (pid {holder})", fix) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
