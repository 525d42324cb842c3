"""The binlog row kernels compiled (or loaded from numba's cache) without a server, for ``databus warm``: each is
called as capture calls it (``rows``: the scan of an event as it arrives and of a transaction's bytes, the key
check; ``values``: every column type's cutter), with no rows, so numba compiles the same specializations a
large change set needs and caches them. A MySQL source's first large change set then loads them instead of
compiling them (seconds each)."""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from dagster_databus.core.schema import Column
from dagster_databus.core.types import ColumnType
from dagster_databus.sources.mysql.charsets import ServerCharsets
from dagster_databus.sources.mysql.wire import kernels as k
from dagster_databus.sources.mysql.wire import tablemap as t
from dagster_databus.sources.mysql.wire.values import column_type, cutter, source_type

_CHARSETS = ServerCharsets({45: "utf8mb4", t.BINARY_COLLATION: "binary"}, {})  # the ids of the columns below
# A column of every layout the cutters tell apart; the rest of a table map's detail does not change a kernel's
# argument types.
_COLUMNS = (
    t.BinlogColumn("tiny", t.TINY), t.BinlogColumn("short", t.SHORT, unsigned=True), t.BinlogColumn("int24", t.INT24),
    t.BinlogColumn("long", t.LONG), t.BinlogColumn("longlong", t.LONGLONG, unsigned=True),
    t.BinlogColumn("float", t.FLOAT), t.BinlogColumn("double", t.DOUBLE), t.BinlogColumn("year", t.YEAR),
    t.BinlogColumn("decimal", t.NEWDECIMAL, precision=12, scale=2), t.BinlogColumn("date", t.DATE),
    t.BinlogColumn("datetime", t.DATETIME), t.BinlogColumn("datetime2", t.DATETIME2, scale=6),
    t.BinlogColumn("timestamp", t.TIMESTAMP), t.BinlogColumn("timestamp2", t.TIMESTAMP2, scale=3),
    t.BinlogColumn("time", t.TIME), t.BinlogColumn("time2", t.TIME2, scale=2),
    t.BinlogColumn("flag", t.BIT, bits=1), t.BinlogColumn("bits", t.BIT, bits=12),
    t.BinlogColumn("enum", t.ENUM, pack_length=1, members=("a", "b")),
    t.BinlogColumn("set", t.SET, pack_length=1, members=("a", "b")),
    t.BinlogColumn("json", t.JSON, pack_length=4), t.BinlogColumn("varchar", t.VARCHAR, collation=45, max_length=80),
    t.BinlogColumn("char", t.STRING, collation=45, max_length=8),
    t.BinlogColumn("binary", t.STRING, collation=t.BINARY_COLLATION, max_length=8),
    t.BinlogColumn("blob", t.BLOB, collation=t.BINARY_COLLATION, pack_length=2),
    t.BinlogColumn("text", t.BLOB, collation=45, pack_length=2),
)


def _refuse(index: int, value: object, reason: str) -> NoReturn:
    raise AssertionError(f"warm: no value to refuse, yet value {index} was refused ({value!r}: {reason})")


def warm_binlog_kernels() -> int:
    """Run every binlog row kernel once with no rows; how many column layouts were cut."""
    empty = np.zeros(0, np.int64)
    # An event's bytes as they arrive are read-only (``Transactions.add``); a transaction's gathered bytes are not.
    k.count(np.frombuffer(memoryview(b""), np.uint8), 1, np.zeros(0, np.int64))
    data, cells = np.zeros(0, np.uint8), np.zeros((0, len(_COLUMNS)), np.int64)
    k.scan(data, empty, empty, empty, np.array([c.width for c in _COLUMNS], np.int64), cells, cells, True)
    k.keys_changed(data, cells, cells, np.flatnonzero(np.zeros(0, np.bool_)), np.zeros(1, np.int64),
                   np.zeros(0, np.bool_))
    columns = [(col, Column(col.name, column_type(col) or _never(), source_type(col))) for col in _COLUMNS]
    # MariaDB's UUID: its 16 bytes in the row image, its text in the snapshot.
    columns.append((t.BinlogColumn("uuid", t.STRING, collation=t.BINARY_COLLATION, max_length=16),
                    Column("uuid", ColumnType("string"), "uuid")))
    for col, column in columns:
        cutter(col, column, "null", _CHARSETS)(data, empty, empty, _refuse)
        cutter(col, column, "error", _CHARSETS)(data, empty, empty, _refuse)
    return len(columns)


def _never() -> NoReturn:
    raise AssertionError("warm: every column here has a product type")


def warm() -> str:
    """``databus warm``'s step for MySQL sources (the registry's ``warm``): what was warmed."""
    return f"binlog row kernels ({warm_binlog_kernels()} column layouts)"
