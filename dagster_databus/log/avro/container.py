"""Avro object container files, the change log's segment format: the header (magic, metadata,
sync marker) and the framing of data blocks, read (``read_container``) and written
(``write_container``) here; the records inside the blocks are the encoder's and decoder's.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from itertools import islice
from typing import BinaryIO, Literal, TypeVar, overload

import numpy as np
import pyarrow as pa

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same library fastavro reads zstandard blocks with
    from backports import zstd

MAGIC = b"Obj\x01"
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Block:
    """One data block of a container: its record count and its decompressed record bytes."""

    count: int
    data: bytes
    offset: int  # where the block starts in the file, for error messages


def read_container(f: BinaryIO, start: int = 0, end: int | None = None) -> tuple[dict[str, str], Iterator[Block]]:
    """The container's metadata (``avro.schema``, ``avro.codec``, the writer's own keys; text, as
    fastavro's ``reader.metadata`` holds it) and an iterator over its blocks, read lazily from ``f``.

    With ``start``/``end``, only the blocks that begin at a byte offset in [start, end): the first is
    found by its sync marker, so readers of consecutive ranges (several tasks of one large file) each
    read whole blocks and together every block exactly once. ``f`` must be seekable then.

    ``ValueError`` for what is not an Avro object container, a codec other than ``null``, ``deflate``
    and ``zstandard``, and (while iterating) truncated blocks or a wrong sync marker.
    """
    reader = _Reader(f)
    if reader.read(4) != MAGIC:
        raise ValueError("not an Avro object container file: it does not start with Obj\\x01")
    raw: dict[str, bytes] = {}
    while count := reader.long():  # an Avro map: blocks of entries up to an empty one
        if count < 0:  # a negative count is followed by the block's size in bytes
            reader.long()
            count = -count
        for _ in range(count):
            key = reader.blob()
            raw[key.decode()] = reader.blob()
    sync = reader.read(16)
    try:
        metadata = {key: value.decode() for key, value in raw.items()}
    except UnicodeDecodeError as e:
        raise ValueError(f"container metadata that is not UTF-8 text: {e}") from None
    codec = metadata.get("avro.codec", "null")
    if codec not in _DECOMPRESS:
        raise ValueError(f"container codec {codec!r}: this decoder reads {', '.join(_DECOMPRESS)}")
    if start > reader.position and not reader.skip_past(sync, start - len(sync)):
        return metadata, iter(())
    return metadata, _blocks(reader, sync, codec, end)


def _blocks(reader: _Reader, sync: bytes, codec: str, end: int | None = None) -> Iterator[Block]:
    decompress = _DECOMPRESS[codec]
    while True:
        offset = reader.position
        if end is not None and offset >= end:
            return
        count = reader.long(eof_ok=True)
        if count is None:
            return
        size = reader.long()
        if count < 0 or size < 0:
            raise ValueError(f"block at byte {offset}: negative record count {count} or size {size}")
        packed = reader.read(size)
        if reader.read(16) != sync:
            raise ValueError(f"block at byte {offset}: the sync marker after it is not the file's")
        try:
            data = decompress(packed)
        except Exception as e:  # zlib.error, zstd.ZstdError: damaged data, whatever the library
            raise ValueError(f"block at byte {offset}: {codec} data does not decompress: {e}") from None
        yield Block(count, data, offset)


_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "null": lambda data: data,
    "deflate": lambda data: zlib.decompress(data, -15),  # raw deflate, as Avro specifies
    "zstandard": lambda data: zstd.decompress(data),
}


class _Reader:
    """Header and block framing from a file: a few small reads per block, so plain Python."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.position = 0

    def read(self, size: int) -> bytes:
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError(f"the container ends at byte {self.position + len(data)}, inside what starts "
                             f"at byte {self.position}")
        self.position += size
        return data

    @overload
    def long(self, eof_ok: Literal[False] = False) -> int: ...

    @overload
    def long(self, eof_ok: bool) -> int | None: ...

    def long(self, eof_ok: bool = False) -> int | None:
        """A zigzag varint; None at the end of the file when ``eof_ok``."""
        u, shift = 0, 0
        while True:
            byte = self.f.read(1)
            if not byte:
                if eof_ok and not shift:
                    return None
                raise ValueError(f"the container ends at byte {self.position}, inside a number")
            self.position += 1
            u |= (byte[0] & 0x7F) << shift
            if byte[0] < 0x80:
                return (u >> 1) ^ -(u & 1)
            shift += 7
            if shift > 63:
                raise ValueError(f"a number longer than 10 bytes at byte {self.position}")

    def skip_past(self, marker: bytes, start: int, chunk: int = 1 << 16) -> bool:
        """Move to just after the first ``marker`` at or after byte ``start``; False at the end of the file."""
        self.f.seek(start)
        position, tail = start, b""
        while data := self.f.read(chunk):
            window = tail + data
            found = window.find(marker)
            if found >= 0:
                self.position = position - len(tail) + found + len(marker)
                self.f.seek(self.position)
                return True
            tail = window[-(len(marker) - 1):]
            position += len(data)
        return False

    def blob(self) -> bytes:
        size = self.long()
        if size < 0:
            raise ValueError(f"negative length {size} at byte {self.position}")
        return self.read(size)


def write_container(f: BinaryIO, schema: object, blocks: Iterable[pa.Array], metadata: Mapping[str, str],
                    codec: str = "zstandard", level: int = 1) -> None:
    """An Avro object container file of already-encoded records, one Avro block per array of ``blocks``
    (taken a wave at a time: a lazy ``blocks`` is never held whole)."""
    if codec not in _CODECS:
        raise ValueError(f"codec {codec!r}: this writer compresses with {', '.join(_CODECS)}")
    sync = os.urandom(16)
    meta = {"avro.schema": json.dumps(schema, separators=(",", ":")), "avro.codec": codec, **metadata}
    header = bytearray(MAGIC)
    header += _varint_bytes(len(meta))
    for key, value in meta.items():
        for part in (key.encode(), value.encode()):
            header += _varint_bytes(len(part)) + part
    header += b"\x00" + sync
    f.write(header)
    pack = _CODECS[codec]
    # Both codecs let go of the GIL while they compress: blocks are packed on every core at once.
    pending = iter(blocks)
    while wave := list(islice(pending, os.cpu_count() or 1)):
        for records, block in zip(wave, on_cores(lambda records: pack(_data(records), level), wave), strict=True):
            f.write(_varint_bytes(len(records)) + _varint_bytes(len(block)))
            f.write(block)
            f.write(sync)


def _data(records: pa.Array) -> memoryview:
    """The encoded bytes of ``records`` (a slice of a binary array), without copying."""
    if not len(records):
        return memoryview(b"")
    offsets = np.frombuffer(records.buffers()[1], np.int64, 2, records.offset * 8)
    last = np.frombuffer(records.buffers()[1], np.int64, 1, (records.offset + len(records)) * 8)
    return memoryview(records.buffers()[2])[offsets[0]:last[0]]


def _deflate(block: memoryview, level: int) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw deflate, as Avro specifies
    return packer.compress(block) + packer.flush()


def _zstandard(block: memoryview, level: int) -> bytes:
    return zstd.compress(block, level=level)


def _null(block: memoryview, level: int) -> bytes:
    return bytes(block)


_CODECS = {"zstandard": _zstandard, "deflate": _deflate, "null": _null}


def on_cores(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``fn`` of each item, on every core at once when there are several (``fn`` lets go of the GIL)."""
    return list(_pool().map(fn, items)) if len(items) > 1 else [fn(i) for i in items]


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="avro-columnar")


def _varint_bytes(value: int) -> bytes:
    """One zigzag varint (Avro long), for headers and block framing."""
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)
