"""How the package's numba kernels are compiled: once, cached on disk (``kernel``), or, where no folder numba
tries can be written, in each process with a warning that names the fix.

numba looks for a cache folder in ``NUMBA_CACHE_DIR``, then beside the source (``__pycache__``), then in the
user's cache; with none writable (a read-only image run by a user without a home) ``cache=True`` refuses to
decorate at all, so the package would not import. Compiling in each process costs seconds on a run's first
large batch (docs/performance.md, "A first run on a new machine"), not the run.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

import numba
from numba.core.dispatcher import Dispatcher

F = TypeVar("F", bound=Callable[..., Any])
_warned = threading.Event()
_KERNELS: list[Dispatcher[Any]] = []
_warm = threading.Event()
# A process's first kernel costs numba's set-up of its compiler target (a quarter of a second here) whatever its
# size, and each later one only its own load from the cache. So until one has run, a path with a per-item fallback
# (fastavro, zlib, hashlib) takes it for calls of up to COLD_ITEMS items (about where fastavro's 17 to 30 us a
# record meets that set-up), and for up to COLD_BUDGET items in all: a scheduled run's few thousand changes, read
# by a few merges, never wake numba, while a long capture process pays the set-up once and runs the kernels.
COLD_ITEMS = 10_000
COLD_BUDGET = 50_000
_cold = [0]  # items the fallbacks took past their own crossovers before any kernel ran here
_lock = threading.Lock()


@overload
def kernel(fn: F, *, nogil: bool = True) -> Dispatcher[F]: ...


@overload
def kernel(fn: None = None, *, nogil: bool = True) -> Callable[[F], Dispatcher[F]]: ...


def kernel(fn: F | None = None, *, nogil: bool = True) -> Dispatcher[F] | Callable[[F], Dispatcher[F]]:
    """``numba.njit(cache=True, nogil=nogil)``, or without the cache where numba finds no folder for it."""

    def compile_(f: F) -> Dispatcher[F]:
        try:
            compiled = numba.njit(cache=True, nogil=nogil)(f)
        except RuntimeError as exc:
            if "no locator available" not in str(exc):
                raise
            _warn_uncached(f)
            compiled = numba.njit(nogil=nogil)(f)
        _KERNELS.append(compiled)
        return compiled

    return compile_(fn) if fn is not None else compile_


def few(items: int, small: int) -> bool:
    """Whether ``items`` are better served by a path's per-item fallback than by its kernel: fewer than ``small``
    (its own crossover; 0: the path always runs its kernel); until a kernel has run in this process, fewer than
    ``COLD_ITEMS`` while the fallbacks' total stays within ``COLD_BUDGET``."""
    if small <= 0:
        return False
    if items < small:
        return True
    if _warm.is_set() or items >= COLD_ITEMS:
        return False
    with _lock:
        if any(k.signatures for k in _KERNELS) or _cold[0] + items > COLD_BUDGET:
            _warm.set()
            return False
        _cold[0] += items
        return True


def prefer_kernels() -> None:
    """From now on in this process, ``few`` holds each path to its own crossover: for a caller that runs the paths
    in order to compile their kernels (``databus warm``)."""
    _warm.set()


def _warn_uncached(f: Callable[..., Any]) -> None:
    if _warned.is_set():
        return
    _warned.set()
    where = os.environ.get("NUMBA_CACHE_DIR")
    warnings.warn(
        f"numba cannot cache dagster-databus's compiled kernels ({f.__module__}.{f.__qualname__} first): no "
        f"folder it tries is writable ({'NUMBA_CACHE_DIR=' + where if where else 'NUMBA_CACHE_DIR is not set'}; "
        "the package's __pycache__; the user's cache folder), so each process compiles them again, seconds on "
        "its first large batch. Fix: set NUMBA_CACHE_DIR to a folder this user can write and run `databus warm` "
        "once with it (docs/deployment.md, \"A new machine: no compile pause\")", RuntimeWarning, stacklevel=3)
