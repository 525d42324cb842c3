"""Durable-write primitives every layer rests on (the change log, snapshots, consumers, Spark's
settings): fsync + atomic rename, a full disk turned into a clear error, the lake write probe,
advisory locks, and the crash points the fault tests kill a process at."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_databus.errors import ConcurrentRunError, DiskFullError, LakeNotWritableError

if TYPE_CHECKING:
    from dagster_databus.storage.lake import Lake

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


def lake_problem(lake: Lake | Path) -> str | None:
    """Why the lake cannot be written, or None. Creates nothing that stays: on a local disk the nearest
    existing folder on the lake's path is probed with a temporary file, removed at once (permission
    bits do not stop root, a read-only mount or an immutable folder does); in an object store a probe
    object is created and deleted (wrong credentials, a missing bucket or a read-only policy)."""
    from dagster_databus.storage.lake import as_lake

    lake = as_lake(lake)
    if lake.path is None:
        return _store_problem(lake)
    path = lake.path
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        made = "" if existing == path else f", so the lake {path} cannot be made"
        return f"{existing} is a file, not a folder{made}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".databus-write-probe-", dir=existing)
    except OSError as exc:
        return f"{existing} cannot be written: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def _store_problem(lake: Lake) -> str | None:
    key = f"_databus-write-probe-{uuid.uuid4().hex}"
    try:
        lake.objects.create(key, b"probe")
        lake.objects.delete(key)
    except Exception as exc:  # the store's own error says which: credentials, bucket, policy, endpoint
        return f"{lake.described()} cannot be written: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return None


def require_writable_lake(lake: Lake | Path) -> None:
    problem = lake_problem(lake)
    if problem is not None:
        raise LakeNotWritableError(f"the lake {lake} is not writable: {problem}",
                                   "point lake: at a folder this user can create and write (or a bucket its "
                                   "credentials may write: storage_options, docs/deployment.md), or fix the "
                                   "folder's permissions or mount; nothing was written to the source",
                                   path=str(lake))


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
