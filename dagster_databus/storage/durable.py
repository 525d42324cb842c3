"""Durable-write primitives every layer rests on (the change log, snapshots, consumers, Spark's
settings): fsync + atomic rename, a full disk turned into a clear error, advisory locks, and the
crash points the fault tests kill a process at.

The bottom of ``storage``: it imports nothing of the package's but ``errors`` (the lake's write
probe, which needs a ``Lake``, is ``storage.lake.lake_problem``)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dagster_databus.errors import ConcurrentRunError, DiskFullError

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
    """Test seam: SIGKILL this process here when ``DATABUS_CRASH_AT`` names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def disk_errors(what: str, where: Path) -> Iterator[None]:
    """Turn a full disk (or quota) into a clear error; anything half-written is cleaned up next run."""
    try:
        yield
    except Exception as exc:
        if _os_errno(exc) not in _DISK_FULL:
            raise
        raise DiskFullError(f"no space left on the device holding {where} while {what}",
                            "free space there and run again: nothing was committed, and the half-written "
                            "files are removed by the next run", path=str(where)) from exc


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Rust's io::Error as delta-rs's DeltaError carries it: "No space left on device (os error 28)".
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _os_errno(exc: BaseException) -> int | None:
    """The OS error number behind ``exc``: an ``OSError``'s own, or the one its message carries when
    another library wrapped it (delta-rs's "(os error N)"; the JVM's IOException, through Spark,
    only has the C library's text for it, ``os.strerror(N)``)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    text = str(exc)
    match = _RUST_OS_ERROR.search(text)
    if match:
        return int(match.group(1))
    return next((number for number in _DISK_FULL if os.strerror(number) in text), None)


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, fix: str) -> Iterator[None]:
    """Hold an advisory lock on ``path`` for the block; fail at once if another process has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConcurrentRunError(f"{what} is locked by another run (pid {holder})", fix) from None
        # The pid only helps the message of a run that finds the lock taken; the flock itself needs
        # no disk space, so a full disk must not stop the run here (it gets a clear error later).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
