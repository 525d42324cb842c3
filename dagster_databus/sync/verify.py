"""Rolling verification: every sync compares a slice of each table's keys with the source at one SCN and repairs
what differs (``verify: repair``), so that no difference outlives a rotation of the table's keys.

A run reads its slices first, before capture: per table one key range in the source's key order (after where the
last slice ended), in its own consistent read at a position P, and it pins the snapshot's Delta version (applied
SCN A <= P). Once capture has logged past P and the merge is done, the pinned snapshot is brought to P (the log's
events in (A, P] reduced per key, deleted and soft-deleted rows left out) and compared with the read row by row,
by the canonical texts reconciliation hashes (``core.fingerprint``): equal values in the source's type never
differ. A key that differs and has no event after P is repaired with the source's image at P, folded into the
snapshot and its history in one commit each. Keys with events after P took those events' full images; the next
pass looks at them again.

Extra rows (in the snapshot, not in the source) are looked for where this process orders keys as the source does
(numbers, dates, timestamps: ``dataplane.refresh.ORDERED_ALIKE``); a string key's range is the source's collation's,
so there only the keys the source read returned are compared, and the full ``reconcile`` finds extra rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.slices import SliceRows, digested, key_texts, snapshot_keys
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.sources.base import KeyRange, RowSelection
from dagster_databus.spark.properties import with_spark_properties
from dagster_databus.sync.reconcile import RowDifference, compare_tables
from dagster_databus.sync.rotation import VerifyState, decode_key, encode_key, slice_rows

if TYPE_CHECKING:
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.engines.contract import MergeEngine
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import Source

MAX_NAMED = 10  # differing keys named in a result (all are repaired)


@dataclass(frozen=True)
class Verified:
    """One table's verification in one run."""

    table: str
    policy: str
    scn: Scn | None = None  # where the source was read (None: not compared, ``skipped`` says why)
    keys: str = ""  # the slice, described
    rows: int = 0  # source rows compared
    different: int = 0  # keys that differed (and had no later event)
    repaired: int = 0
    moved_on: int = 0  # differing keys that events after the read changed again: left to them
    differences: tuple[RowDifference, ...] = ()  # the first few
    seconds: float = 0.0
    skipped: str | None = None
    failed: bool = False  # ``skipped`` is an error, not a reason to wait (the check warns)
    state: VerifyState = field(default_factory=VerifyState)

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c for d in self.differences for c in d.columns))


@dataclass
class _Slice:
    table: str
    schema: TableSchema
    state: VerifyState
    bounds: KeyRange
    scn: Scn
    rows: pa.Table  # the source's, in ``schema``'s columns
    version: int  # the snapshot's Delta version pinned at the read
    applied: Scn
    read_s: float
    last: bool  # the slice runs to the end of the key space: the pass ends with it
    plan: SliceRows  # the pinned version's files that may hold the slice
    pinned: Future[pa.Table]  # their rows' digests, computed by the engine while capture and the merge run


class RollingVerification:
    """One run's verification of a source: ``read`` before capture, ``settle`` after the merge. The snapshot's side
    of each slice is digested by ``engine`` (Spark tasks, in the spark engine) from the read on, in a thread of its
    own, so that it overlaps capture and the merge."""

    def __init__(self, config: DatabusConfig, source_cfg: SourceConfig, tables: Sequence[str], engine: MergeEngine,
                 progress: Progress = quiet) -> None:
        self.config, self.source_cfg, self.engine, self.progress = config, source_cfg, engine, progress
        self.digesting = ThreadPoolExecutor(1, thread_name_prefix=f"databus-verify-{source_cfg.name}")
        self.tables = [t for t in tables if source_cfg.verify_policy(t) != "off"]
        self.slices: dict[str, _Slice] = {}
        self.outcomes: dict[str, Verified] = {}
        self.started = time.monotonic()
        self.verify_s = 0.0

    def read(self) -> None:
        """Each table's slice read from the source (skipped, with the reason, where it cannot be)."""
        if not self.tables:
            return
        from dagster_databus.sources import open_source

        source: Source | None = None
        for table in self.tables:
            began = time.monotonic()
            try:
                source = source or open_source(self.source_cfg, self.config.lake)
                found = self._read(source, table)
            except Exception as exc:  # verification never stops the sync: the check warns with the error
                found = Verified(table, self.source_cfg.verify_policy(table), skipped=f"the slice could not be read: "
                                 f"{exc}", failed=True)
            if isinstance(found, _Slice):
                found.read_s = time.monotonic() - began  # all of it: the source opened, the table sized and read
                self.slices[table] = found
            else:
                self.outcomes[table] = found
            self.verify_s += time.monotonic() - began

    def _read(self, source: Source, table: str) -> _Slice | Verified:
        from dagster_databus.dataplane.commit import location
        from dagster_databus.dataplane.delta import DeltaSnapshot
        from dagster_databus.dataplane.files import TableFiles
        from dagster_databus.sources import read_range

        policy = self.source_cfg.verify_policy(table)
        snap = DeltaSnapshot(self.config.lake, self.source_cfg.name, table)
        try:
            # The version pinned and the SCN it reflects from one load of the Delta log: read apart, a merge
            # committing in between pairs the version with the next one's SCN, and the pinned rows lack its events.
            delta, applied = snap.bootstrapped()
        except SnapshotMissingError:
            return Verified(table, policy, skipped="the snapshot is not bootstrapped yet")
        version = delta.version()
        state = VerifyState.load(self.config, self.source_cfg.name, table)
        schema = source.catalog.schemas()[table]
        after = decode_key(schema, state.cursor)
        # The files' row counts from the Delta log (no data read): soft-deleted rows too, close enough to size a slice.
        counts = pa.table(delta.get_add_actions(flatten=True)).column("num_records")
        rows = slice_rows(state, int(pc.sum(counts).as_py() or 0), self.source_cfg)
        read = source.reads.ranges(table, rows, RowSelection(KeyRange(after, None)), first=1)
        bounds = read.ranges[0]
        got = read_range(read, 0)
        target = schema.arrow(with_meta=False)
        data = pa.Table.from_batches([b.select(schema.column_names).cast(target) for b in got.batches], target)
        self.progress(f"{table}: verifying {data.num_rows:,} rows ({RowSelection(bounds).describe()}) read at "
                      f"SCN {got.scn}")
        plan = SliceRows.of(schema, bounds, data).in_files(
            location(snap), TableFiles.of(delta, schema.primary_key, schema.arrow(with_meta=True)))
        pinned = self.digesting.submit(with_spark_properties(partial(self.engine.slice_digests, progress=quiet)), plan)
        return _Slice(table, schema, state, bounds, got.scn, data, version, applied, 0.0, bounds.through is None,
                      plan, pinned)

    def settle(self) -> list[Verified]:
        """Compare each slice read with the snapshot at its SCN, repair (policy ``repair``), record the rotation."""
        run_s = time.monotonic() - self.started - self.verify_s
        for table, piece in self.slices.items():
            began = time.monotonic()
            try:
                outcome = self._settle(piece)
            except Exception as exc:
                outcome = Verified(table, self.source_cfg.verify_policy(table),
                                   skipped=f"the comparison failed: {exc}", failed=True)
            seconds = piece.read_s + time.monotonic() - began
            state = replace(outcome.state, run_s=round(run_s, 3),
                            rows_per_s=round(max(piece.rows.num_rows, 1) / max(seconds, 1e-3), 1)) \
                if outcome.scn is not None else piece.state  # a slice not compared says nothing of the pace
            state.save(self.config, self.source_cfg.name, table)
            self.outcomes[table] = replace(outcome, seconds=round(seconds, 3), state=state)
        self.close()
        return [self.outcomes[t] for t in self.tables if t in self.outcomes]

    def close(self) -> None:
        """Stop digesting (a run that failed before ``settle``): what has not started never will."""
        self.digesting.shutdown(wait=False, cancel_futures=True)

    def _settle(self, piece: _Slice) -> Verified:
        from dagster_databus.dataplane.delta import DeltaSnapshot
        from dagster_databus.log.changelog import ChangeLog

        policy = self.source_cfg.verify_policy(piece.table)
        log = ChangeLog(self.config.lake, self.source_cfg.name)
        # The log holds every change up to its checkpoint: where capture read through, past its last window when
        # the source's newest writes are not the tables' (a watermark read's signal row).
        checkpoint = log.checkpoint()
        until = max(log.committed_scn(), checkpoint.scn if checkpoint else Scn.BEGINNING)
        described = RowSelection(piece.bounds).describe()
        if until < piece.scn:
            return Verified(piece.table, policy, keys=described, skipped=(
                f"the change log reaches SCN {until}, not yet the read's SCN {piece.scn}: compared next run"))
        ddl = [r for r in log.ddl.records() if r.table == piece.table and piece.applied < r.scn]
        if ddl:
            return Verified(piece.table, policy, keys=described, skipped=(
                f"a schema change at SCN {ddl[0].scn} since the slice's snapshot: compared next run"))
        snap = DeltaSnapshot(self.config.lake, self.source_cfg.name, piece.table)
        side = _SnapshotSlice(self.config, log, snap, piece)
        found, theirs = side.differing()
        repaired, moved_on = 0, []
        if found:
            # Under the table's lock, so that no merge applies events after ``until`` between the look for them
            # and the repair, which would otherwise put an older image over them.
            with snap.lock(f"snapshot {snap.source}.{snap.table}", "wait for the other merge of this table to finish"):
                later = side.changed_after(max(until, snap.applied_scn() or until))
                moved_on = [d for d in found if d.key_text in later]
                found = [d for d in found if d.key_text not in later]
                if found and policy == "repair":
                    repaired = _repair(self.config, snap, piece, theirs, found)
        first = found[:MAX_NAMED]
        named = compare_tables(piece.schema, piece.rows.take(_indices(d.source_index for d in first)),
                               theirs.take(_indices(d.snapshot_index for d in first)))
        if found:
            self.progress(f"{piece.table}: verification found {len(found):,} differing key(s) at SCN {piece.scn}"
                          f"{', repaired' if repaired else ' (verify: report: left as they are)'}: "
                          + "; ".join(d.describe() for d in named[:3]))
        now_ms = int(time.time() * 1000)
        state = piece.state
        state = replace(state, runs=state.runs + 1, pass_runs=state.pass_runs + 1,
                        pass_started_ms=state.pass_started_ms or now_ms,
                        repairs=state.repairs + len(found),
                        last_repair_ms=now_ms if found else state.last_repair_ms,
                        cursor=encode_key(piece.bounds.through) if not piece.last else None)
        if piece.last:
            state = replace(state, last_full_ms=now_ms, last_full_runs=state.pass_runs, pass_runs=0,
                            pass_started_ms=None)
        return Verified(piece.table, policy, piece.scn, described, piece.rows.num_rows, len(found), repaired,
                        len(moved_on), named, state=state)


class _SnapshotSlice:
    """The snapshot's side of a slice as of the slice's SCN: the pinned version's rows in the slice (digested by the
    engine), the keys the log changed in (applied, SCN] replaced by their newest images (gone where deleted)."""

    def __init__(self, config: DatabusConfig, log: ChangeLog, snap: DeltaSnapshot, piece: _Slice) -> None:
        self.config, self.log, self.snap, self.piece = config, log, snap, piece
        self.schema = piece.schema
        self.plan = piece.plan

    def differing(self) -> tuple[list[_Found], pa.Table]:
        """The keys that differ from the source's read (missing, extra where looked for, or other values), and
        the snapshot's rows of those keys."""
        pinned = self.piece.pinned.result()
        images, touched = self._images()
        if touched:
            kept = pc.invert(pc.is_in(pinned.column("k"), pa.array(list(touched), pa.binary())))
            pinned = pa.concat_tables([pinned.filter(kept), digested(images, self.schema)])
        found = _differing(digested(self.piece.rows, self.schema), pinned, extras=self.plan.by_order)
        wanted = {f.key_text for f in found if f.in_snapshot}
        theirs = pa.concat_tables([snapshot_keys(images, self.schema, wanted),
                                   self._pinned_rows(wanted - touched)]) if wanted else images.slice(0, 0)
        source_at = {k: i for i, k in enumerate(key_texts(self.piece.rows, self.schema)) if k in
                     {f.key_text for f in found}}
        snapshot_at = {k: i for i, k in enumerate(key_texts(theirs, self.schema))}
        return [replace(f, source_index=source_at.get(f.key_text), snapshot_index=snapshot_at.get(f.key_text))
                for f in found], theirs

    def _images(self) -> tuple[pa.Table, set[bytes]]:
        """The live newest images, in the slice, of the keys the log changed in (applied, SCN], and all those keys."""
        from dagster_databus.dataplane.delta import conform_rows
        from dagster_databus.dataplane.reduce import NewestPerKey
        from dagster_databus.log.columns import change_schema, table_changes

        target = self.schema.arrow(with_meta=False)
        reducer = NewestPerKey(change_schema(self.schema), self.schema.primary_key,
                               self.config.merge.memory_mb << 20, self.config.merge.spill_dir)
        try:
            reducer.extend(self._events(table_changes(self.log, self.schema, self.piece.applied, self.piece.scn)))
            changed = [pa.Table.from_batches([b]) for b in reducer.results()]
        finally:
            reducer.close()
        if not changed:
            return target.empty_table(), set()
        every = pa.concat_tables(changed)
        images = self.plan.in_slice(every)
        live = images.filter(pc.not_equal(images.column("__op"), "d")).select(self.schema.column_names)
        return conform_rows(live, target), set(key_texts(every, self.schema))

    def _events(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The slice's events only: a key changed into or out of the slice has an event under its key in it."""
        for batch in batches:
            yield from self.plan.in_slice(pa.Table.from_batches([batch])).combine_chunks().to_batches()

    def _pinned_rows(self, wanted: set[bytes]) -> pa.Table:
        """The pinned version's rows of ``wanted`` keys (the few that differ), read in this process."""
        from dagster_databus.dataplane.delta import conform_rows

        target = self.schema.arrow(with_meta=False)
        if not wanted:
            return target.empty_table()
        dataset = self.snap.dataset(self.snap.delta(self.piece.version))
        try:
            first = self.schema.primary_key[0]
            values = self.piece.rows.column(first).combine_chunks()
            # The first key column of the keys only in the snapshot is not among the source's values.
            rows = dataset.to_table(columns=[*self.schema.column_names, "__op"],
                                    filter=self.plan.row_groups() if self.plan.by_order else pds.field(first).isin(
                                        values.cast(target.field(first).type)))
        except pa.ArrowNotImplementedError:
            # delta-rs states a merged file's string bounds as string_view, which a string filter cannot meet.
            rows = dataset.to_table(columns=[*self.schema.column_names, "__op"])
        live = pc.fill_null(pc.not_equal(rows.column("__op").cast(pa.string()), "d"), True)
        return snapshot_keys(conform_rows(rows.select(self.schema.column_names), target).filter(live), self.schema,
                             wanted)

    def changed_after(self, until: Scn) -> set[bytes]:
        """The keys the log changed after the slice's SCN, up to ``until``."""
        from dagster_databus.log.columns import table_changes

        if until <= self.piece.scn:
            return set()
        out: set[bytes] = set()
        for batch in table_changes(self.log, self.schema, self.piece.scn, until):
            out.update(key_texts(pa.Table.from_batches([batch]), self.schema))
        return out


@dataclass(frozen=True, slots=True)
class _Found:
    key_text: bytes
    in_source: bool
    in_snapshot: bool
    source_index: int | None = None  # the row in the source's read
    snapshot_index: int | None = None  # the row among the snapshot's rows of the differing keys


def _indices(found: Iterable[int | None]) -> pa.Array:
    return pa.array([i for i in found if i is not None], pa.int64())


def _differing(source: pa.Table, snapshot: pa.Table, extras: bool) -> list[_Found]:
    """Keys whose row digests differ, missing from the snapshot, or (``extras``) only in it."""
    joined = source.join(snapshot, keys="k", join_type="full outer", left_suffix="_s", right_suffix="_t",
                         use_threads=False)
    differ = pc.or_kleene(pc.is_null(joined["d_s"]), pc.is_null(joined["d_t"]))
    differ = pc.or_kleene(differ, pc.not_equal(joined["d_s"], joined["d_t"]))
    if not extras:
        differ = pc.and_kleene(differ, pc.is_valid(joined["d_s"]))
    hits = joined.filter(pc.fill_null(differ, True))
    found = [_Found(k, s is not None, t is not None) for k, s, t in zip(
        hits["k"].to_pylist(), hits["d_s"].to_pylist(), hits["d_t"].to_pylist(), strict=True)]
    return sorted(found, key=lambda f: f.key_text)


def _repair(config: DatabusConfig, snap: DeltaSnapshot, piece: _Slice, theirs: pa.Table,
            found: Sequence[_Found]) -> int:
    """The source's images at the slice's SCN of the differing keys (deletes of those it lacks) folded into the
    snapshot, whatever its rows' SCNs (no later event touched these keys), and into its history; the caller holds
    the table's lock."""
    from deltalake import CommitProperties

    from dagster_databus.dataplane.commit import OPERATION_KEY
    from dagster_databus.dataplane.delta import conform_changes, merge_with_delta_rs
    from dagster_databus.dataplane.refresh import RangeChanges
    from dagster_databus.dataplane.results import soft_deletes
    from dagster_databus.log.columns import change_schema

    schema, key = piece.schema, piece.schema.primary_key
    target = schema.arrow(with_meta=True)
    stamp = RangeChanges(change_schema(schema), target, key, deletes=True)
    images = piece.rows.take(_indices(f.source_index for f in found))
    gone = [f for f in found if not f.in_source]
    parts = [stamp.stamped(b, piece.scn.value, "r") for b in images.to_batches()]
    if gone:
        keys = theirs.take(_indices(f.snapshot_index for f in gone)).select(list(key))
        others = [f for f in stamp.changes if f.name not in key and not f.name.startswith("__")]
        rows = pa.RecordBatch.from_arrays([*(keys.column(k).combine_chunks() for k in key),
                                           *(pa.nulls(keys.num_rows, f.type) for f in others)],
                                          names=[*key, *(f.name for f in others)])
        parts.append(stamp.stamped(rows, piece.scn.value, "d"))
    changes = pa.Table.from_batches([b for b in parts if b.num_rows], stamp.changes)
    props = CommitProperties(custom_metadata={OPERATION_KEY: "verify-repair", "databus.scn": str(piece.scn),
                                              "databus.keys": str(len(found))})
    merge_with_delta_rs(snap, key, conform_changes(changes, target), props, reads=True,
                        soft=soft_deletes(config, snap), always=True)
    if config.source(snap.source).table(snap.table).history:
        _repair_history(config, snap, schema, changes)
    return len(found)


def _repair_history(config: DatabusConfig, snap: DeltaSnapshot, schema: TableSchema, changes: pa.Table) -> None:
    """The repair folded into the table's history: a row that differs from its key's open version starts a new
    one (or updates it in place), a delete ends it, an equal row changes nothing."""
    from deltalake import CommitProperties

    from dagster_databus.dataplane.commit import OPERATION_KEY
    from dagster_databus.dataplane.history import HistoryTable, history_schema, tracked_columns
    from dagster_databus.engines.local import fold_into_history

    hist = HistoryTable(config.lake, snap.source, snap.table)
    if hist.applied_scn() is None:
        return
    options = config.source(snap.source).table(snap.table)
    tracked = tracked_columns(snap.source, snap.table, schema, options.track_history_columns,
                              options.track_history_except_columns)
    props = CommitProperties(custom_metadata={OPERATION_KEY: "history-verify-repair"})
    fold_into_history(hist, changes, schema.primary_key, tracked, history_schema(schema), props)


def verified_lines(results: Sequence[Verified]) -> Iterator[str]:
    """One line per table, as the CLI prints them."""
    for r in results:
        if r.scn is None:
            yield f"{r.table}: not verified this run: {r.skipped}"
            continue
        verdict = "equal" if not r.different else (
            f"{r.different:,} key(s) differed, {'repaired' if r.repaired else 'reported (verify: report)'}")
        yield f"{r.table}: verified {r.rows:,} rows ({r.keys}) at SCN {r.scn}: {verdict}; {r.seconds:.2f} s"


def verify_figures(v: Verified) -> dict[str, Any]:
    """A table's verification as plain JSON (the CLI's ``--json``)."""
    return {"table": v.table, "policy": v.policy, "scn": None if v.scn is None else str(v.scn), "keys": v.keys,
            "rows": v.rows, "differing_keys": v.different, "repaired_keys": v.repaired, "moved_on_keys": v.moved_on,
            "differences": [d.as_json() for d in v.differences], "seconds": v.seconds, "skipped": v.skipped,
            "repairs_so_far": v.state.repairs, "last_full_verify_ms": v.state.last_full_ms}
