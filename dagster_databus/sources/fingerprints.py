"""Reconciliation fingerprints computed in this process, for sources whose database does not compute them:
a consistent read's rows hashed batch by batch in the background, and the rows of chosen
buckets."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pyarrow as pa

from dagster_databus.core.progress import Progress, Ticker, quiet
from dagster_databus.sources.base import SourceFingerprint, TableRead

if TYPE_CHECKING:
    from dagster_databus.core.fingerprint import Fingerprint

T = TypeVar("T")


def in_background(work: Callable[[], T]) -> Future[T]:
    """``work()`` run on its own thread; its result (or its exception) in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the result
            future.set_exception(exc)

    threading.Thread(target=run, name="databus-fingerprint", daemon=True).start()
    return future


def streamed_fingerprint(read: TableRead, progress: Progress = quiet) -> SourceFingerprint:
    """The fingerprint of a consistent read, its rows hashed here batch by batch (bounded memory)."""
    from dagster_databus.core.fingerprint import fingerprint_batches

    def work() -> Fingerprint:
        ticker = Ticker(progress, f"{read.schema.table}: fingerprinting the source", "rows")
        fingerprint = fingerprint_batches(ticker.counted(read.batches, lambda b: b.num_rows), read.schema)
        ticker.finish()
        return fingerprint

    return SourceFingerprint(read.scn, read.schema, in_background(work), False)


def in_buckets(read: TableRead, buckets: Iterable[int]) -> TableRead:
    """The rows of a consistent read whose key falls in fingerprint ``buckets``."""
    from dagster_databus.core.fingerprint import buckets as bucket_of
    from dagster_databus.core.fingerprint import row_texts

    wanted = np.array(sorted(set(buckets)), np.int64)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in read.batches:
            key, _ = row_texts(batch, read.schema, columns=())
            mask = np.isin(bucket_of(key), wanted)
            if mask.any():
                yield batch.filter(pa.array(mask))

    return TableRead(read.scn, read.schema, batches())
