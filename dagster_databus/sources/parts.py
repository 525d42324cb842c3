"""A source built from parts: each kind writes one collaborator per job, and ``ComposedSource`` answers the
``Source`` protocol by handing each method to the part whose job it is. A kind's adapter is a
``ComposedSource`` that builds and wires its parts (and adds what only it has, such as ``Failover``):

- ``catalog`` (``Catalog``): the configured tables' schemas, read from the database, and their keys checked;
- ``setup`` (``Setup``): what capture needs in the database, installed and checked, and what validate says;
- ``stream`` (``Stream``): the source's positions and its changes after a checkpoint, in commit order;
- ``reads`` (``Reads``): consistent reads of a table, in this process or cut into key ranges for tasks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from dagster_databus.core.batch import Changes
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.sources.base import (
    ALL_ROWS,
    InstallReport,
    PollStats,
    RangeRead,
    RowSelection,
    SourceFingerprint,
    TableRead,
)


class Catalog(Protocol):
    def preflight(self) -> Mapping[str, TableSchema]: ...

    def schemas(self) -> Mapping[str, TableSchema]: ...

    def null_keys(self) -> list[str]: ...


class Setup(Protocol):
    def install(self) -> InstallReport: ...

    def installed(self) -> bool: ...

    def verify(self) -> list[str]: ...

    def require_installed(self) -> None: ...

    def notes(self) -> list[str]: ...


class Stream(Protocol):
    def epoch(self) -> str: ...

    def high_water_mark(self) -> Scn: ...

    def start_position(self) -> tuple[Scn, dict[str, str]]: ...

    def reading(self) -> AbstractContextManager[None]: ...

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[Changes]: ...

    def release(self, through: Scn) -> None: ...


class Reads(Protocol):
    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead: ...

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead: ...

    def check_selection(self, table: str, rows: RowSelection) -> None: ...

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint: ...

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableRead: ...


class ComposedSource:
    """The ``Source`` methods, each answered by its part (``base.Source`` documents them). A subclass sets
    ``kind``, ``sees_ddl``, ``install_repairs``, ``name`` and ``config`` and builds the four parts."""

    catalog: Catalog
    setup: Setup
    stream: Stream
    reads: Reads

    # -- catalog -----------------------------------------------------------------------

    def preflight(self) -> Mapping[str, TableSchema]:
        return self.catalog.preflight()

    def schemas(self) -> Mapping[str, TableSchema]:
        return self.catalog.schemas()

    def null_keys(self) -> list[str]:
        return self.catalog.null_keys()

    # -- setup -------------------------------------------------------------------------

    def install(self) -> InstallReport:
        return self.setup.install()

    def installed(self) -> bool:
        return self.setup.installed()

    def verify(self) -> list[str]:
        return self.setup.verify()

    def require_installed(self) -> None:
        self.setup.require_installed()

    def notes(self) -> list[str]:
        return self.setup.notes()

    # -- stream ------------------------------------------------------------------------

    def epoch(self) -> str:
        return self.stream.epoch()

    def high_water_mark(self) -> Scn:
        return self.stream.high_water_mark()

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        return self.stream.start_position()

    def reading(self) -> AbstractContextManager[None]:
        return self.stream.reading()

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[Changes]:
        return self.stream.poll(since, epoch, stats, state)

    def release(self, through: Scn) -> None:
        self.stream.release(through)

    # -- reads -------------------------------------------------------------------------

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        return self.reads.read_table(table, batch_rows)

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        return self.reads.ranges(table, rows_per_range, rows, first)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        self.reads.check_selection(table, rows)

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return self.reads.fingerprint(table, progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableRead:
        return self.reads.rows_in_buckets(table, buckets)
