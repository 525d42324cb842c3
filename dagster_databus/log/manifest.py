"""The change log's manifest: the model (segments, sealed parts, the checkpoint, epoch lineage) and
its versioned commits.

``manifest/<version>.json`` under the log's key are the commit points (``storage.documents``): each
names the newest segments, the sealed parts that list the older ones, the epoch and its lineage, and
Databus's MaxSCN checkpoint (how far capture has got). A commit reads the newest version N, then
creates version N+1 only if no other writer has; of two writers racing, one creates it and the other
is told (``ConcurrentRunError``, or ``EpochMismatchError`` when the winner switched the epoch: a stale
writer is fenced).

A version names only the newest segments; whenever that list reaches ``part_segments`` entries
(``PART_SEGMENTS`` unless the log says otherwise) they are sealed into an immutable part
(``manifest.d/<first>-<last>-<n>-<tag>.json``, written before the version that names it), so a
commit costs the same at 100 segments as at 100,000, and readers cache the parts they have read.
The newest ``KEEP_VERSIONS`` versions are kept, so a reader that listed them can still read one.
Logs written before versions existed (``manifest.json`` + ``checkpoint.json``) read as version 0
(``log.compat``) and move to versions with their next commit.

Reads and commits take the log's ``LogLayout`` (``log.layout``), never the ``ChangeLog``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any

from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import (
    ChangeLogCorruptError,
    ChangeLogFormatError,
    ConcurrentRunError,
    EpochMismatchError,
    ManifestPartGoneError,
)
from dagster_databus.log.compat import drop_manifest_v0, manifest_v0
from dagster_databus.storage.durable import crash_point

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout

# 2: each event one Avro record of its table's row schema plus the event fields, every column in its
# own type (core.types); older segments listed in sealed manifest parts. Format 1 logs kept DECIMAL,
# dates and times as text, each row Avro-encoded again inside an envelope record.
FORMAT = 2
# Manifest versions kept behind the newest: a reader between listing and reading one still finds it.
KEEP_VERSIONS = 16
# How many segments a manifest version names before they are sealed into a part: bounds a commit's cost
# (``ChangeLog.part_segments``, which a log's writer commits with).
PART_SEGMENTS = 256


def new_tag() -> str:
    """What makes an object's name this writer's own."""
    return uuid.uuid4().hex[:12]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    file: str
    first_scn: int
    last_scn: int
    windows: int
    events: int
    bytes: int
    created_ms: int
    tables: dict[str, int] = field(default_factory=dict)
    # When the segment's last transaction committed in the source (ms since the epoch; 0: not recorded,
    # a segment written before this was kept). Lag in time is measured from it.
    last_commit_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies, and a commit encodes up to part_segments of these.
        return {"file": self.file, "first_scn": self.first_scn, "last_scn": self.last_scn, "windows": self.windows,
                "events": self.events, "bytes": self.bytes, "created_ms": self.created_ms, "tables": self.tables,
                "last_commit_ms": self.last_commit_ms}


@dataclass(frozen=True, slots=True)
class ManifestPart:
    """A sealed, immutable list of consecutive committed segments (``manifest.d/<file>``)."""

    file: str
    first_scn: int
    last_scn: int
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "first_scn": self.first_scn, "last_scn": self.last_scn, "count": self.count}

    @classmethod
    def of(cls, segments: Sequence[SegmentInfo]) -> ManifestPart:
        first, last = segments[0].first_scn, segments[-1].last_scn
        return cls(f"{first:020d}-{last:020d}-{len(segments)}-{new_tag()}.json", first, last, len(segments))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    scn: Scn
    epoch: str
    updated_ms: int
    # Source-specific facts about the position (for a binlog: its file and the file's creation time).
    state: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"scn": str(self.scn), "epoch": self.epoch, "updated_ms": self.updated_ms, "state": self.state}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Checkpoint:
        return cls(scn=Scn.parse(doc["scn"]), epoch=doc["epoch"], updated_ms=doc["updated_ms"],
                   state=doc.get("state", {}))


@dataclass(frozen=True)  # not slots: ``segments`` is a cached property
class Manifest:
    epoch: str | None
    # The newest segments, named in the version itself; commit_manifest seals them into parts as they
    # reach part_segments (so a new listing may put every segment here).
    tail: tuple[SegmentInfo, ...] = ()
    start_scn: Scn = Scn.BEGINNING  # the log holds every change after this (set by a bootstrap)
    state: dict[str, str] = field(default_factory=dict)  # the checkpoint state of the last commit
    # Recorded epoch switches (failovers), oldest first: {"epoch", "until_scn", "to_epoch", ...}.
    lineage: tuple[dict[str, Any], ...] = ()
    # Names this log from its start (a bootstrap makes a new one; failovers and retention keep it).
    log_id: str = ""
    # Sealed parts listing the oldest segments, in order, and (when read back) the segments of each.
    parts: tuple[ManifestPart, ...] = ()
    sealed: tuple[tuple[SegmentInfo, ...], ...] = ()
    # Which version of the log's manifest this is (0: none yet, or one written before versions).
    version: int = 0
    checkpoint: Checkpoint | None = None

    @cached_property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Every committed segment, oldest first (built on first use: a commit itself never needs it)."""
        return tuple(chain(*self.sealed, self.tail))

    @property
    def head(self) -> Position | None:
        """Where the log has got to, in its epoch; None before any writer set one."""
        return Position(self.epoch, self.last_scn) if self.epoch is not None else None

    def knows_epoch(self, epoch: str) -> bool:
        """Whether positions of ``epoch`` belong to this log (its current epoch or one it switched from)."""
        probe = Position(epoch, Scn.BEGINNING)
        known = [self.epoch] if self.epoch is not None else []
        return any(probe.same_epoch(Position(e, Scn.BEGINNING)) for e in [*known, *(e["epoch"] for e in self.lineage)])

    def to_json(self, source: str) -> dict[str, Any]:
        return {"format": FORMAT, "source": source, "log_id": self.log_id, "epoch": self.epoch,
                "start_scn": str(self.start_scn), "state": self.state, "lineage": list(self.lineage),
                "parts": [p.to_json() for p in self.parts], "segments": [s.to_json() for s in self.tail],
                "checkpoint": self.checkpoint.to_json() if self.checkpoint is not None else None}

    @property
    def empty(self) -> bool:
        return not self.tail and not self.sealed

    @property
    def last_scn(self) -> Scn:
        last = self.tail[-1] if self.tail else self.sealed[-1][-1] if self.sealed else None
        return Scn(last.last_scn) if last is not None else self.start_scn

    def between(self, since: Scn, until: Scn | None = None) -> list[SegmentInfo]:
        """Segments holding any SCN in (since, until]."""
        return [
            s for s in self.segments
            if s.last_scn > since.value and (until is None or s.first_scn <= until.value)
        ]

    def table_bytes(self, table: str, since: Scn, until: Scn | None = None) -> int:
        """The bytes of the segments in (since, until] that hold ``table``'s changes: what a read of them costs."""
        return sum(s.bytes for s in self.between(since, until) if table in s.tables)


def read_manifest(layout: LogLayout) -> Manifest:
    """The newest committed version of ``log``'s manifest (an empty one before any commit)."""
    try:
        return _read_manifest(layout)
    except ManifestPartGoneError:
        # Retention re-sealed the parts between our read of the manifest and of a part: read
        # the newer manifest. A part still missing then is damage (raised below).
        return _read_manifest(layout, final=True)


def _head(layout: LogLayout) -> tuple[int, dict[str, Any] | None]:
    """The newest manifest version and its document (0 and the legacy manifest, or None: empty)."""
    for _ in range(5):
        versions = layout.manifests.versions()
        for version in reversed(versions):
            data = layout.manifests.read(version)
            if data is not None:
                return version, json.loads(data)
        if not versions:
            break
        # Every version listed was dropped before we read it (KEEP_VERSIONS commits meanwhile).
    return 0, manifest_v0(layout.objects, layout.key)


def _read_manifest(layout: LogLayout, final: bool = False) -> Manifest:
    version, doc = _head(layout)
    if doc is None:
        return Manifest(epoch=None)
    if doc.get("format") == 1:
        raise ChangeLogFormatError(
            f"the change log of source {layout.source!r} ({layout.where()}) was written by an earlier dagster-databus "
            "that kept DECIMAL, DATE, DATETIME and TIMESTAMP columns as text; this version keeps each column in "
            "its own type (docs/types.md) and does not mix the two",
            f"run `databus bootstrap --source {layout.source}`: the old change log and snapshots move to "
            "<lake>/trash/ and the next run reads every table afresh, typed", source=layout.source)
    if doc.get("format") != FORMAT:
        raise ChangeLogCorruptError(
            f"{layout.where(f'manifest/{version:020d}.json')} has format {doc.get('format')!r}; this version "
            f"reads format {FORMAT}",
            "upgrade dagster-databus, or bootstrap the source into a fresh lake",
        )
    log_id = doc.get("log_id", "")  # format 2 logs get one with their first commit, before any part
    listing = tuple((p["file"], p["first_scn"], p["last_scn"], p["count"]) for p in doc.get("parts", ()))
    parts, sealed = _parts(layout, listing, log_id, final)
    checkpoint = doc.get("checkpoint")
    return Manifest(epoch=doc["epoch"], tail=tuple(SegmentInfo(**s) for s in doc["segments"]),
                    start_scn=Scn.parse(doc.get("start_scn", "0")), state=doc.get("state", {}),
                    lineage=tuple(doc.get("lineage", ())), log_id=log_id, parts=parts, sealed=sealed,
                    version=version, checkpoint=Checkpoint.from_json(checkpoint) if checkpoint else None)


def _parts(layout: LogLayout, listing: tuple[tuple[str, int, int, int], ...], log_id: str,
           final: bool) -> tuple[tuple[ManifestPart, ...], tuple[tuple[SegmentInfo, ...], ...]]:
    # A named part never changes within its log (a rebuilt lake has a new log id), so a listing
    # reads the same forever; most commits list the same parts as the one before (flat per commit).
    key = (layout.lake.where(layout.key), log_id, listing)
    with _LISTINGS_LOCK:  # parallel consumers read manifests from several threads
        cached = _LISTINGS.get(key)
    if cached is None:
        parts = tuple(ManifestPart(*p) for p in listing)
        cached = parts, tuple(_part_segments(layout, p, log_id, final) for p in parts)
        with _LISTINGS_LOCK:
            _LISTINGS[key] = cached
            while len(_LISTINGS) > 64:
                del _LISTINGS[next(iter(_LISTINGS))]
    return cached


def _part_segments(layout: LogLayout, part: ManifestPart, log_id: str, final: bool) -> tuple[SegmentInfo, ...]:
    segments = _read_part(layout, f"{layout.key}manifest.d/{part.file}", log_id)
    if segments is None:
        if not final:
            raise ManifestPartGoneError
        raise ChangeLogCorruptError(
            f"manifest part {part.file} (SCN {part.first_scn}..{part.last_scn}, {part.count} segments) is "
            f"named in {layout.where('manifest')} but missing from {layout.where('manifest.d')}",
            f"restore {layout.where('manifest.d')} from backup, or run `databus bootstrap --source {layout.source}`",
            source=layout.source) from None
    held = (len(segments), segments[0].first_scn, segments[-1].last_scn) if segments else (0, None, None)
    if held != (part.count, part.first_scn, part.last_scn):
        raise ChangeLogCorruptError(
            f"manifest part {part.file} lists {held[0]} segments (SCN {held[1]}..{held[2]}), "
            f"{layout.where('manifest')} says {part.count} ({part.first_scn}..{part.last_scn})",
            f"restore {layout.where('manifest.d')} from backup, or run `databus bootstrap --source {layout.source}`",
            source=layout.source)
    return segments


def commit_manifest(layout: LogLayout, manifest: Manifest, part_segments: int = PART_SEGMENTS) -> Manifest:
    """Commit ``manifest`` as the version after the one it was read as: the change log's commit point.

    First seals what the version should no longer list inline into parts, so it names only durable
    objects. Raises ``ConcurrentRunError`` (or ``EpochMismatchError``) when another writer committed
    that version first; nothing of this commit is then part of the log. Parts it no longer names
    are deleted by the writer's next ``recover``, never here, so a reader holding the previous
    version can still read them. Returns the committed manifest.
    """
    sealed = _seal(layout, manifest, part_segments)
    known = {p.file for p in manifest.parts}
    new_parts = [p.file for p in sealed.parts if p.file not in known]
    version = manifest.version + 1
    # Compact: the C encoder; an indented one is several times slower for the same entries.
    data = json.dumps(sealed.to_json(layout.source), separators=(",", ":")).encode()
    if not layout.manifests.create(version, data):
        for file in new_parts:
            layout.objects.delete(f"{layout.key}manifest.d/{file}")
        raise _lost_race(layout, manifest)
    if version > KEEP_VERSIONS:
        layout.manifests.delete(version - KEEP_VERSIONS)
    if manifest.version == 0:  # the first version after a log of manifest.json + checkpoint.json
        drop_manifest_v0(layout.objects, layout.key)
    return replace(sealed, version=version)


def parts_named_before(layout: LogLayout, head: int, versions: Sequence[int]) -> set[str]:
    """The parts the kept versions before ``head`` name."""
    named: set[str] = set()
    for version in versions:
        data = layout.manifests.read(version) if version < head else None
        if data is not None:
            named.update(p["file"] for p in json.loads(data).get("parts", ()))
    return named


def _lost_race(layout: LogLayout, mine: Manifest) -> Exception:
    theirs = read_manifest(layout)
    if mine.head is not None and not (theirs.head is not None and mine.head.same_epoch(theirs.head)):
        return EpochMismatchError(
            f"while this writer (epoch {mine.epoch}) was writing, another switched the change log of source "
            f"{layout.source!r} to epoch {theirs.epoch}: this writer is fenced off and committed nothing",
            "nothing to repair: the log continues in the new epoch; stop the old run's schedule if it is "
            "still reading the old primary", source=layout.source)
    return ConcurrentRunError(
        f"another run committed version {theirs.version} of the change log of source {layout.source!r} "
        f"(through SCN {theirs.last_scn}) while this one was writing: this run committed nothing",
        "runs of one source must not overlap (one schedule or sensor per source); nothing is lost, the "
        "next run continues from the log as the other run left it", source=layout.source)


def _seal(layout: LogLayout, manifest: Manifest, part_segments: int) -> Manifest:
    parts: list[ManifestPart | None]
    if len(manifest.sealed) == len(manifest.parts):  # as read back, plus new segments in the tail
        parts, sealed, tail = list(manifest.parts), list(manifest.sealed), manifest.tail
    else:  # a new listing (retention dropped the oldest segments): match the old parts against it
        parts, sealed, tail = _reuse_parts(manifest.parts, manifest.segments)
    fresh = [i for i in range(len(parts)) if parts[i] is None]
    while len(tail) >= part_segments:
        fresh.append(len(parts))
        parts.append(None)
        sealed.append(tail[:part_segments])
        tail = tail[part_segments:]
    for i in fresh:
        part = parts[i] = ManifestPart.of(sealed[i])
        layout.objects.create(f"{layout.key}manifest.d/{part.file}",
                           json.dumps([s.to_json() for s in sealed[i]], separators=(",", ":")).encode())
    if fresh:
        crash_point("manifest_part_written")
    return replace(manifest, parts=tuple(p for p in parts if p is not None), sealed=tuple(sealed), tail=tail)


def _reuse_parts(old: Sequence[ManifestPart], segments: Sequence[SegmentInfo]) -> tuple[
        list[ManifestPart | None], list[tuple[SegmentInfo, ...]], tuple[SegmentInfo, ...]]:
    """Old parts still listing consecutive ``segments`` are kept; a part whose first segments are
    gone gets a new part (None) for the rest; what follows the last part is the tail."""
    parts: list[ManifestPart | None] = []
    sealed: list[tuple[SegmentInfo, ...]] = []
    i = 0
    for part in old:
        if i == len(segments) or part.last_scn < segments[i].first_scn:
            continue  # retention dropped all of it
        if part.first_scn > segments[i].first_scn:
            break  # segments before this part are not in any part: they and the rest are sealed anew
        end = i
        while end < len(segments) and segments[end].last_scn <= part.last_scn:
            end += 1
        if end > i:
            whole = part.first_scn == segments[i].first_scn and end - i == part.count
            parts.append(part if whole else None)
            sealed.append(tuple(segments[i:end]))
        i = end
    return parts, sealed, tuple(segments[i:])


# (parts folder, log id, listing) -> the listing's parts and their segments; a few logs' newest listings.
_LISTINGS: dict[tuple[str, str, tuple[tuple[str, int, int, int], ...]],
                tuple[tuple[ManifestPart, ...], tuple[tuple[SegmentInfo, ...], ...]]] = {}
_LISTINGS_LOCK = threading.Lock()
_PARTS: dict[tuple[str, str, str], tuple[SegmentInfo, ...]] = {}  # (lake, key, log id) -> a part's segments


def _read_part(layout: LogLayout, key: str, log_id: str) -> tuple[SegmentInfo, ...] | None:
    """A part's segments; None when it is gone. Parsed once per process: a part is immutable (its
    name is its writer's own) and a rebuilt lake has a new log id."""
    cache_key = (layout.lake.where(), key, log_id)
    with _LISTINGS_LOCK:
        found = _PARTS.get(cache_key)
    if found is None:
        data = layout.objects.read(key)
        if data is None:
            return None
        found = tuple(SegmentInfo(**s) for s in json.loads(data))
        with _LISTINGS_LOCK:
            _PARTS[cache_key] = found
            while len(_PARTS) > 8192:  # parts of ~2M segments; retention's dropped parts age out
                del _PARTS[next(iter(_PARTS))]
    return found
