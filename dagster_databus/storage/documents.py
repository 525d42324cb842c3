"""Versioned documents: numbered objects ``<prefix><version>.json``, each created only if absent.

The lock-free commit of small state (the change log's manifest, consumers' checkpoints): a writer
that read version N creates N+1 with ``LakeObjects.create``; of two writers racing for it exactly one
succeeds and the other learns it lost, on a local disk and in an object store alike. What to do on
losing, which older versions to keep and how to read a document are the caller's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_databus.storage.objects import LakeObjects

_NAME = re.compile(r"^(\d+)\.json$")


class VersionedDocuments:
    """The versions under ``prefix`` (a folder: ends in '/') of ``objects``."""

    def __init__(self, objects: LakeObjects, prefix: str) -> None:
        self.objects = objects
        self.prefix = prefix

    def key(self, version: int) -> str:
        """The object key of ``version`` (zero-padded: key order is version order)."""
        return f"{self.prefix}{version:020d}.json"

    def versions(self) -> list[int]:
        """The versions present, oldest first."""
        found = []
        for info in self.objects.list(self.prefix):
            match = _NAME.match(info.key[len(self.prefix):])
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def read(self, version: int) -> bytes | None:
        """The document's bytes; None when it is gone (dropped since it was listed)."""
        return self.objects.read(self.key(version))

    def create(self, version: int, data: bytes) -> bool:
        """Write ``version`` only if no writer has; False (nothing written) when another did first."""
        return self.objects.create(self.key(version), data)

    def delete(self, version: int) -> None:
        self.objects.delete(self.key(version))
