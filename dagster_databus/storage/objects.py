"""Byte-level access to the lake's files, on a local disk or an object store.

Every file the log and the consumers write is either immutable under a unique name (segments,
manifest versions) or small state replaced whole (checkpoints). ``create`` (write only if the name
is free) is the commit primitive: atomic on a local disk (a hard link to a fully written, fsynced
temporary file) and on object stores (a conditional put), so two writers racing for the same name
cannot both succeed, with no lock service.
"""

from __future__ import annotations

import builtins  # ``list`` in these classes' annotations is their method
import contextlib
import io
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from dagster_databus.storage.durable import fsync_dir
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    from obstore.store import ClientConfig


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the lake's root, '/'-separated
    size: int
    modified_s: float = 0.0  # last modification, seconds since the epoch


class LakeObjects(Protocol):
    location: LakeLocation

    def read(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none."""

    def open(self, key: str) -> BinaryIO:
        """The object as a binary file to read; FileNotFoundError when there is none."""

    def write(self, key: str, data: bytes) -> None:
        """Create or replace the object whole: readers see the old bytes or the new, never a part."""

    def put_file(self, key: str, local: Path) -> None:
        """Store a finished local file as the object (moved, on a local disk; uploaded in parts, in a store),
        durable when this returns."""

    def reader(self, key: str) -> BinaryIO:
        """The object as a seekable file that reads only the byte ranges asked for (Parquet footers and
        column chunks); FileNotFoundError when there is none."""

    def create(self, key: str, data: bytes | BinaryIO, staged: Callable[[], None] | None = None) -> bool:
        """Write the object (bytes, or a file read from where it stands) only if the name is free; False (and
        nothing written) when it is taken. ``staged`` runs when the bytes are durable but not yet under the name
        (a test seam)."""

    def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        """Objects whose key starts with ``prefix`` (a folder: end it with '/'), in key order."""

    def delete(self, key: str) -> None:
        """Remove the object; no error when it is already gone."""

    def folders(self, prefix: str) -> builtins.list[str]:
        """The names of the folders directly inside ``prefix`` (a folder: end it with '/'), sorted."""

    def move(self, source: str, target: str) -> None:
        """Move an object (a rename on a local disk; a server-side copy, then a delete, in a store)."""


def open_objects(location: LakeLocation) -> LakeObjects:
    if location.is_local:
        assert location.path is not None
        return LocalObjects(location)
    return StoreObjects(location)


class LocalObjects:
    """A folder on a local (POSIX) disk; writes are fsynced before they are visible under their name."""

    def __init__(self, location: LakeLocation) -> None:
        assert location.path is not None
        self.location, self.root = location, location.path

    def _path(self, key: str) -> Path:
        return self.root / key

    def read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def open(self, key: str) -> BinaryIO:
        return open(self._path(key), "rb")

    def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._staged(path, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def put_file(self, key: str, local: Path) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(local, path)
        fsync_dir(path.parent)

    def reader(self, key: str) -> BinaryIO:
        return open(self._path(key), "rb")

    def create(self, key: str, data: bytes | BinaryIO, staged: Callable[[], None] | None = None) -> bool:
        path = self._path(key)
        tmp = self._staged(path, data)
        if staged is not None:
            staged()
        try:
            os.link(tmp, path)  # fails if the name is taken, atomically
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        fsync_dir(path.parent)
        return True

    def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return []
        found = []
        for path in base.rglob("*"):
            key = path.relative_to(self.root).as_posix()
            if path.is_file() and key.startswith(prefix) and not path.name.startswith(".tmp-"):
                stat = path.stat()
                found.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        return sorted(found, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def folders(self, prefix: str) -> builtins.list[str]:
        base = self._path(prefix)
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def move(self, source: str, target: str) -> None:
        path = self._path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._path(source), path)

    @staticmethod
    def _staged(path: Path, data: bytes | BinaryIO) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{path.name}-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                shutil.copyfileobj(data, f, 1 << 20)
            f.flush()
            os.fsync(f.fileno())
        return tmp


class StoreObjects:
    """An S3, GCS or Azure bucket through ``obstore`` (the Rust ``object_store`` crate that delta-rs
    also uses); credentials and endpoint from the storage options or the store's environment variables."""

    def __init__(self, location: LakeLocation) -> None:
        self.location = location
        self.store = _store(location)
        self.root = f"{location.prefix}/" if location.prefix else ""

    def read(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self.store, self.root + key).bytes())
        except FileNotFoundError:
            return None

    def open(self, key: str) -> BinaryIO:
        data = self.read(key)
        if data is None:
            raise FileNotFoundError(self.location.child(key))
        return io.BytesIO(data)

    def write(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, self.root + key, data)

    def put_file(self, key: str, local: Path) -> None:
        import obstore

        obstore.put(self.store, self.root + key, local)  # in parts when large
        local.unlink()

    def reader(self, key: str) -> BinaryIO:
        import obstore

        return _Ranged(obstore.open_reader(self.store, self.root + key))  # type: ignore[return-value]

    def create(self, key: str, data: bytes | BinaryIO, staged: Callable[[], None] | None = None) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        if staged is not None:
            staged()
        try:
            # One conditional PUT: a multipart upload cannot refuse a taken name, so a file is sent whole.
            body = data if isinstance(data, bytes) else data.read()
            obstore.put(self.store, self.root + key, body, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        import obstore

        # object_store lists by whole path segments: list the folder, then keep the prefix's matches.
        folder = (self.root + prefix).rpartition("/")[0]
        found = [ObjectInfo(m["path"][len(self.root):], m["size"], m["last_modified"].timestamp())
                 for m in obstore.list(self.store, folder or None).collect()]
        return sorted((o for o in found if o.key.startswith(prefix)), key=lambda o: o.key)

    def delete(self, key: str) -> None:
        import obstore

        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self.store, self.root + key)

    def folders(self, prefix: str) -> builtins.list[str]:
        import obstore

        found = obstore.list_with_delimiter(self.store, (self.root + prefix).rstrip("/") or None)
        return sorted(p.rstrip("/").rpartition("/")[2] for p in found["common_prefixes"])

    def move(self, source: str, target: str) -> None:
        import obstore

        obstore.copy(self.store, self.root + source, self.root + target)
        obstore.delete(self.store, self.root + source)


class _Ranged(io.RawIOBase):
    """An object read by byte ranges (obstore's reader) as a Python binary file, which pyarrow can seek."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._reader.seek(offset, whence))

    def tell(self) -> int:
        return int(self._reader.tell())

    def readinto(self, buffer: Any) -> int:
        data = self._reader.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        return bytes(self._reader.read(size) if size >= 0 else self._reader.readall())

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()


def _store(location: LakeLocation) -> Any:
    """The bucket's store: the options delta-rs takes (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ...) are
    the ``object_store`` crate's own names, so one ``storage_options`` block serves both; what they leave
    out comes from the store's environment variables."""
    from obstore.store import from_url

    options = {k.lower(): v for k, v in location.options.items()}
    allow_http = options.pop("aws_allow_http", options.pop("allow_http", "")) == "true"
    client: ClientConfig = {"allow_http": True} if allow_http else {}
    if "aws_endpoint_url" in options:
        options["aws_endpoint"] = options.pop("aws_endpoint_url")
    # An abfss://container@account... URI names the storage account itself.
    url = f"abfss://{location.authority}" if location.authority else f"{location.scheme}://{location.bucket}"
    # The options are the user's own names (storage_options), which obstore checks when it builds the store.
    return from_url(url, config=options or None,  # type: ignore[arg-type]  # checked by obstore, as above
                    client_options=client or None)
