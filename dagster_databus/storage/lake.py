"""The lake as the log, snapshot and consumer code see it: where it is, and its objects.

``as_lake`` accepts what callers hold (a ``Lake``, a parsed ``LakeLocation``, a local path or a
URI) so the many ``ChangeLog(config.lake, source)`` call sites need not know which store it is.
One object store client per location is shared by the process. ``lake_problem`` and
``require_writable_lake`` probe whether the lake can be written before anything is.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dagster_databus.errors import LakeNotWritableError
from dagster_databus.storage.location import LakeLocation, parse_lake
from dagster_databus.storage.objects import LakeObjects, open_objects


@dataclass(frozen=True)
class Lake:
    location: LakeLocation
    # The storage options as configured, ``${VAR}`` references unresolved: what another process (a
    # Spark task, a step in another container) is given, to resolve from its own environment.
    templates: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, text: str, base: Path | None = None, options: Mapping[str, str] | None = None) -> Lake:
        """A ``lake:`` value and its ``storage_options`` (see ``storage.location.parse_lake``)."""
        location = parse_lake(text, base=base, options=options)
        if location.path is not None:
            location = LakeLocation("file", path=location.path.expanduser().resolve(), options=location.options)
        return cls(location, dict(options or {}))

    def spec(self) -> str:
        """This lake as text another process rebuilds it from (``Lake.from_spec``); holds no secret values."""
        return json.dumps({"uri": self.location.uri if self.location.path is None else str(self.location.path),
                           "options": dict(self.templates)})

    @classmethod
    def from_spec(cls, spec: str) -> Lake:
        if not spec.startswith("{"):
            return as_lake(spec)  # a folder or a URI, as older versions passed it
        doc = json.loads(spec)
        return cls.parse(doc["uri"], options=doc["options"])

    def described(self) -> str:
        return self.location.described()

    @property
    def objects(self) -> LakeObjects:
        return _objects(self.location)

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    @property
    def path(self) -> Path | None:
        """The local folder; None for a lake in an object store."""
        return self.location.path

    def where(self, key: str = "") -> str:
        """Where ``key`` is, for messages: a local path, or the object's URI (never its credentials)."""
        if self.location.path is not None:
            return str(self.location.path / key) if key else str(self.location.path)
        return self.location.child(key) if key else self.location.uri

    def __str__(self) -> str:
        return self.where()


def as_lake(lake: Lake | LakeLocation | Path | str) -> Lake:
    """``lake`` as a Lake: a folder, a URI (credentials from the store's environment variables), or a
    ``Lake.spec()`` (its storage options with references resolved here)."""
    if isinstance(lake, Lake):
        return lake
    if isinstance(lake, LakeLocation):
        return Lake(lake)
    if isinstance(lake, str) and lake.startswith("{"):
        return Lake.from_spec(lake)
    return Lake(parse_lake(str(lake)))


def lake_problem(lake: Lake | Path) -> str | None:
    """Why the lake cannot be written, or None. Creates nothing that stays: on a local disk the nearest
    existing folder on the lake's path is probed with a temporary file, removed at once (permission
    bits do not stop root, a read-only mount or an immutable folder does); in an object store a probe
    object is created and deleted (wrong credentials, a missing bucket or a read-only policy)."""
    lake = as_lake(lake)
    if lake.path is None:
        return _store_problem(lake)
    path = lake.path
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        made = "" if existing == path else f", so the lake {path} cannot be made"
        return f"{existing} is a file, not a folder{made}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".databus-write-probe-", dir=existing)
    except OSError as exc:
        return f"{existing} cannot be written: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def _store_problem(lake: Lake) -> str | None:
    key = f"_databus-write-probe-{uuid.uuid4().hex}"
    try:
        lake.objects.create(key, b"probe")
        lake.objects.delete(key)
    except Exception as exc:  # the store's own error says which: credentials, bucket, policy, endpoint
        return f"{lake.described()} cannot be written: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return None


def require_writable_lake(lake: Lake | Path) -> None:
    problem = lake_problem(lake)
    if problem is not None:
        raise LakeNotWritableError(f"the lake {lake} is not writable: {problem}",
                                   "point lake: at a folder this user can create and write (or a bucket its "
                                   "credentials may write: storage_options, docs/deployment.md), or fix the "
                                   "folder's permissions or mount; nothing was written to the source",
                                   path=str(lake))


_OBJECTS: dict[tuple[str, tuple[tuple[str, str], ...]], LakeObjects] = {}
_OBJECTS_LOCK = threading.Lock()


def _objects(location: LakeLocation) -> LakeObjects:
    key = (location.uri, tuple(sorted(location.options.items())))
    with _OBJECTS_LOCK:
        found = _OBJECTS.get(key)
        if found is None:
            found = _OBJECTS[key] = open_objects(location)
        return found
