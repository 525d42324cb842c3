"""Where each table's rolling verification stands between runs (``sync.verify``): its place in the rotation
(the last key verified, kept in the lake as tagged JSON that gives back the same Python values), its passes and
repairs, and what verifying cost, which sizes the next slice."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.schema import TableSchema


@dataclass
class VerifyState:
    """Where a table's rotation stands, kept in the lake (``verify/<source>/<table>.json``) between runs."""

    cursor: list[Any] | None = None  # the last key verified (tagged JSON, ``_encode``); None: from the start
    pass_started_ms: int | None = None
    pass_runs: int = 0  # runs of the current pass so far
    last_full_ms: int | None = None  # when the last whole pass over the table ended
    last_full_runs: int | None = None  # and how many runs it took
    runs: int = 0
    repairs: int = 0  # differing keys found in all (repaired, or only reported under ``verify: report``)
    last_repair_ms: int | None = None
    rows_per_s: float | None = None  # what verifying cost last time, to size the next slice
    run_s: float | None = None  # how long the last run's capture and merge took (the share is of that)

    @staticmethod
    def key(source: str, table: str) -> str:
        return f"verify/{source}/{table}.json"

    @classmethod
    def load(cls, config: DatabusConfig, source: str, table: str) -> VerifyState:
        data = config.lake.objects.read(cls.key(source, table))
        if data is None:
            return cls()
        fields = json.loads(data)
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    def save(self, config: DatabusConfig, source: str, table: str) -> None:
        config.lake.objects.write(self.key(source, table), json.dumps(asdict(self), sort_keys=True).encode())


def slice_rows(state: VerifyState, table_rows: int, cfg: SourceConfig) -> int:
    """How many rows this run verifies: enough to cover the table in ``every_runs`` runs, up to four times that
    while verifying costs less than ``share`` of a run, and fewer (a longer rotation) when it would cost more."""
    v = cfg.verify
    target = max(1, math.ceil(table_rows / v.every_runs))
    rows = target
    if state.rows_per_s and state.run_s:
        afford = int(state.rows_per_s * state.run_s * v.share)
        rows = min(afford, 4 * target) if afford >= target else afford
    return max(v.min_rows, min(v.max_rows, rows))


def encode_key(values: Sequence[Any] | None) -> list[Any] | None:
    """Key values as JSON that ``_decode`` turns back into the same Python values."""
    if values is None:
        return None

    def one(v: Any) -> Any:
        if isinstance(v, bool | int | float | str) or v is None:
            return v
        if isinstance(v, decimal.Decimal):
            return {"decimal": str(v)}
        if isinstance(v, dt.datetime):
            return {"datetime": v.isoformat()}
        if isinstance(v, dt.date):
            return {"date": v.isoformat()}
        if isinstance(v, dt.time):
            return {"time": v.isoformat()}
        if isinstance(v, bytes | bytearray | memoryview):
            return {"bytes": base64.b64encode(bytes(v)).decode()}
        return {"text": str(v)}

    return [one(v) for v in values]


_DECODERS: dict[str, Callable[[str], Any]] = {
    "decimal": decimal.Decimal, "datetime": dt.datetime.fromisoformat, "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat, "bytes": base64.b64decode, "text": str}


def decode_key(schema: TableSchema, values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    if values is None or len(values) != len(schema.primary_key):
        return None  # no cursor yet, or the key changed: start the pass again

    def one(v: Any) -> Any:
        if isinstance(v, dict):
            (tag, text), = v.items()
            return _DECODERS[tag](text)
        return v

    return tuple(one(v) for v in values)
