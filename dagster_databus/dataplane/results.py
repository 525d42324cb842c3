"""What the engines' jobs return (a bootstrap, a merge, a refresh, a logical table's load and merge) with the
counts reports show, and the two settings every engine reads the same way. Below the engines
(``engines.contract``) so the Spark jobs that build these results (``spark/``) import them from beneath."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from dagster_databus.config.sources import ServerSourceBase
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot, MergeCounts
from dagster_databus.dataplane.reduce import ChangeStats

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.sources.base import Source


# Where a bootstrap in key ranges spent its time, in seconds: on the driver, ``planning`` (the read's snapshot and
# its ranges' boundary keys), ``starting`` (the job's submission to its first task) and ``committing``; ``tasks``,
# the first task's start to the last one's end; and summed over the ranges this run read, ``opening`` (each
# range's connection and snapshot), ``reading`` (its rows: the source's query, parsing and converting) and
# ``writing`` (its Parquet files). Tasks run side by side, so the sums exceed ``tasks``.
BOOTSTRAP_PHASES = ("planning", "starting", "tasks", "opening", "reading", "writing", "committing")


@dataclass(frozen=True, slots=True)
class RangeCounts:
    """A bootstrap's key ranges (chunks): how many, how many an earlier killed run had finished, and the most
    times any one was read (a resumed bootstrap: at most 2); and where its time went (``BOOTSTRAP_PHASES``)."""

    ranges: int
    resumed: int
    most_reads: int
    seconds: Mapping[str, float] = field(default_factory=dict)

    def named(self) -> Mapping[str, float]:
        """The counts under the names reports give them (Dagster metadata: ``bootstrap_<name>``)."""
        return MappingProxyType({"ranges": self.ranges, "resumed": self.resumed, "most_reads": self.most_reads,
                                 **{f"{phase}_s": round(s, 3) for phase, s in self.seconds.items()}})


@dataclass(frozen=True, slots=True)
class FileCounts:
    """The data files a copy-on-write merge touched: how many the table had, how many its tasks read and
    rewrote (with the rows and bytes rewritten), and how many it added."""

    before: int
    read: int
    rewritten: int
    added: int
    bytes_rewritten: int
    rows_rewritten: int

    def named(self) -> Mapping[str, int]:
        """The counts under the names reports give them (Dagster metadata: ``data_<name>``)."""
        return MappingProxyType({
            "files_before": self.before, "files_read": self.read, "files_rewritten": self.rewritten,
            "files_added": self.added, "bytes_rewritten": self.bytes_rewritten, "rows_rewritten": self.rows_rewritten})


@dataclass(frozen=True, slots=True)
class Bootstrapped:
    scn: Scn  # the source read's SCN: the snapshot's applied SCN
    schema: TableSchema  # the columns the table was read with
    rows: int
    files: int = 0  # data files written (0: the engine does not count them)
    ranges: RangeCounts | None = None  # None for an engine that reads the table in one go


@dataclass(frozen=True, slots=True)
class Merged:
    counts: MergeCounts
    stats: ChangeStats
    files: FileCounts | None = None  # None for an engine that does not count them


@dataclass(frozen=True, slots=True)
class Refreshed:
    """What an on-demand snapshot of chosen rows (``dataplane.refresh``) read and changed."""

    rows_read: int
    deletes_found: int  # keys the snapshot held in the ranges that the source no longer has
    deletes_checked: bool  # False: the selection or the key's type let no deletes be found
    ranges: int
    counts: MergeCounts
    files: FileCounts | None = None


@dataclass(frozen=True, slots=True)
class LogicalLoaded:
    """What loading a logical table from its parts' physical snapshots took."""

    rows: Mapping[str, int]  # rows loaded, per part label


@dataclass(frozen=True, slots=True)
class LogicalMerged:
    """What merging the parts' logs into a logical table read and changed."""

    events: Mapping[str, Mapping[str, int]]  # events read, per part label and operation
    counts: MergeCounts


def range_rows(config: DatabusConfig, source: Source) -> int:
    """Rows per key range when a table is read in ranges: a server source's ``bootstrap_chunk_rows``, else
    ``merge.file_rows`` (an embedded database's range is about one data file)."""
    server = source.config
    return server.bootstrap_chunk_rows if isinstance(server, ServerSourceBase) else config.merge.file_rows


def soft_deletes(config: DatabusConfig, snap: DeltaSnapshot) -> bool:
    """Whether ``snap``'s table keeps deleted rows, marked (``tables[].deletes: soft``)."""
    return config.source(snap.source).table(snap.table).deletes == "soft"
