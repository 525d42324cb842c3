"""Append-only change log per source: Avro segments, versioned manifests, the MaxSCN checkpoint.

Layout under ``<lake>/log/<source>/``, on a local disk or in an object store alike::

    segments/<first>-<last>-<tag>.avro     whole windows, Avro object container files (``log.segments``)
    manifest/<version>.json                the commit points (``log.manifest``): each names the newest
                                           segments, the sealed parts that list the older ones, epoch,
                                           lineage and Databus's MaxSCN checkpoint (how far capture has got)
    manifest.d/<first>-<last>-<n>-<tag>.json   sealed parts: immutable lists of older segments
    schemas/<table>/vNNNN.avsc             row schemas, versioned; a segment's records use them

Every object is written once under a name no other writer uses (``<tag>`` is random) or, for a
manifest version, created only if the name is free (``LakeObjects.create``: a hard link on a
local disk, a conditional put on a store). No lock service is needed; on a local disk a ``flock``
still turns a second writer away up front. A crash anywhere leaves only objects no version names,
which the next writer removes (``log.writer``). Readers see only what a version names, so never a
half-written window (``log.reader``).

``ChangeLog`` is the one entry point: other packages open a source's log with it, read it, check
it, and get its single writer from it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import fastavro

from dagster_databus.core.events import Window
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ChangeLogCorruptError
from dagster_databus.log import reader
from dagster_databus.log.ddl import DdlLog
from dagster_databus.log.manifest import Checkpoint, Manifest, SegmentInfo, commit_manifest, read_manifest
from dagster_databus.log.schemas import SchemaRegistry
from dagster_databus.log.writer import LogWriter
from dagster_databus.storage.documents import VersionedDocuments
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    from dagster_databus.log.reader import KeyFilter, LogEvent


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
        self.manifests = VersionedDocuments(self.objects, self.key + "manifest/")

    def where(self, name: str = "") -> str:
        """Where something of this log is, for messages: a local path, or its URI in a store."""
        return self.lake.where((self.key + name).rstrip("/"))

    @property
    def manifest_path(self) -> Path:
        """Where the newest manifest version is (for messages, and tests on a local lake)."""
        versions = self._versions()
        return self.root / (f"manifest/{versions[-1]:020d}.json" if versions else "manifest.json")

    def exists(self) -> bool:
        """Whether anything was ever committed to this log."""
        return bool(self._versions()) or self.objects.read(self.key + "manifest.json") is not None

    def manifest(self) -> Manifest:
        """The newest committed version of the manifest."""
        return read_manifest(self)

    def _versions(self) -> list[int]:
        return self.manifests.versions()

    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Commit ``manifest`` as the next version (``log.manifest.commit_manifest``); the writer's to call."""
        return commit_manifest(self, manifest)

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
        """Committed events with ``since < scn <= until``, in log order (``log.reader.read_events``)."""
        return reader.read_events(self, since, until, tables, keep)

    def read_windows(self, since: Scn = Scn.BEGINNING, until: Scn | None = None,
                     tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[Window]:
        """Whole windows after ``since`` (``log.reader.read_windows``)."""
        return reader.read_windows(self, since, until, tables, keep)

    def _missing(self, segment: SegmentInfo) -> ChangeLogCorruptError:
        return ChangeLogCorruptError(
            f"segment {segment.file} (SCN {segment.first_scn}..{segment.last_scn}) is listed in "
            f"{self.where('manifest')} but missing from {self.where('segments')}",
            "restore the segment from backup, or bootstrap the source", source=self.source)

    def writer(self, refuse_damage: bool = True) -> LogWriter:
        """The log's single writer; ``refuse_damage=False`` only for a bootstrap, which sets it all aside."""
        return LogWriter(self, refuse_damage)

