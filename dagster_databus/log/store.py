"""Append-only change log per source: Avro segments, versioned manifests, the MaxSCN checkpoint.

Layout under ``<lake>/log/<source>/``, on a local disk or in an object store alike::

    segments/<first>-<last>-<tag>.avro     whole windows, Avro object container files
    manifest/<version>.json                the commit points: each names the newest segments, the
                                           sealed parts that list the older ones, epoch, lineage and
                                           Databus's MaxSCN checkpoint (how far capture has got)
    manifest.d/<first>-<last>-<n>-<tag>.json   sealed parts: immutable lists of older segments
    schemas/<table>/vNNNN.avsc             row schemas, versioned; a segment's records use them

Every object is written once under a name no other writer uses (``<tag>`` is random) or, for a
manifest version, created only if the name is free (``LakeObjects.create``: a hard link on a
local disk, a conditional put on a store). A commit reads the newest version N, writes its
segment, then creates version N+1; of two writers racing, one creates it and the other is told
(``ConcurrentRunError``, or ``EpochMismatchError`` when the winner switched the epoch: a stale
writer is fenced). No lock service is needed; on a local disk a ``flock`` still turns a second
writer away up front. A crash anywhere leaves only objects no version names, which the next
writer removes. Readers see only what a version names, so never a half-written window.

A version names only the newest segments; whenever that list reaches ``ChangeLog.part_segments``
entries they are sealed into an immutable part (written before the version that names it), so a
commit costs the same at 100 segments as at 100,000, and readers cache the parts they have read.
The newest ``KEEP_VERSIONS`` versions are kept, so a reader that listed them can still read one.
Logs written before versions existed (``manifest.json`` + ``checkpoint.json``) read as version 0
and move to versions with their next commit.
"""

from __future__ import annotations

import bisect
import io
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.batch import ChangeBatch, batch_schema
from dagster_databus.core.events import OPS, ChangeEvent, Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import (
    ChangeLogCorruptError,
    ChangeLogFormatError,
    ConcurrentRunError,
    EpochMismatchError,
    UnsupportedTypeError,
)
from dagster_databus.log.avro_columnar import Field, encode_blocks, write_container
from dagster_databus.log.avro_decode import Decoder, read_container
from dagster_databus.log.ddl import DdlLog
from dagster_databus.log.durable import crash_point, disk_errors, exclusive_lock
from dagster_databus.log.schemas import SchemaRegistry
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.location import LakeLocation

# 2: each event one Avro record of its table's row schema plus the event fields, every column in its
# own type (core.types); older segments listed in sealed manifest parts. Format 1 logs kept DECIMAL,
# dates and times as text, each row Avro-encoded again inside an envelope record.
FORMAT = 2
# Event fields a reader keeps beside the row's columns (the rest are for the writer and filters).
_DELIVERED = ("__scn", "__window_scn", "__seq", "__op", "__commit_ts_ms")
KeyFilter = Callable[[str, str], bool]  # (table, key as stored: a JSON array) -> deliver?

# The event's own fields, after the table's columns in each row record of a segment. Columns named
# like these are refused when the segment schema is built (they would also clash in the snapshot).
EVENT_FIELDS: list[dict[str, Any]] = [
    {"name": "__scn", "type": "long"},
    {"name": "__window_scn", "type": "long", "doc": "end SCN of the consistency window"},
    {"name": "__seq", "type": "int", "doc": "position within the window"},
    {"name": "__op", "type": "string", "doc": "i, u or d"},
    {"name": "__key", "type": "string", "doc": "primary key values as a JSON array (core.events.encode_key)"},
    {"name": "__partition", "type": "int", "doc": "crc32(key) mod 65536, for server-side filters"},
    {"name": "__commit_ts_ms", "type": "long"},
]
EVENT_FIELD_NAMES = tuple(f["name"] for f in EVENT_FIELDS)
# How the columnar encoder writes them (core.batch.EVENT_SCHEMA holds them in Arrow).
EVENT_AVRO_FIELDS = tuple(Field(f["name"], ColumnType({"int": "integer"}.get(f["type"], f["type"])), nullable=False)
                          for f in EVENT_FIELDS)
ROW_NAMESPACE = "databus.segment"
# Manifest versions kept behind the newest: a reader between listing and reading one still finds it.
KEEP_VERSIONS = 16
# An object no manifest names is removed by the next writer on a store only once this old (or once
# the log has moved past its SCNs): a writer on another machine may be about to commit it.
SWEEP_GRACE_S = 3600.0
_VERSION = re.compile(r"^(\d{20})\.json$")
_SEGMENT = re.compile(r"^(\d{20})-(\d{20})")


def _tag() -> str:
    """What makes an object's name this writer's own."""
    return uuid.uuid4().hex[:12]


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
        return cls(f"{first:020d}-{last:020d}-{len(segments)}-{_tag()}.json", first, last, len(segments))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    scn: Scn
    epoch: str
    updated_ms: int
    # Source-specific facts about the position (for MySQL: the binlog file and its creation time).
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
    # The newest segments, named in manifest.json itself; write_manifest seals them into parts as they
    # reach ChangeLog.part_segments (so a new listing may put every segment here).
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

    def knows_epoch(self, epoch: str) -> bool:
        """Whether positions of ``epoch`` belong to this log (its current epoch or one it switched from)."""
        return epoch == self.epoch or any(e["epoch"] == epoch for e in self.lineage)

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


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A change event as read back from the log, with the window it belongs to."""

    window_scn: Scn
    schema_version: int
    event: ChangeEvent


class ChangeLog:
    # How many segments a manifest version names before they are sealed into a part: bounds a commit's cost.
    part_segments = 256

    def __init__(self, lake: Lake | LakeLocation | Path | str, source: str) -> None:
        self.source = source
        self.lake = as_lake(lake)
        self.objects = self.lake.objects
        self.key = f"log/{source}/"
        # Local paths of the same objects (a lake in a store has none; these then only name things).
        self.root = Path(self.lake.where(self.key.rstrip("/")))
        self.segments_dir = self.root / "segments"
        self.parts_dir = self.root / "manifest.d"
        self.schemas = SchemaRegistry(self.lake, self.key + "schemas/", source)
        self.ddl = DdlLog(self.lake, self.key + "ddl/")

    def where(self, name: str = "") -> str:
        """Where something of this log is, for messages: a local path, or its URI in a store."""
        return self.lake.where((self.key + name).rstrip("/"))

    @property
    def manifest_path(self) -> Path:
        """Where the newest manifest version is (for messages, and tests on a local lake)."""
        versions = self._versions()
        return self.root / (f"manifest/{versions[-1]:020d}.json" if versions else "manifest.json")

    # -- reading -----------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether anything was ever committed to this log."""
        return bool(self._versions()) or self.objects.read(self.key + "manifest.json") is not None

    def manifest(self) -> Manifest:
        try:
            return self._read_manifest()
        except _PartGone:
            # Retention re-sealed the parts between our read of the manifest and of a part: read
            # the newer manifest. A part still missing then is damage (raised below).
            return self._read_manifest(final=True)

    def _version_key(self, version: int) -> str:
        return f"{self.key}manifest/{version:020d}.json"

    def _versions(self) -> list[int]:
        found = []
        for info in self.objects.list(self.key + "manifest/"):
            match = _VERSION.match(info.key.rpartition("/")[2])
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def _head(self) -> tuple[int, dict[str, Any] | None]:
        """The newest manifest version and its document (0 and the legacy manifest, or None: empty)."""
        for _ in range(5):
            versions = self._versions()
            for version in reversed(versions):
                data = self.objects.read(self._version_key(version))
                if data is not None:
                    return version, json.loads(data)
            if not versions:
                break
            # Every version listed was dropped before we read it (KEEP_VERSIONS commits meanwhile).
        legacy = self.objects.read(self.key + "manifest.json")
        if legacy is None:
            return 0, None
        doc = json.loads(legacy)
        checkpoint = self.objects.read(self.key + "checkpoint.json")
        if isinstance(doc, dict) and checkpoint is not None:
            doc["checkpoint"] = json.loads(checkpoint)
        return 0, doc

    def _read_manifest(self, final: bool = False) -> Manifest:
        version, doc = self._head()
        if doc is None:
            return Manifest(epoch=None)
        if doc.get("format") == 1:
            raise ChangeLogFormatError(
                f"the change log of source {self.source!r} ({self.where()}) was written by an earlier dagster-databus "
                "that kept DECIMAL, DATE, DATETIME and TIMESTAMP columns as text; this version keeps each column in "
                "its own type (docs/types.md) and does not mix the two",
                f"run `databus bootstrap --source {self.source}`: the old change log and snapshots move to "
                "<lake>/trash/ and the next run reads every table afresh, typed", source=self.source)
        if doc.get("format") != FORMAT:
            raise ChangeLogCorruptError(
                f"{self.where(f'manifest/{version:020d}.json')} has format {doc.get('format')!r}; this version "
                f"reads format {FORMAT}",
                "upgrade dagster-databus, or bootstrap the source into a fresh lake",
            )
        log_id = doc.get("log_id", "")  # format 2 logs get one with their first commit, before any part
        listing = tuple((p["file"], p["first_scn"], p["last_scn"], p["count"]) for p in doc.get("parts", ()))
        parts, sealed = self._parts(listing, log_id, final)
        checkpoint = doc.get("checkpoint")
        return Manifest(epoch=doc["epoch"], tail=tuple(SegmentInfo(**s) for s in doc["segments"]),
                        start_scn=Scn.parse(doc.get("start_scn", "0")), state=doc.get("state", {}),
                        lineage=tuple(doc.get("lineage", ())), log_id=log_id, parts=parts, sealed=sealed,
                        version=version, checkpoint=Checkpoint.from_json(checkpoint) if checkpoint else None)

    def _parts(self, listing: tuple[tuple[str, int, int, int], ...], log_id: str,
               final: bool) -> tuple[tuple[ManifestPart, ...], tuple[tuple[SegmentInfo, ...], ...]]:
        # A named part never changes within its log (a rebuilt lake has a new log id), so a listing
        # reads the same forever; most commits list the same parts as the one before (flat per commit).
        key = (self.lake.where(self.key), log_id, listing)
        with _LISTINGS_LOCK:  # parallel consumers read manifests from several threads
            cached = _LISTINGS.get(key)
        if cached is None:
            parts = tuple(ManifestPart(*p) for p in listing)
            cached = parts, tuple(self._part_segments(p, log_id, final) for p in parts)
            with _LISTINGS_LOCK:
                _LISTINGS[key] = cached
                while len(_LISTINGS) > 64:
                    del _LISTINGS[next(iter(_LISTINGS))]
        return cached

    def _part_segments(self, part: ManifestPart, log_id: str, final: bool) -> tuple[SegmentInfo, ...]:
        segments = _read_part(self, f"{self.key}manifest.d/{part.file}", log_id)
        if segments is None:
            if not final:
                raise _PartGone
            raise ChangeLogCorruptError(
                f"manifest part {part.file} (SCN {part.first_scn}..{part.last_scn}, {part.count} segments) is "
                f"named in {self.where('manifest')} but missing from {self.where('manifest.d')}",
                f"restore {self.where('manifest.d')} from backup, or run `databus bootstrap --source {self.source}`",
                source=self.source) from None
        held = (len(segments), segments[0].first_scn, segments[-1].last_scn) if segments else (0, None, None)
        if held != (part.count, part.first_scn, part.last_scn):
            raise ChangeLogCorruptError(
                f"manifest part {part.file} lists {held[0]} segments (SCN {held[1]}..{held[2]}), "
                f"{self.where('manifest')} says {part.count} ({part.first_scn}..{part.last_scn})",
                f"restore {self.where('manifest.d')} from backup, or run `databus bootstrap --source {self.source}`",
                source=self.source)
        return segments

    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Commit ``manifest`` as the version after the one it was read as: the change log's commit point.

        First seals what the version should no longer list inline into parts, so it names only durable
        objects. Raises ``ConcurrentRunError`` (or ``EpochMismatchError``) when another writer committed
        that version first; nothing of this commit is then part of the log. Parts it no longer names
        are deleted by the writer's next ``recover``, never here, so a reader holding the previous
        version can still read them. Returns the committed manifest.
        """
        sealed = self._seal(manifest)
        known = {p.file for p in manifest.parts}
        new_parts = [p.file for p in sealed.parts if p.file not in known]
        version = manifest.version + 1
        # Compact: the C encoder; an indented one is several times slower for the same entries.
        data = json.dumps(sealed.to_json(self.source), separators=(",", ":")).encode()
        if not self.objects.create(self._version_key(version), data):
            for file in new_parts:
                self.objects.delete(f"{self.key}manifest.d/{file}")
            raise self._lost_race(manifest)
        if version > KEEP_VERSIONS:
            self.objects.delete(self._version_key(version - KEEP_VERSIONS))
        if manifest.version == 0:  # the first version after a log of manifest.json + checkpoint.json
            self.objects.delete(self.key + "manifest.json")
            self.objects.delete(self.key + "checkpoint.json")
        return replace(sealed, version=version)

    def _parts_named_before(self, head: int, versions: Sequence[int]) -> set[str]:
        """The parts the kept versions before ``head`` name."""
        named: set[str] = set()
        for version in versions:
            data = self.objects.read(self._version_key(version)) if version < head else None
            if data is not None:
                named.update(p["file"] for p in json.loads(data).get("parts", ()))
        return named

    def _lost_race(self, mine: Manifest) -> Exception:
        theirs = self.manifest()
        if mine.epoch is not None and theirs.epoch != mine.epoch:
            return EpochMismatchError(
                f"while this writer (epoch {mine.epoch}) was writing, another switched the change log of source "
                f"{self.source!r} to epoch {theirs.epoch}: this writer is fenced off and committed nothing",
                "nothing to repair: the log continues in the new epoch; stop the old run's schedule if it is "
                "still reading the old primary", source=self.source)
        return ConcurrentRunError(
            f"another run committed version {theirs.version} of the change log of source {self.source!r} "
            f"(through SCN {theirs.last_scn}) while this one was writing: this run committed nothing",
            "runs of one source must not overlap (one schedule or sensor per source); nothing is lost, the "
            "next run continues from the log as the other run left it", source=self.source)

    def _seal(self, manifest: Manifest) -> Manifest:
        if len(manifest.sealed) == len(manifest.parts):  # as read back, plus new segments in the tail
            parts, sealed, tail = list(manifest.parts), list(manifest.sealed), manifest.tail
        else:  # a new listing (retention dropped the oldest segments): match the old parts against it
            parts, sealed, tail = self._reuse_parts(manifest.parts, manifest.segments)
        fresh = [i for i in range(len(parts)) if parts[i] is None]
        while len(tail) >= self.part_segments:
            fresh.append(len(parts))
            parts.append(None)
            sealed.append(tail[:self.part_segments])
            tail = tail[self.part_segments:]
        for i in fresh:
            parts[i] = ManifestPart.of(sealed[i])
            self.objects.create(f"{self.key}manifest.d/{parts[i].file}",
                                json.dumps([s.to_json() for s in sealed[i]], separators=(",", ":")).encode())
        if fresh:
            crash_point("manifest_part_written")
        return replace(manifest, parts=tuple(parts), sealed=tuple(sealed), tail=tail)

    @staticmethod
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

    def checkpoint(self) -> Checkpoint | None:
        return self.manifest().checkpoint

    def open_segment(self, segment: SegmentInfo, ranged: bool = False) -> BinaryIO:
        """A committed segment's bytes as a binary file (``ranged``: one that reads only the byte ranges
        asked for, for reading a part of a large segment); a missing one is damage, named."""
        key = f"{self.key}segments/{segment.file}"
        try:
            return self.objects.reader(key) if ranged else self.objects.open(key)
        except FileNotFoundError:
            raise self._missing(segment) from None

    def _listing(self, folder: str) -> dict[str, Any]:
        """name -> ObjectInfo of the objects in one of the log's folders."""
        start = len(self.key) + len(folder)
        return {info.key[start:]: info for info in self.objects.list(self.key + folder)}

    def damage(self) -> list[str]:
        """Committed segments that overlap, are missing, or differ in size or SCN range from the manifest."""
        manifest = self.manifest()
        parts = self._listing("manifest.d/") if manifest.parts else {}
        problems = [f"manifest part {p.file} (SCN {p.first_scn}..{p.last_scn}) is missing from "
                    f"{self.where('manifest.d')}"
                    for p in manifest.parts if p.file not in parts]
        stored = self._listing("segments/")
        # Headers are read back from every segment on a local disk; in a store (a request each) from the newest.
        headers = {s.file for s in (manifest.segments if self.lake.is_local else manifest.segments[-8:])}
        previous = manifest.start_scn
        for s in manifest.segments:
            if s.first_scn <= previous.value:
                problems.append(f"segment {s.file} starts at SCN {s.first_scn}, overlapping what ends at {previous}")
            if s.last_scn < s.first_scn:
                problems.append(f"segment {s.file} ends (SCN {s.last_scn}) before it starts ({s.first_scn})")
            info = stored.get(s.file)
            if info is None:
                problems.append(f"segment {s.file} (SCN {s.first_scn}..{s.last_scn}) is missing")
            elif info.size != s.bytes:
                problems.append(f"segment {s.file} is {info.size} bytes, the manifest says {s.bytes}")
            elif s.file in headers:
                with self.open_segment(s) as f:
                    meta = fastavro.reader(f).metadata
                if (meta.get("databus.first_scn"), meta.get("databus.last_scn")) != (str(s.first_scn),
                                                                                      str(s.last_scn)):
                    problems.append(f"segment {s.file} holds SCN {meta.get('databus.first_scn')}.."
                                    f"{meta.get('databus.last_scn')}, the manifest says {s.first_scn}..{s.last_scn}")
            previous = Scn(s.last_scn)
        return problems

    def require_intact(self) -> None:
        """Refuse to read or extend a log whose committed segments are damaged."""
        damaged = self.damage()
        if damaged:
            raise ChangeLogCorruptError(
                f"the change log of source {self.source!r} is damaged: " + "; ".join(damaged),
                f"restore the segments from backup, or run `databus bootstrap --source {self.source}` to "
                "start the log and snapshots afresh from the source", source=self.source)

    def continuity_problems(self) -> list[str]:
        """Damage, plus files no manifest names and a checkpoint behind the committed log."""
        manifest = self.manifest()
        problems = self.damage()
        listed = {s.file for s in manifest.segments}
        problems += [f"file {name} is not in the manifest" for name in self._listing("segments/")
                     if name not in listed]
        checkpoint = manifest.checkpoint
        if checkpoint is not None and checkpoint.scn < manifest.last_scn:
            problems.append(f"the checkpoint ({checkpoint.scn}) is behind the last committed segment "
                            f"({manifest.last_scn})")
        return problems

    def commit_ms_through(self, scn: Scn) -> int | None:
        """When the last transaction at or below ``scn`` that the log holds committed in the source (ms);
        None when the log holds none (or its segment predates commit times being kept)."""
        segments = self.manifest().segments
        at = bisect.bisect_right([s.last_scn for s in segments], scn.value) - 1
        return segments[at].last_commit_ms or None if at >= 0 else None

    def committed_scn(self) -> Scn:
        """The log's high watermark: the last SCN of the last committed segment."""
        return self.manifest().last_scn

    def read(self, since: Scn = Scn.BEGINNING, until: Scn | None = None,
             tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[LogEvent]:
        """Committed events with ``since < scn <= until``, in log order.

        ``keep(table, key_json)`` is a server-side filter on the stored key, applied before an event is built.
        """
        wanted = set(tables) if tables is not None else None
        for segment in self.manifest().between(since, until):
            yield from self._read_segment(segment, since, until, wanted, keep)

    def read_windows(self, since: Scn = Scn.BEGINNING, until: Scn | None = None,
                     tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[Window]:
        """Whole windows after ``since`` (as far as the filters leave them); ``until`` must be a window
        boundary (or None). A window the filters empty entirely is not yielded."""
        current: list[ChangeEvent] = []
        versions: list[int] = []
        current_scn: Scn | None = None
        for item in self.read(since, until, tables, keep):
            if current_scn is not None and item.window_scn is not current_scn:  # one Scn object per window
                yield Window(scn=current_scn, events=tuple(current), schema_versions=tuple(versions))
                current, versions = [], []
            current_scn = item.window_scn
            current.append(item.event)
            versions.append(item.schema_version)
        if current_scn is not None:
            yield Window(scn=current_scn, events=tuple(current), schema_versions=tuple(versions))

    def _read_segment(self, segment: SegmentInfo, since: Scn, until: Scn | None,
                      tables: set[str] | None, keep: KeyFilter | None = None) -> Iterator[LogEvent]:
        """The segment's events in log order, decoded in bulk a group of blocks at a time; each event is
        built from its row's column values (no per-record Avro decoding in Python)."""
        with self.open_segment(segment) as handle:
            try:
                metadata, blocks = read_container(handle)
                rows = self._rows_metadata(segment, metadata.get("databus.rows"))
                wanted = {name: (t, v) for name, (t, v) in rows.items() if tables is None or t in tables}
                decoder = Decoder(json.loads(metadata["avro.schema"]), {
                    name: [*(Field(c.name, c.type) for c in self.schemas.load(t, v).columns), *EVENT_AVRO_FIELDS]
                    for name, (t, v) in wanted.items()})
                window = Scn.BEGINNING  # the events of a window share one Scn object
                keys = {tv: self.schemas.load(*tv).primary_key for tv in wanted.values()}
                for group, first in Decoder.groups(blocks):
                    events = self._events(decoder.decode_blocks(group, first), wanted, since, until, keep)
                    for _, table, version, row in events:
                        scn, window_scn = row.pop("__scn"), row.pop("__window_scn")
                        if window_scn != window.value:
                            window = Scn(window_scn)
                        seq, op, commit_ts_ms = row.pop("__seq"), row.pop("__op"), row.pop("__commit_ts_ms")
                        key = tuple(row[k] for k in keys[table, version])
                        yield LogEvent(window_scn=window, schema_version=version, event=ChangeEvent(
                            scn=window if scn == window.value else Scn(scn), seq=seq, table=table, op=OPS[op],
                            key=key, row=row, commit_ts_ms=commit_ts_ms))
            except ValueError as exc:
                raise ChangeLogCorruptError(
                    f"segment {segment.file} of source {self.source!r} cannot be decoded: {exc}",
                    "restore the segment from backup, or bootstrap the source", source=self.source) from None

    def _events(self, decoded: list[tuple[str, pa.RecordBatch, np.ndarray]], wanted: dict[str, tuple[str, int]],
                since: Scn, until: Scn | None, keep: KeyFilter | None) -> list[tuple[int, str, int, dict[str, Any]]]:
        """(position, table, version, row with event fields) of the decoded records to deliver, in log order."""
        out: list[tuple[int, str, int, dict[str, Any]]] = []
        for name, batch, positions in decoded:
            table, version = wanted[name]
            scn = batch.column("__scn")
            mask = pc.greater(scn, since.value)
            if until is not None:
                mask = pc.and_(mask, pc.less_equal(scn, until.value))
            if keep is not None:
                mask = pc.and_(mask, pa.array([keep(table, k) for k in batch.column("__key").to_pylist()]))
            selected = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            if len(selected) < batch.num_rows:
                batch, positions = batch.take(pa.array(selected)), positions[selected]
            schema = self.schemas.load(table, version)
            images = schema.rows_from_arrow(batch.select([*schema.column_names, *_DELIVERED]))
            out += zip(positions.tolist(), repeat(table), repeat(version), images, strict=False)
        if len(decoded) > 1:
            out.sort(key=itemgetter(0))
        return out

    def _missing(self, segment: SegmentInfo) -> ChangeLogCorruptError:
        return ChangeLogCorruptError(
            f"segment {segment.file} (SCN {segment.first_scn}..{segment.last_scn}) is listed in "
            f"{self.where('manifest')} but missing from {self.where('segments')}",
            "restore the segment from backup, or bootstrap the source", source=self.source)

    def _rows_metadata(self, segment: SegmentInfo, rows: str | None) -> dict[str, tuple[str, int]]:
        """Each row record's full name → (table, schema version), from the segment's ``databus.rows``."""
        if rows is None:
            raise ChangeLogCorruptError(
                f"segment {segment.file} of source {self.source!r} has no databus.rows metadata: it was not "
                "written by this version's log writer", "restore the segment from backup, or run "
                f"`databus bootstrap --source {self.source}`", source=self.source)
        return {f"{ROW_NAMESPACE}.{n}": (t, v) for n, (t, v) in json.loads(rows).items()}

    # -- writing -----------------------------------------------------------------------

    def writer(self, refuse_damage: bool = True) -> LogWriter:
        """The log's single writer; ``refuse_damage=False`` only for a bootstrap, which sets it all aside."""
        return LogWriter(self, refuse_damage)


class LogWriter:
    """The writer of a source's log. Use as a context manager. Two writers racing cannot both commit
    (see the module's docstring); on a local disk the second is also turned away up front by a lock."""

    def __init__(self, log: ChangeLog, refuse_damage: bool = True) -> None:
        self.log = log
        self.refuse_damage = refuse_damage
        self._lock = exclusive_lock(
            log.root / ".lock", f"the change log of source {log.source!r}",
            "wait for the other capture of this source to finish; runs of one source must not overlap",
        ) if log.lake.is_local else None
        self.versions: dict[str, int] = {}
        self._segment: tuple[dict[str, int], Any, dict[str, tuple[str, int]]] | None = None
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

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.__exit__(*exc)

    def recover(self) -> list[str]:
        """Delete objects no manifest names (a crash mid-publish, a writer that lost a race); roll the
        checkpoint forward; refuse to write after committed segments that are missing or damaged.

        Holding the local lock, everything unnamed is a dead writer's. In a store another writer may be
        about to commit what it just wrote, so only what the log has moved past or what is older than
        ``SWEEP_GRACE_S`` goes."""
        if self.refuse_damage:
            self.log.require_intact()
        else:
            try:
                self.log.manifest()
            except ChangeLogFormatError:
                return []  # a log of an older format: the bootstrap opening this writer sets it aside whole
        manifest = self.log.manifest()
        log, key = self.log, self.log.key
        exclusive = self._lock is not None
        stale_before = time.time() - SWEEP_GRACE_S

        def dead(info: Any, passed: bool) -> bool:
            return exclusive or passed or info.modified_s < stale_before

        removed = []
        listed = {s.file for s in manifest.segments}
        for name, info in log._listing("segments/").items():
            match = _SEGMENT.match(name)
            if name not in listed and dead(info, match is not None and int(match.group(1)) <= manifest.last_scn.value):
                removed.append(f"segments/{name}")
        named = {p.file for p in manifest.parts}
        unnamed = {name: info for name, info in log._listing("manifest.d/").items() if name not in named}
        versions = log._versions()
        # Parts an earlier version named were replaced by retention (a reader that still holds that
        # version reads the newest instead); the rest were sealed by a commit that crashed or lost.
        retired = log._parts_named_before(manifest.version, versions) if unnamed and not exclusive else set()
        removed += [f"manifest.d/{name}" for name, info in unnamed.items() if dead(info, name in retired)]
        removed += [f"manifest/{v:020d}.json" for v in versions if v <= manifest.version - KEEP_VERSIONS]
        for name in removed:
            log.objects.delete(key + name)
        if log.lake.path is not None:
            for path in log.root.glob("**/.tmp-*"):
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
        manifest = self.log.manifest()
        if self._seen is not None and manifest.version != self._seen:
            raise ConcurrentRunError(
                f"another run committed to the change log of source {self.log.source!r} while this one was "
                f"running (version {manifest.version}, through SCN {manifest.last_scn}): this run stops here, "
                "with what it committed before kept", "runs of one source must not overlap (one schedule or "
                "sensor per source); nothing is lost, the next run continues from the log as the other left it",
                source=self.log.source)
        return manifest

    def adopt(self) -> None:
        """Take the log as it is now as this writer's own (a bootstrap that just set the old log aside)."""
        self._seen = self.log.manifest().version

    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Commit ``manifest`` (read with ``current``) as the next version, keeping the checkpoint."""
        committed = self.log.write_manifest(manifest)
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
                 "to_epoch": epoch, "resume_scn": str(resume), "switched_ms": _now_ms(), **record}
        self._commit(replace(manifest, state=dict(state), lineage=(*manifest.lineage, entry)), resume, epoch, state,
                     switch=True)

    def advance(self, scn: Scn, epoch: str, state: dict[str, str]) -> None:
        """Move the checkpoint past source positions that produced no events for this log."""
        manifest = self.current()
        checkpoint = manifest.checkpoint
        if checkpoint is not None and scn <= checkpoint.scn:
            raise ValueError(f"checkpoint {checkpoint.scn} may only move forward, not to {scn}")
        self._commit(manifest, scn, epoch, state)

    def _commit(self, manifest: Manifest, scn: Scn, epoch: str, state: dict[str, str],
                switch: bool = False) -> Manifest:
        """Commit ``manifest`` (as read, with changes) with the checkpoint at ``scn``: one new version."""
        if not switch and manifest.epoch is not None and manifest.epoch != epoch:
            raise self._wrong_epoch(manifest, epoch)
        checkpoint = Checkpoint(scn, epoch, _now_ms(), dict(state))
        with disk_errors("committing the change-log manifest", self.log.root):
            return self.write_manifest(replace(manifest, epoch=epoch, checkpoint=checkpoint))

    def register_schemas(self, schemas: Iterable[Any], guard_defaults: bool = False) -> dict[str, int]:
        self.versions = {s.table: self.log.schemas.register(s, guard_defaults) for s in schemas}
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
        return self._publish(manifest, batch, batch.commit_order(), (windows[0].first_scn, windows[-1].scn),
                             len(windows), epoch, state)

    def append_batch(self, batch: ChangeBatch, epoch: str, state: dict[str, str] | None = None) -> SegmentInfo:
        """Publish a columnar batch of whole windows as one segment (``append`` without per-event objects)."""
        manifest = self._manifest_for(epoch)
        schemas = self.schemas()
        for table, rows in batch.tables.items():
            if table not in schemas or rows.schema != batch_schema(schemas[table]):
                raise ValueError(f"table {table!r}: the batch's columns are not those of its registered schema "
                                 f"(register_schemas first): {rows.schema}")
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
        return self._publish(manifest, batch, order, (Scn(int(scn[0])), Scn(int(window[-1]))), len(starts) + 1,
                             epoch, state)

    def _manifest_for(self, epoch: str) -> Manifest:
        manifest = self.current()
        if manifest.epoch is not None and manifest.epoch != epoch:
            raise self._wrong_epoch(manifest, epoch)
        return manifest

    def _wrong_epoch(self, manifest: Manifest, epoch: str) -> EpochMismatchError:
        return EpochMismatchError(
            f"the change log of source {self.log.source!r} belongs to epoch {manifest.epoch}; a writer "
            f"from epoch {epoch} may not append to it",
            "bootstrap the source into a fresh log (see docs/operations.md)", source=self.log.source)

    def _publish(self, manifest: Manifest, batch: ChangeBatch, order: np.ndarray | None, scns: tuple[Scn, Scn],
                 windows: int, epoch: str, state: dict[str, str] | None) -> SegmentInfo:
        first, last = scns
        name = f"{first.value:020d}-{last.value:020d}-{_tag()}.avro"
        key = f"{self.log.key}segments/{name}"
        schema, rows = self._segment_schema()
        blocks = self._encode(batch, rows, order)
        buffer = io.BytesIO()
        # zstd level 1: a third of deflate's time (level 1) for a smaller file, and faster to read.
        write_container(buffer, schema, blocks, codec="zstandard", level=1, metadata={
            "databus.source": self.log.source, "databus.epoch": epoch, "databus.first_scn": str(first),
            "databus.last_scn": str(last), "databus.rows": json.dumps(rows)})
        data = buffer.getvalue()
        with disk_errors(f"writing change-log segment {name}", self.log.segments_dir):
            self.log.objects.create(key, data, staged=lambda: crash_point("segment_written"))
        crash_point("segment_published")
        tables = {table: len(events) for table, events in batch.tables.items() if len(events)}
        info = SegmentInfo(
            file=name, first_scn=first.value, last_scn=last.value, windows=windows,
            events=sum(tables.values()), bytes=len(data), created_ms=_now_ms(), tables=tables,
            last_commit_ms=int(batch.window_ends()[1][-1]),
        )
        # A log's first segment names it, unless start_at did (logs older than ids keep none).
        log_id = manifest.log_id or ("" if not manifest.empty else uuid.uuid4().hex)
        try:
            self._commit(replace(manifest, log_id=log_id, tail=(*manifest.tail, info)), last, epoch, state or {})
        except (ConcurrentRunError, EpochMismatchError):
            self.log.objects.delete(key)  # lost the race: the segment is nobody's
            raise
        crash_point("manifest_committed")  # the same version holds the checkpoints
        return info

    def schemas(self) -> dict[str, TableSchema]:
        """The registered schema of each table, as change batches for ``append_batch`` hold its columns."""
        return {table: self.log.schemas.load(table, version) for table, version in self.versions.items()}

    def _segment_schema(self) -> tuple[list[dict[str, Any]], dict[str, tuple[str, int]]]:
        """A union of one row record per registered table (its columns, then EVENT_FIELDS), named
        r0, r1, ... (table names need not be Avro names), and each record's (table, version)."""
        if self._segment is None or self._segment[0] != self.versions:
            records, rows = [], {}
            for i, (table, version) in enumerate(sorted(self.versions.items())):
                record = self.log.schemas.record(table, version)
                clash = [f["name"] for f in record["fields"] if f["name"] in EVENT_FIELD_NAMES]
                if clash:
                    raise UnsupportedTypeError(
                        f"table {table!r} of source {self.log.source!r} has columns named {', '.join(clash)}, which "
                        "the change log and the snapshots reserve for event fields",
                        "rename the columns in the source, or leave the table out of the config",
                        source=self.log.source, table=table)
                records.append({**record, "name": f"r{i}", "namespace": ROW_NAMESPACE,
                                "fields": [*record["fields"], *EVENT_FIELDS]})
                rows[f"r{i}"] = (table, version)
            self._segment = (dict(self.versions), records, rows)
        return self._segment[1], self._segment[2]

    def _encode(self, batch: ChangeBatch, rows: dict[str, tuple[str, int]], order: np.ndarray | None) -> list[pa.Array]:
        """Every event of ``batch`` as its Avro record (its table's union branch), in commit order, in blocks."""
        branch = {table: i for i, (table, _) in enumerate(rows.values())}
        schemas = self.schemas()
        return encode_blocks([(events, [*(Field(c.name, c.type) for c in schemas[table].columns), *EVENT_AVRO_FIELDS],
                               branch[table]) for table, events in batch.tables.items()], order)

# (parts folder, log id, listing) -> the listing's parts and their segments; a few logs' newest listings.
_LISTINGS: dict[tuple[str, str, tuple[tuple[str, int, int, int], ...]],
                tuple[tuple[ManifestPart, ...], tuple[tuple[SegmentInfo, ...], ...]]] = {}
_LISTINGS_LOCK = threading.Lock()


class _PartGone(Exception):
    """A manifest part vanished while being read (retention re-sealed it): read the manifest again."""


_PARTS: dict[tuple[str, str, str], tuple[SegmentInfo, ...]] = {}  # (lake, key, log id) -> a part's segments


def _read_part(log: ChangeLog, key: str, log_id: str) -> tuple[SegmentInfo, ...] | None:
    """A part's segments; None when it is gone. Parsed once per process: a part is immutable (its
    name is its writer's own) and a rebuilt lake has a new log id."""
    cache_key = (log.lake.where(), key, log_id)
    with _LISTINGS_LOCK:
        found = _PARTS.get(cache_key)
    if found is None:
        data = log.objects.read(key)
        if data is None:
            return None
        found = tuple(SegmentInfo(**s) for s in json.loads(data))
        with _LISTINGS_LOCK:
            _PARTS[cache_key] = found
            while len(_PARTS) > 8192:  # parts of ~2M segments; retention's dropped parts age out
                del _PARTS[next(iter(_PARTS))]
    return found


def avro_conversions(schema: TableSchema, direction: str) -> list[tuple[str, Any]]:
    """(column, converter) for the columns whose canonical value is not what fastavro reads or writes."""
    return [(c.name, c.type.to_avro if direction == "to" else c.type.from_avro) for c in schema.columns
            if c.type.kind in ("time", "number")]


def _now_ms() -> int:
    return int(time.time() * 1000)

