"""Compare source tables with their snapshots: row by row (demo, tests), and at one SCN by fingerprint
with the differing keys and columns named (the reconciliation check); schema drift between the two."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.fingerprint import Fingerprint, buckets, digests, part, row_texts, value_text
from dagster_databus.core.progress import Progress, Ticker, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import json_value

if TYPE_CHECKING:
    import pyarrow.dataset as ds

    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import Source


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


@dataclass(frozen=True, slots=True)
class RowDifference:
    """One key whose row differs between the source and the snapshot."""

    key: tuple[Any, ...]
    what: str  # "missing" (in the source, not in the snapshot), "extra" (the reverse), "differs"
    columns: tuple[str, ...] = ()  # for "differs": the columns whose values differ
    source: Mapping[str, Any] | None = None
    snapshot: Mapping[str, Any] | None = None

    def describe(self) -> str:
        key = ", ".join(map(repr, self.key))
        if self.what != "differs":
            where = "source" if self.what == "missing" else "snapshot"
            return f"key ({key}): only in the {where}"
        cells = "; ".join(f"{c}: source {_show(self.source, c)} vs snapshot {_show(self.snapshot, c)}"
                          for c in self.columns)
        return f"key ({key}): {cells}"

    def as_json(self) -> dict[str, Any]:
        return {"key": [json_value(k) for k in self.key], "what": self.what, "columns": list(self.columns),
                **({c: {"source": json_value((self.source or {}).get(c)),
                        "snapshot": json_value((self.snapshot or {}).get(c))} for c in self.columns})}


def _show(row: Mapping[str, Any] | None, column: str) -> str:
    text = repr((row or {}).get(column))
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True)
class Reconciliation:
    table: str
    scn: Scn  # the one SCN both sides were brought to
    reconciled: bool  # False: the two sides could not be brought to one SCN (reason says why)
    reason: str
    source_rows: int = 0
    snapshot_rows: int = 0
    source_hash: int = 0
    snapshot_hash: int = 0
    differing_buckets: int = 0
    compared_buckets: int = 0  # of those, the ones whose rows were compared (at most MAX_LOCATE_BUCKETS)
    differences: tuple[RowDifference, ...] = ()  # the first differing keys of those buckets, in key order
    pushed_down: bool = False  # the source's side was computed by its database
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return self.reconciled and (self.source_rows, self.source_hash) == (self.snapshot_rows, self.snapshot_hash)


MAX_LOCATE_BUCKETS = 16  # differing buckets whose rows are compared one by one
MAX_DIFFERENCES = 10


def reconcile_table(config: DatabusConfig, source_cfg: SourceConfig, table: str,
                    progress: Progress = quiet) -> Reconciliation:
    """Compare source and snapshot at one SCN by fingerprint (``core.fingerprint``), and on a mismatch
    name the first differing keys and columns.

    The source's fingerprint is read consistently at its current SCN S (an aggregate query where the
    database can compute it); the snapshot's is computed from its Delta files a batch at a time, with
    the change log's events up to S applied on the way. Both take memory bounded by a batch, not the
    table. Rows are compared one by one only in the (few) key buckets whose fingerprints differ.
    """
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources import open_source

    started = time.monotonic()
    source = open_source(source_cfg, config.lake)
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    if snap.applied_scn() is None:
        return Reconciliation(table, Scn.BEGINNING, False, "the snapshot has not been bootstrapped yet")
    log = ChangeLog(config.lake, source_cfg.name)
    src = source.reads.fingerprint(table, progress)  # the SCN now; the source's side goes on in the background
    side = _SnapshotSide(config, log, snap, src.schema, progress)
    with snap.damage_named(f"run `databus snapshot --source {source_cfg.name} --tables {table}`, then reconcile "
                           "again"):
        problem = side.bring_to(src.scn)
        if problem:
            return Reconciliation(table, src.scn, False, problem, pushed_down=src.pushed_down)
        mine = side.fingerprint()  # meanwhile
    differing = src.fingerprint.differing(mine)
    differences: tuple[RowDifference, ...] = ()
    if differing:
        progress(f"{table}: {len(differing)} of {len(mine.counts)} key buckets differ; comparing the rows of "
                 f"{min(len(differing), MAX_LOCATE_BUCKETS)} of them")
        differences = _locate(source, side, src.schema, differing[:MAX_LOCATE_BUCKETS])
    return Reconciliation(table, src.scn, True, "compared at one SCN", src.fingerprint.rows, mine.rows,
                          src.fingerprint.digest, mine.digest, len(differing),
                          min(len(differing), MAX_LOCATE_BUCKETS), differences, src.pushed_down,
                          round(time.monotonic() - started, 3))


class _SnapshotSide:
    """The snapshot brought to an SCN: its Delta rows at the applied SCN A, minus the keys that changed
    in (A, S], plus those keys' newest images (the change log's events, reduced per key)."""

    def __init__(self, config: DatabusConfig, log: ChangeLog, snap: DeltaSnapshot, schema: TableSchema,
                 progress: Progress) -> None:
        self.config, self.log, self.snap, self.schema, self.progress = config, log, snap, schema, progress
        self.scn = self.applied = Scn.BEGINNING
        self.dataset: ds.Dataset | None = None
        self.changed: list[pa.RecordBatch] = []
        self.changed_keys = np.zeros(0, np.uint64)

    def bring_to(self, scn: Scn) -> str | None:
        """Pin the Delta version and gather the changes up to ``scn``; a reason when that cannot be done."""
        from dagster_databus.dataplane.reduce import NewestPerKey
        from dagster_databus.log.columns import change_schema, table_changes

        pinned = self.snap.pinned_dataset()
        if pinned is None:
            return "the snapshot has not been bootstrapped yet"
        applied, self.dataset = pinned
        missing = [c for c in self.schema.column_names if c not in self.dataset.schema.names]
        if missing:
            return (f"the snapshot lacks column(s) {', '.join(missing)} the source has (see the schema_drift "
                    "check): re-bootstrap the table")
        if applied > scn:
            return (f"the snapshot (at SCN {applied}) moved past the source read (SCN {scn}) while checking: "
                    "run the check again")
        checkpoint = self.log.checkpoint()
        reach = max(checkpoint.scn if checkpoint else Scn.BEGINNING, applied)
        if reach < scn:
            return (f"the source is at SCN {scn} but the change log only reaches {reach}: capture first (or run "
                    "the check when the source is quiet)")
        self.scn, self.applied = scn, applied
        reducer = NewestPerKey(change_schema(self.schema), self.schema.primary_key,
                               self.config.merge.memory_mb << 20, self.config.merge.spill_dir)
        self.changed = list(reducer.extend(table_changes(self.log, self.schema, applied, scn)).results())
        keys = [digests(row_texts(b, self.schema, columns=())[0]) for b in self.changed]
        self.changed_keys = np.sort(np.concatenate(keys)) if keys else np.zeros(0, np.uint64)
        return None

    def batches(self) -> Iterator[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
        """(rows, their buckets, row digests) of the snapshot at ``scn``, a batch at a time."""
        dataset = self.dataset
        assert dataset is not None, "bring_to pins the snapshot first"
        ticker = Ticker(self.progress, f"{self.schema.table}: fingerprinting the snapshot", "rows",
                        dataset.count_rows())
        for batch in dataset.to_batches(columns=list(self.schema.column_names), batch_size=65_536):
            ticker.add(batch.num_rows)
            yield from self._digested(batch, drop_changed=True)
        ticker.finish()
        for batch in self.changed:
            live = batch.filter(pc.not_equal(batch.column("__op"), "d"))
            yield from self._digested(live.select(self.schema.column_names), drop_changed=False)

    def _digested(self, batch: pa.RecordBatch, drop_changed: bool
                  ) -> Iterator[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
        if not batch.num_rows:
            return
        key, row = row_texts(batch, self.schema)
        key_buckets, row_digests = buckets(key), digests(row)
        if drop_changed and len(self.changed_keys):
            kept = ~np.isin(digests(key), self.changed_keys)
            batch, key_buckets, row_digests = batch.filter(pa.array(kept)), key_buckets[kept], row_digests[kept]
        yield batch, key_buckets, row_digests

    def fingerprint(self) -> Fingerprint:
        result = Fingerprint()
        for _, key_buckets, row_digests in self.batches():
            result.add(key_buckets, row_digests)
        return result

    def rows_in(self, chosen: Sequence[int]) -> pa.Table:
        wanted = np.array(sorted(chosen), np.int64)
        kept = [batch.filter(pa.array(np.isin(b, wanted))) for batch, b, _ in self.batches()]
        target = self.schema.arrow(with_meta=False)
        return pa.Table.from_batches([b.select(self.schema.column_names).cast(target) for b in kept], target)


def _locate(source: Source, side: _SnapshotSide, schema: TableSchema,
            buckets: Sequence[int]) -> tuple[RowDifference, ...]:
    """The first differing rows in ``buckets``: both sides read again at one newer SCN, compared by key."""
    read = source.reads.rows_in_buckets(schema.table, buckets)
    source_rows = pa.Table.from_batches(list(read.batches), schema.arrow(with_meta=False))
    if side.bring_to(read.scn) is not None:
        return ()  # the log does not reach the second read; the counts and hashes still stand
    return compare_tables(schema, source_rows, side.rows_in(buckets))[:MAX_DIFFERENCES]


def compare_tables(schema: TableSchema, source: pa.Table, snapshot: pa.Table) -> tuple[RowDifference, ...]:
    """Rows of two tables (``schema``'s columns) that differ, compared by canonical value, in key order."""
    def index(data: pa.Table) -> dict[bytes, int]:
        return {k: i for i, k in enumerate(row_texts(data, schema, columns=())[0].to_pylist())}

    def cells(data: pa.Table) -> dict[str, list[bytes]]:
        return {c.name: part(value_text(data.column(c.name).combine_chunks(), c.type), c.type).to_pylist()
                for c in schema.columns}

    src_index, snap_index = index(source), index(snapshot)
    src_cells, snap_cells = cells(source), cells(snapshot)
    src_rows, snap_rows = source.to_pylist(), snapshot.to_pylist()
    out = []
    for key in src_index.keys() | snap_index.keys():
        i, j = src_index.get(key), snap_index.get(key)
        row = src_rows[i] if i is not None else snap_rows[j]
        key_values = tuple(row[k] for k in schema.primary_key)
        if j is None:
            out.append(RowDifference(key_values, "missing", source=src_rows[i]))
        elif i is None:
            out.append(RowDifference(key_values, "extra", snapshot=snap_rows[j]))
        else:
            columns = tuple(c for c in schema.column_names if src_cells[c][i] != snap_cells[c][j])
            if columns:
                out.append(RowDifference(key_values, "differs", columns, src_rows[i], snap_rows[j]))
    return tuple(sorted(out, key=lambda d: tuple(map(_sortable, d.key))))


def _sortable(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


def schema_drift(config: DatabusConfig, source_cfg: SourceConfig, table: str) -> list[str]:
    """Differences between the source table's columns and the snapshot's, each described."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.sources import open_source

    schema = open_source(source_cfg, config.lake).catalog.preflight()[table]
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    if not snap.exists():
        return [f"{table}: no snapshot yet"]
    expected = {f.name: str(f.type) for f in schema.arrow(with_meta=False)}
    # The table's schema as a read would type it, from the Delta log: no data file is read (a sync runs this).
    actual = {f.name: str(f.type) for f in snap.dataset().schema if not f.name.startswith("__")}
    out = [f"{table}.{c}: in the source, not in the snapshot" for c in expected if c not in actual]
    out += [f"{table}.{c}: in the snapshot, not in the source" for c in actual if c not in expected]
    out += [f"{table}.{c}: {actual[c]} in the snapshot, {expected[c]} from the source"
            for c in expected if c in actual and actual[c] != expected[c]]
    return out
