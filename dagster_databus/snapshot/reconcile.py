"""Compare source tables with their snapshots: row by row (demo, tests), and at one SCN with an
order-independent hash (the reconciliation check); schema drift between the two."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import json_value


@dataclass(frozen=True, slots=True)
class Comparison:
    table: str
    source_rows: int
    snapshot_rows: int
    missing: int  # in the source, not in the snapshot
    extra: int  # in the snapshot, not in the source
    different: int  # same key, different values
    examples: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.different == 0


def compare_rows(table: str, key: Sequence[str], source: Iterable[Mapping[str, Any]],
                 snapshot: Iterable[Mapping[str, Any]]) -> Comparison:
    def index(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in key): {c: v for c, v in r.items() if not c.startswith("__")} for r in rows}

    src, snap = index(source), index(snapshot)
    missing = [k for k in src if k not in snap]
    extra = [k for k in snap if k not in src]
    different = [k for k in src if k in snap and src[k] != snap[k]]
    examples = tuple(
        [f"missing {k}" for k in missing[:3]] + [f"extra {k}" for k in extra[:3]]
        + [f"differs {k}: source {src[k]} vs snapshot {snap[k]}" for k in different[:3]]
    )
    return Comparison(table=table, source_rows=len(src), snapshot_rows=len(snap), missing=len(missing),
                      extra=len(extra), different=len(different), examples=examples)


def row_digest(row: Mapping[str, Any]) -> int:
    """A 64-bit digest of one row's source columns (metadata columns ignored)."""
    body = json.dumps({k: json_value(v) for k, v in sorted(row.items()) if not k.startswith("__")},
                      sort_keys=True, separators=(",", ":"))
    return int(hashlib.sha256(body.encode()).hexdigest()[:16], 16)


def table_fingerprint(rows: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(row count, order-independent hash): the sum of row digests modulo 2**64."""
    count, total = 0, 0
    for row in rows:
        count += 1
        total = (total + row_digest(row)) % (1 << 64)
    return count, total


@dataclass(frozen=True, slots=True)
class Reconciliation:
    table: str
    scn: Scn  # the one SCN both sides were brought to
    reconciled: bool  # False: the change log does not reach the source's SCN yet
    reason: str
    source_rows: int = 0
    snapshot_rows: int = 0
    source_hash: int = 0
    snapshot_hash: int = 0

    @property
    def equal(self) -> bool:
        return self.reconciled and (self.source_rows, self.source_hash) == (self.snapshot_rows, self.snapshot_hash)


def reconcile_table(config: DatabusConfig, source_cfg: SourceConfig, table: str) -> Reconciliation:
    """Compare source and snapshot at one SCN: the source is read consistently at its current SCN S,
    and the snapshot is brought from its applied SCN to S with the change log's events."""
    from dagster_databus.log.store import ChangeLog
    from dagster_databus.snapshot.delta import DeltaSnapshot
    from dagster_databus.sources import open_source

    source = open_source(source_cfg, config.lake)
    read = source.snapshot(table)
    columns = read.schema.column_names
    # Both sides as canonical values (core.types), the form change-log events carry.
    source_rows = [r for b in read.batches for r in read.schema.rows_from_arrow(b.select(columns))]
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    applied = snap.applied_scn()
    if applied is None:
        return Reconciliation(table, read.scn, False, "the snapshot has not been bootstrapped yet")
    log = ChangeLog(config.lake, source_cfg.name)
    checkpoint = log.checkpoint()
    reach = max(checkpoint.scn if checkpoint else Scn.BEGINNING, applied)
    if reach < read.scn:
        return Reconciliation(table, read.scn, False,
                              f"the source is at SCN {read.scn} but the change log only reaches {reach}: capture "
                              "first (or run the check when the source is quiet)")
    key = read.schema.primary_key
    data = snap.read()
    data = data.select([c for c in columns if c in data.column_names])
    rows = {tuple(r[k] for k in key): r for r in read.schema.rows_from_arrow(data)}
    if applied < read.scn:
        for item in log.read(since=applied, until=read.scn, tables=[table]):
            event = item.event
            if event.op.value == "d":
                rows.pop(tuple(event.key), None)
            else:
                rows[tuple(event.key)] = {c: event.row.get(c) for c in columns}
    src_count, src_hash = table_fingerprint(source_rows)
    snap_count, snap_hash = table_fingerprint({c: r.get(c) for c in columns} for r in rows.values())
    return Reconciliation(table, read.scn, True, "compared at one SCN", src_count, snap_count, src_hash, snap_hash)


def schema_drift(config: DatabusConfig, source_cfg: SourceConfig, table: str) -> list[str]:
    """Differences between the source table's columns and the snapshot's, each described."""
    from dagster_databus.snapshot.delta import DeltaSnapshot
    from dagster_databus.sources import open_source

    schema = open_source(source_cfg, config.lake).preflight()[table]
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    if not snap.exists():
        return [f"{table}: no snapshot yet"]
    expected = {f.name: str(f.type) for f in schema.arrow(with_meta=False)}
    actual = {f.name: str(f.type) for f in snap.read().schema if not f.name.startswith("__")}
    out = [f"{table}.{c}: in the source, not in the snapshot" for c in expected if c not in actual]
    out += [f"{table}.{c}: in the snapshot, not in the source" for c in actual if c not in expected]
    out += [f"{table}.{c}: {actual[c]} in the snapshot, {expected[c]} from the source"
            for c in expected if c in actual and actual[c] != expected[c]]
    return out
