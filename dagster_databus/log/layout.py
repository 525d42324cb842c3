"""Where a source's change log lives in the lake, and the listings every log module reads.

``LogLayout`` is the small value the log's modules take (``manifest``, ``segments``, ``reader``,
``integrity``, ``writer``) instead of ``ChangeLog`` itself: the lake and its objects, the log's key
prefix ``log/<source>/``, the source's name, and the two reads of what is stored (a folder's
listing, the manifest's versions). It holds no state of its own, so any number of readers and the
one writer can share it. ``log.changelog.ChangeLog``, the entry point other packages use, builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dagster_databus.storage.documents import VersionedDocuments
from dagster_databus.storage.lake import Lake
from dagster_databus.storage.objects import LakeObjects, ObjectInfo


@dataclass(frozen=True, slots=True)
class LogLayout:
    """A source's log in a lake: ``key`` is its prefix (``log/<source>/``), every object of it is under it."""

    lake: Lake
    source: str
    objects: LakeObjects
    key: str
    manifests: VersionedDocuments  # manifest/<version>.json: the commit points

    @classmethod
    def of(cls, lake: Lake, source: str) -> LogLayout:
        key = f"log/{source}/"
        objects = lake.objects
        return cls(lake, source, objects, key, VersionedDocuments(objects, key + "manifest/"))

    @property
    def root(self) -> Path:
        """The log's local folder (a lake in a store has none: this then only names it)."""
        return Path(self.lake.where(self.key.rstrip("/")))

    def where(self, name: str = "") -> str:
        """Where something of this log is, for messages: a local path, or its URI in a store."""
        return self.lake.where((self.key + name).rstrip("/"))

    def segment_key(self, file: str) -> str:
        """The object key of the segment named ``file``."""
        return f"{self.key}segments/{file}"

    def listing(self, folder: str) -> dict[str, ObjectInfo]:
        """name -> ObjectInfo of the objects in one of the log's folders (``folder`` ends in '/')."""
        start = len(self.key) + len(folder)
        return {info.key[start:]: info for info in self.objects.list(self.key + folder)}

    def versions(self) -> list[int]:
        """The manifest versions stored, oldest first."""
        return self.manifests.versions()
