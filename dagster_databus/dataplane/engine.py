"""The interface every engine that bootstraps and merges snapshots implements, and what they return;
``snapshot.engines.open_engine`` picks one by ``merge.engine``.

- ``spark`` (the default): Spark tasks read the source's key ranges and the change log, reduce the
  changes per key, and write the Delta data files; the driver commits the files through delta-rs.
- ``delta-spark``: Spark's own Delta MERGE, where delta-spark's classes load in the session.
- ``local``: this process reads, reduces in bounded memory and MERGEs through delta-rs; no Spark.
- ``auto``: delta-spark where its classes load, else spark.

Every engine writes the same table layout and the same transaction ids, so a table can move from
one engine to another between runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from dagster_databus.config.sources import ServerSourceBase
from dagster_databus.core.progress import Progress
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot, MergeCounts
from dagster_databus.dataplane.reduce import ChangeStats

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

    from dagster_databus.config import DatabusConfig
    from dagster_databus.dataplane.files import TableFile
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.logical import LogicalLayout, LogicalPart, LogicalSnapshot
    from dagster_databus.dataplane.slices import SliceRows
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import RowSelection, Source


@dataclass(frozen=True, slots=True)
class RangeCounts:
    """A bootstrap's key ranges (chunks): how many, how many an earlier killed run had finished, and the most
    times any one was read (a resumed bootstrap: at most 2)."""

    ranges: int
    resumed: int
    most_reads: int

    def named(self) -> Mapping[str, int]:
        """The counts under the names reports give them (Dagster metadata: ``bootstrap_<name>``)."""
        return MappingProxyType({"ranges": self.ranges, "resumed": self.resumed, "most_reads": self.most_reads})


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


class MergeEngine(Protocol):
    name: str
    tables_at_once: int  # how many tables of a source ``snapshot.merge.sync_tables`` syncs at a time

    def bootstrap(self, snap: DeltaSnapshot, source: Source, table: str,
                  progress: Progress) -> Bootstrapped:
        """Replace the snapshot's rows with a consistent read of ``table`` from ``source``, committed with
        its SCN as both the applied and the bootstrap transaction id."""

    def merge(self, snap: DeltaSnapshot, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn,
              progress: Progress) -> Merged | None:
        """Apply the log's changes in (``since``, ``until``] and record ``until`` as the applied SCN, in one
        commit. Changes at or below the snapshot's applied SCN are dropped; per key only the newest
        change (SCN, then position in its window) applies, and only over an older row. None when
        ``until`` is not past the applied SCN (a replay): nothing is committed."""


    def refresh(self, snap: DeltaSnapshot, source: Source, table: str, rows: RowSelection,
                progress: Progress) -> Refreshed:
        """Read ``rows`` of ``table`` again from ``source`` (key ranges, each its own consistent read) and fold
        them into the snapshot (``dataplane.refresh``) in one commit; the applied SCN stays."""

    def slice_digests(self, rows: SliceRows, progress: Progress) -> pa.Table:
        """The (key text, row digest) of the snapshot rows in a verification slice (``dataplane.slices``), read from
        the files ``rows`` names: one task per file, in the spark engine."""

    def compact(self, snap: DeltaFolder, table: DeltaTable, key: Sequence[str], groups: Sequence[Sequence[TableFile]],
                progress: Progress) -> int:
        """Join each group of neighbouring files (``snapshot.upkeep.compaction_groups``) into files of about
        ``merge.file_rows`` rows in key order, in one commit against ``table``'s version that changes no data;
        files written."""

    def start_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, target: pa.Schema, start: Scn,
                      based: Scn, progress: Progress) -> int:
        """Overwrite history ``hist`` with the snapshot's rows at ``version`` (each a version current since its
        ``__scn``), in ``target``'s columns, as of SCN ``start``, recording ``based`` as the snapshot bootstrap
        it absorbed; rows written."""

    def restate_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, schema: TableSchema,
                        target: pa.Schema, tracked: Sequence[str], scn: Scn, progress: Progress) -> MergeCounts:
        """Fold a new read of the table (the snapshot at ``version``, bootstrapped at ``scn``) into the history:
        rows that changed without row events (a TRUNCATE, a re-read after DDL) start versions, keys the read
        lacks are closed as deleted at ``scn``; in one commit that records ``scn`` as the bootstrap absorbed."""

    def merge_history(self, hist: HistoryTable, log: ChangeLog, schema: TableSchema, target: pa.Schema,
                      tracked: Sequence[str], since: Scn, until: Scn, progress: Progress) -> Merged | None:
        """Fold the log's changes in (``since``, ``until``] into the history (``dataplane.history.fold``: a change in
        ``tracked`` columns or a delete ends a version) and record ``until``, in one commit; None for a replay."""

    def evolve(self, snap: DeltaSnapshot, schema: TableSchema, scn: Scn, progress: Progress,
               fills: Mapping[str, pa.Scalar] | None = None) -> int:
        """Rewrite every row of the snapshot in ``schema``'s columns (added ones null, or the value in ``fills``:
        a constant default; widened ones cast), each row's ``__scn`` kept, with ``scn`` as the schema change it
        absorbed, in one commit; the applied SCN stays. Rows rewritten."""

    def load_logical(self, target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart],
                     progress: Progress) -> LogicalLoaded:
        """Overwrite logical table ``target`` with every part's physical snapshot, each at its own applied SCN
        (recorded per part, with the layout, in the same commit)."""

    def merge_logical(self, target: LogicalSnapshot, layout: LogicalLayout,
                      ranges: Sequence[tuple[LogicalPart, Scn, Scn]],
                      progress: Progress) -> LogicalMerged:
        """Merge each part's log range (since, until] into ``target`` in one commit that moves every part's
        SCN."""


def range_rows(config: DatabusConfig, source: Source) -> int:
    """Rows per key range when a table is read in ranges: a server source's ``bootstrap_chunk_rows``, else
    ``merge.file_rows`` (an embedded database's range is about one data file)."""
    server = source.config
    return server.bootstrap_chunk_rows if isinstance(server, ServerSourceBase) else config.merge.file_rows


def soft_deletes(config: DatabusConfig, snap: DeltaSnapshot) -> bool:
    """Whether ``snap``'s table keeps deleted rows, marked (``tables[].deletes: soft``)."""
    return config.source(snap.source).table(snap.table).deletes == "soft"
