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
it, and get its single writer from it. It builds the log's ``LogLayout`` (``log.layout``: the lake's
objects, the key prefix, the source, listings) and hands that, never itself, to the modules that do
the work (``manifest``, ``segments``, ``reader``, ``integrity``, ``writer``); none of them imports this one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from dagster_databus.core.events import Window
from dagster_databus.core.scn import Scn
from dagster_databus.log import integrity, reader
from dagster_databus.log.compat import MANIFEST_V0, has_manifest_v0
from dagster_databus.log.ddl import DdlLog
from dagster_databus.log.layout import LogLayout
from dagster_databus.log.manifest import (
    PART_SEGMENTS,
    Checkpoint,
    Manifest,
    SegmentInfo,
    commit_manifest,
    read_manifest,
)
from dagster_databus.log.schemas import SchemaRegistry
from dagster_databus.log.segments import open_segment
from dagster_databus.log.writer import LogWriter
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    from dagster_databus.log.reader import KeyFilter, LogEvent
    from dagster_databus.storage.objects import ObjectInfo


class ChangeLog:
    # How many segments a manifest version names before they are sealed into a part: bounds a commit's cost.
    # A writer commits with the value its log had when it was opened.
    part_segments = PART_SEGMENTS

    def __init__(self, lake: Lake | LakeLocation | Path | str, source: str) -> None:
        self.source = source
        self.lake = as_lake(lake)
        self.layout = LogLayout.of(self.lake, source)
        self.objects = self.layout.objects
        self.key = self.layout.key
        # Local paths of the same objects (a lake in a store has none; these then only name things).
        self.root = self.layout.root
        self.segments_dir = self.root / "segments"
        self.parts_dir = self.root / "manifest.d"
        self.schemas = SchemaRegistry(self.lake, self.key + "schemas/", source)
        self.ddl = DdlLog(self.lake, self.key + "ddl/")
        self.manifests = self.layout.manifests

    def where(self, name: str = "") -> str:
        """Where something of this log is, for messages: a local path, or its URI in a store."""
        return self.layout.where(name)

    @property
    def manifest_path(self) -> Path:
        """Where the newest manifest version is (for messages, and tests on a local lake)."""
        versions = self.layout.versions()
        return self.root / (f"manifest/{versions[-1]:020d}.json" if versions else MANIFEST_V0)

    def exists(self) -> bool:
        """Whether anything was ever committed to this log."""
        return bool(self.layout.versions()) or has_manifest_v0(self.objects, self.key)

    def manifest(self) -> Manifest:
        """The newest committed version of the manifest."""
        return read_manifest(self.layout)

    def _versions(self) -> list[int]:
        return self.layout.versions()

    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Commit ``manifest`` as the next version (``log.manifest.commit_manifest``); the writer's to call."""
        return commit_manifest(self.layout, manifest, self.part_segments)

    def checkpoint(self) -> Checkpoint | None:
        return self.manifest().checkpoint

    def open_segment(self, segment: SegmentInfo, ranged: bool = False) -> BinaryIO:
        """A committed segment's bytes as a binary file (``log.segments.open_segment``); a missing one is
        damage, named."""
        return open_segment(self.layout, segment, ranged)

    def _listing(self, folder: str) -> dict[str, ObjectInfo]:
        """name -> ObjectInfo of the objects in one of the log's folders."""
        return self.layout.listing(folder)

    def damage(self) -> list[str]:
        """Committed segments that overlap, are missing, or differ in size or SCN range from the manifest."""
        return integrity.damage(self.layout)

    def require_intact(self) -> None:
        """Refuse to read or extend a log whose committed segments are damaged."""
        integrity.require_intact(self.layout)

    def continuity_problems(self) -> list[str]:
        """Damage, plus files no manifest names and a checkpoint behind the committed log."""
        return integrity.continuity_problems(self.layout)

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
        return reader.read_events(self.layout, self.schemas, since, until, tables, keep)

    def read_windows(self, since: Scn = Scn.BEGINNING, until: Scn | None = None,
                     tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[Window]:
        """Whole windows after ``since`` (``log.reader.read_windows``)."""
        return reader.read_windows(self.layout, self.schemas, since, until, tables, keep)

    def writer(self, refuse_damage: bool = True) -> LogWriter:
        """The log's single writer; ``refuse_damage=False`` only for a bootstrap, which sets it all aside."""
        return LogWriter(self.layout, self.schemas, refuse_damage, self.part_segments)
