"""The single writer of a source's change log: segments published and committed, the checkpoint
moved on, epochs switched, and what a crashed or beaten writer left behind swept away.

A commit writes its segment under a name of its own, then commits the next manifest version
(``log.manifest.commit_manifest``); of two writers racing, one commits and the other is told
(``ConcurrentRunError``, or ``EpochMismatchError`` when the winner switched the epoch: a stale writer
is fenced) and deletes its segment. On a local disk a ``flock`` also turns a second writer away up
front. A crash anywhere leaves only objects no version names, which the next writer's ``recover``
removes.

A writer is given the log's ``LogLayout`` and ``SchemaRegistry`` (``ChangeLog.writer`` builds it) and
reads and commits through the public functions of ``log.manifest`` and ``log.integrity``.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np
import pyarrow as pa

from dagster_databus.core.batch import ChangeBatch, SpooledBatch, batch_schema
from dagster_databus.core.events import Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import ChangeLogFormatError, ConcurrentRunError, EpochMismatchError
from dagster_databus.log.avro.container import write_container
from dagster_databus.log.avro.encoder import iter_blocks
from dagster_databus.log.integrity import require_intact
from dagster_databus.log.manifest import (
    KEEP_VERSIONS,
    PART_SEGMENTS,
    Checkpoint,
    Manifest,
    SegmentInfo,
    commit_manifest,
    new_tag,
    now_ms,
    parts_named_before,
    read_manifest,
)
from dagster_databus.log.segments import TableVersion, row_fields, segment_schema
from dagster_databus.storage.durable import crash_point, disk_errors, exclusive_lock

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout
    from dagster_databus.log.schemas import SchemaRegistry

# An object no manifest names is removed by the next writer on a store only once this old (or once
# the log has moved past its SCNs): a writer on another machine may be about to commit it.
SWEEP_GRACE_S = 3600.0
# A segment being written is held in memory up to this size, then staged in a temporary file.
SPOOL_SEGMENT_BYTES = 8 << 20
_SEGMENT = re.compile(r"^(\d{20})-(\d{20})")


class LogWriter:
    """The writer of a source's log. Use as a context manager. Two writers racing cannot both commit
    (see the module's docstring); on a local disk the second is also turned away up front by a lock."""

    def __init__(self, layout: LogLayout, registry: SchemaRegistry, refuse_damage: bool = True,
                 part_segments: int = PART_SEGMENTS) -> None:
        self.layout = layout
        self.registry = registry  # the log's row schemas (``schemas()`` gives the registered ones)
        self.refuse_damage = refuse_damage
        self.part_segments = part_segments  # segments a manifest version names before it seals them
        self._lock = exclusive_lock(
            layout.root / ".lock", f"the change log of source {layout.source!r}",
            "wait for the other capture of this source to finish; runs of one source must not overlap",
        ) if layout.lake.is_local else None
        self.versions: dict[str, int] = {}
        self._segment: tuple[dict[str, int], list[dict[str, Any]], dict[str, TableVersion]] | None = None
        self._seen: int | None = None  # the manifest version this writer last read or committed

    def __enter__(self) -> LogWriter:
        if self._lock is not None:
            self._lock.__enter__()
        try:
            self.recover()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._lock is not None:
            self._lock.__exit__(kind, exc, traceback)

    def recover(self) -> list[str]:
        """Delete objects no manifest names (a crash mid-publish, a writer that lost a race); roll the
        checkpoint forward; refuse to write after committed segments that are missing or damaged.

        Holding the local lock, everything unnamed is a dead writer's. In a store another writer may be
        about to commit what it just wrote, so only what the log has moved past or what is older than
        ``SWEEP_GRACE_S`` goes."""
        layout = self.layout
        if self.refuse_damage:
            require_intact(layout)
        else:
            try:
                read_manifest(layout)
            except ChangeLogFormatError:
                return []  # a log of an older format: the bootstrap opening this writer sets it aside whole
        manifest = read_manifest(layout)
        exclusive = self._lock is not None
        stale_before = time.time() - SWEEP_GRACE_S

        def dead(info: Any, passed: bool) -> bool:
            return exclusive or passed or info.modified_s < stale_before

        removed = []
        listed = {s.file for s in manifest.segments}
        for name, info in layout.listing("segments/").items():
            match = _SEGMENT.match(name)
            if name not in listed and dead(info, match is not None and int(match.group(1)) <= manifest.last_scn.value):
                removed.append(f"segments/{name}")
        named = {p.file for p in manifest.parts}
        unnamed = {name: info for name, info in layout.listing("manifest.d/").items() if name not in named}
        versions = layout.versions()
        # Parts an earlier version named were replaced by retention (a reader that still holds that
        # version reads the newest instead); the rest were sealed by a commit that crashed or lost.
        retired = parts_named_before(layout, manifest.version, versions) if unnamed and not exclusive else set()
        removed += [f"manifest.d/{name}" for name, info in unnamed.items() if dead(info, name in retired)]
        removed += [f"manifest/{v:020d}.json" for v in versions if v <= manifest.version - KEEP_VERSIONS]
        for name in removed:
            layout.objects.delete(layout.key + name)
        if layout.lake.path is not None:
            for path in layout.root.glob("**/.tmp-*"):
                path.unlink()
                removed.append(path.name)
        checkpoint = manifest.checkpoint
        if not manifest.empty and (checkpoint is None or checkpoint.scn < manifest.last_scn):
            # The manifest only names durable segments, so everything it lists is durable.
            manifest = self._commit(manifest, manifest.last_scn, manifest.epoch or "", manifest.state)
        self._seen = manifest.version
        return removed

    def current(self) -> Manifest:
        """The log as this writer left it. Anything another writer committed since this one opened the
        log (a run on another machine sharing the lake) ends this writer's run: it read a state that is
        gone, and the other run holds the log now."""
        manifest = read_manifest(self.layout)
        if self._seen is not None and manifest.version != self._seen:
            raise ConcurrentRunError(
                f"another run committed to the change log of source {self.layout.source!r} while this one was "
                f"running (version {manifest.version}, through SCN {manifest.last_scn}): this run stops here, "
                "with what it committed before kept", "runs of one source must not overlap (one schedule or "
                "sensor per source); nothing is lost, the next run continues from the log as the other left it",
                source=self.layout.source)
        return manifest

    def adopt(self) -> None:
        """Take the log as it is now as this writer's own (a bootstrap that just set the old log aside)."""
        self._seen = read_manifest(self.layout).version

    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Commit ``manifest`` (read with ``current``) as the next version, keeping the checkpoint."""
        committed = commit_manifest(self.layout, manifest, self.part_segments)
        self._seen = committed.version
        return committed

    def start_at(self, scn: Scn, epoch: str, state: dict[str, str] | None = None) -> None:
        """Begin an empty log at ``scn`` (a bootstrap): capture continues after it."""
        manifest = self.current()
        if not manifest.empty:
            raise ValueError("start_at is only for an empty log")
        self._commit(replace(manifest, epoch=epoch, start_scn=scn, state=state or {}, log_id=uuid.uuid4().hex,
                             lineage=(), parts=(), sealed=(), tail=()), scn, epoch, state or {})

    def switch_epoch(self, resume: Scn, epoch: str, state: dict[str, str], record: dict[str, Any]) -> None:
        """Record a switch to another lineage of the source (a failover) and resume at ``resume``.

        Explicit and durable: the manifest keeps every epoch the log switched from with the SCN it
        ended at, so consumers holding positions of an earlier epoch can still place them.
        """
        manifest = self.current()
        checkpoint = manifest.checkpoint
        until = checkpoint.scn if checkpoint is not None else manifest.last_scn
        if resume <= until:
            raise ValueError(f"a switch must resume after SCN {until}, not at {resume}")
        entry = {"epoch": manifest.epoch or (checkpoint.epoch if checkpoint else ""), "until_scn": str(until),
                 "to_epoch": epoch, "resume_scn": str(resume), "switched_ms": now_ms(), **record}
        self._commit(replace(manifest, state=dict(state), lineage=(*manifest.lineage, entry)), resume, epoch, state,
                     switch=True)

    def advance(self, scn: Scn, epoch: str, state: dict[str, str]) -> None:
        """Move the checkpoint past source positions that produced no events for this log."""
        manifest = self.current()
        checkpoint = manifest.checkpoint
        if checkpoint is not None and scn <= checkpoint.scn:
            raise ValueError(f"checkpoint {checkpoint.scn} may only move forward, not to {scn}")
        self._commit(manifest, scn, epoch, state)

    def restate(self, epoch: str, state: dict[str, str]) -> None:
        """Keep the checkpoint where it is with ``state``: what the source records of itself changed, its
        position did not."""
        manifest = self.current()
        if manifest.checkpoint is None:
            raise ValueError("no checkpoint to restate")
        self._commit(manifest, manifest.checkpoint.scn, epoch, state)

    def _commit(self, manifest: Manifest, scn: Scn, epoch: str, state: dict[str, str],
                switch: bool = False) -> Manifest:
        """Commit ``manifest`` (as read, with changes) with the checkpoint at ``scn``: one new version."""
        if not switch and not _same_epoch(manifest, Position(epoch, scn)):
            raise self._wrong_epoch(manifest, epoch)
        checkpoint = Checkpoint(scn, epoch, now_ms(), dict(state))
        with disk_errors("committing the change-log manifest", self.layout.root):
            return self.write_manifest(replace(manifest, epoch=epoch, checkpoint=checkpoint))

    def register_schemas(self, schemas: Iterable[Any], guard_defaults: bool = False) -> dict[str, int]:
        self.versions = {s.table: self.registry.register(s, guard_defaults) for s in schemas}
        return self.versions

    def append(self, windows: list[Window], epoch: str, state: dict[str, str] | None = None) -> SegmentInfo:
        """Publish whole windows as one segment and advance the checkpoint past them."""
        if not windows:
            raise ValueError("nothing to append")
        manifest = self._manifest_for(epoch)
        previous = manifest.last_scn
        for window in windows:
            if window.first_scn <= previous:
                raise ValueError(
                    f"window {window.scn} starts at SCN {window.first_scn}, not after {previous}: "
                    "the log only grows in commit order"
                )
            previous = window.scn
        batch = ChangeBatch.from_windows(windows, self.schemas())
        return self._publish_batch(manifest, batch, batch.commit_order(), (windows[0].first_scn, windows[-1].scn),
                                   len(windows), epoch, state)

    def append_batch(self, batch: ChangeBatch, epoch: str, state: dict[str, str] | None = None) -> SegmentInfo:
        """Publish a columnar batch of whole windows as one segment (``append`` without per-event objects)."""
        manifest = self._manifest_for(epoch)
        self._check_columns(batch)
        order = batch.commit_order()
        scn, window = batch.column("__scn"), batch.column("__window_scn")
        if order is not None:
            scn, window = scn[order], window[order]
        starts = np.flatnonzero(np.diff(window)) + 1
        previous = np.concatenate([[manifest.last_scn.value], window[starts - 1]])
        if not (np.all(np.diff(scn) >= 0) and np.all(scn <= window)
                and np.all(scn[np.concatenate([[0], starts])] > previous)):
            raise ValueError(f"the batch's windows are not in commit order after SCN {manifest.last_scn}: "
                             "the log only grows in commit order")
        return self._publish_batch(manifest, batch, order, (Scn(int(scn[0])), Scn(int(window[-1]))),
                                   len(starts) + 1, epoch, state)

    def append_spooled(self, spooled: SpooledBatch, epoch: str, state: dict[str, str] | None = None) -> SegmentInfo:
        """Publish windows too large to hold as one segment, their pieces read, encoded and written one at a time
        (the segment is staged on disk once it outgrows ``SPOOL_SEGMENT_BYTES``)."""
        manifest = self._manifest_for(epoch)
        if spooled.first_scn <= manifest.last_scn or spooled.last_scn < spooled.first_scn:
            raise ValueError(f"spooled windows {spooled.first_scn}..{spooled.last_scn} are not in commit order after "
                             f"SCN {manifest.last_scn}: the log only grows in commit order")
        _, rows = self._segment_schema()
        tables: dict[str, int] = {}

        def blocks() -> Iterator[pa.Array]:
            previous = (spooled.first_scn.value, -1)  # (window, seq) of the last event written
            for piece in spooled.pieces():
                self._check_columns(piece)
                order = piece.commit_order()
                window, seq = piece.column("__window_scn"), piece.column("__seq")
                if order is not None:
                    window, seq = window[order], seq[order]
                if (window[0], seq[0]) <= previous or window[-1] > spooled.last_scn.value:
                    raise ValueError(f"a piece of spooled windows {spooled.first_scn}..{spooled.last_scn} is out of "
                                     "commit order: the log only grows in commit order")
                previous = (int(window[-1]), int(seq[-1]))
                for table, events in piece.tables.items():
                    tables[table] = tables.get(table, 0) + len(events)
                yield from self._encode(piece, rows, order)

        # ``tables`` is filled as ``blocks`` is consumed, before the segment is named in the manifest.
        return self._publish(manifest, blocks(), (spooled.first_scn, spooled.last_scn), spooled.windows, tables,
                             spooled.commit_ms, epoch, state)

    def _check_columns(self, batch: ChangeBatch) -> None:
        schemas = self.schemas()
        for table, rows in batch.tables.items():
            if table not in schemas or rows.schema != batch_schema(schemas[table]):
                raise ValueError(f"table {table!r}: the batch's columns are not those of its registered schema "
                                 f"(register_schemas first): {rows.schema}")

    def _manifest_for(self, epoch: str) -> Manifest:
        manifest = self.current()
        if not _same_epoch(manifest, Position(epoch, manifest.last_scn)):
            raise self._wrong_epoch(manifest, epoch)
        return manifest

    def _wrong_epoch(self, manifest: Manifest, epoch: str) -> EpochMismatchError:
        return EpochMismatchError(
            f"the change log of source {self.layout.source!r} belongs to epoch {manifest.epoch}; a writer "
            f"from epoch {epoch} may not append to it",
            "bootstrap the source into a fresh log (see docs/operations.md)", source=self.layout.source)

    def _publish_batch(self, manifest: Manifest, batch: ChangeBatch, order: np.ndarray | None,
                       scns: tuple[Scn, Scn], windows: int, epoch: str, state: dict[str, str] | None) -> SegmentInfo:
        """``_publish`` of one batch, in ``order`` (its commit order; None: as it is)."""
        _, rows = self._segment_schema()
        tables = {table: len(events) for table, events in batch.tables.items() if len(events)}
        commits = batch.column("__commit_ts_ms")
        last_commit = int((commits[order] if order is not None else commits)[-1])  # the last event's, in order
        return self._publish(manifest, self._encode(batch, rows, order), scns, windows, tables, last_commit, epoch,
                             state)

    def _publish(self, manifest: Manifest, blocks: Iterator[pa.Array], scns: tuple[Scn, Scn], windows: int,
                 tables: dict[str, int], last_commit_ms: int, epoch: str, state: dict[str, str] | None) -> SegmentInfo:
        first, last = scns
        name = f"{first.value:020d}-{last.value:020d}-{new_tag()}.avro"
        key = self.layout.segment_key(name)
        schema, rows = self._segment_schema()
        with tempfile.SpooledTemporaryFile(SPOOL_SEGMENT_BYTES) as spooled:
            buffer = cast(BinaryIO, spooled)
            # zstd level 1: a third of deflate's time (level 1) for a smaller file, and faster to read.
            write_container(buffer, schema, blocks, codec="zstandard", level=1, metadata={
                "databus.source": self.layout.source, "databus.epoch": epoch, "databus.first_scn": str(first),
                "databus.last_scn": str(last), "databus.rows": json.dumps(rows)})
            size = buffer.tell()
            buffer.seek(0)
            with disk_errors(f"writing change-log segment {name}", self.layout.root / "segments"):
                self.layout.objects.create(key, buffer, staged=lambda: crash_point("segment_written"))
        crash_point("segment_published")
        info = SegmentInfo(
            file=name, first_scn=first.value, last_scn=last.value, windows=windows,
            events=sum(tables.values()), bytes=size, created_ms=now_ms(), tables=dict(tables),
            last_commit_ms=last_commit_ms,
        )
        # A log's first segment names it, unless start_at did (logs older than ids keep none).
        log_id = manifest.log_id or ("" if not manifest.empty else uuid.uuid4().hex)
        try:
            self._commit(replace(manifest, log_id=log_id, tail=(*manifest.tail, info)), last, epoch, state or {})
        except (ConcurrentRunError, EpochMismatchError):
            self.layout.objects.delete(key)  # lost the race: the segment is nobody's
            raise
        crash_point("manifest_committed")
        return info

    def schemas(self) -> dict[str, TableSchema]:
        """The registered schema of each table, as change batches for ``append_batch`` hold its columns."""
        return {table: self.registry.load(table, version) for table, version in self.versions.items()}

    def _segment_schema(self) -> tuple[list[dict[str, Any]], dict[str, TableVersion]]:
        """The segment schema of the registered tables (``log.segments.segment_schema``), built once per set."""
        if self._segment is None or self._segment[0] != self.versions:
            records, rows = segment_schema(self.registry, self.layout.source, self.versions)
            self._segment = (dict(self.versions), records, rows)
        return self._segment[1], self._segment[2]

    def _encode(self, batch: ChangeBatch, rows: dict[str, tuple[str, int]],
                order: np.ndarray | None) -> Iterator[pa.Array]:
        """Every event of ``batch`` as its Avro record (its table's union branch), in commit order, in blocks
        (encoded as the container takes them)."""
        branch = {table: i for i, (table, _) in enumerate(rows.values())}
        return iter_blocks([(events, row_fields(self.registry, table, self.versions[table]), branch[table])
                              for table, events in batch.tables.items()], order)


def _same_epoch(manifest: Manifest, position: Position) -> bool:
    """Whether ``position`` may be committed to the log ``manifest`` describes: any, before a writer set
    its epoch."""
    return manifest.head is None or manifest.head.same_epoch(position)
