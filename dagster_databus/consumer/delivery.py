"""Delivering windows to consumer callbacks: the consumer interface, the dispatchers that call it (in
order, or by key on N threads), the rollback-and-retry protocol of one window, and the follow loop.

Callbacks (Databus's consumer callbacks → here): onStartDataEventSequence → ``on_start_data_event_sequence``,
onStartSource → ``on_start_source``, onDataEvent → ``on_data_event``, onEndSource →
``on_end_source``, onEndDataEventSequence → ``on_end_data_event_sequence``, onCheckpoint →
``on_checkpoint``, onRollback → ``on_rollback``, onError → ``on_error``. Before a table's first event
in a run, and before its first event in a new schema version (a column added, a type widened),
``on_schema_change(table, version, schema)`` says the shape of the rows that follow.

Both clients deliver through this module: ``client.DatabusClient`` (one source's log) and
``logical.LogicalTableClient`` (a table sharded over several sources). It knows nothing of where
positions are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dagster_databus.consumer.groups import Change, KeyRouter
from dagster_databus.consumer.ordering import IdempotentSink
from dagster_databus.core.events import ChangeEvent, Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CallbackFailed, ConsumerError

if TYPE_CHECKING:
    from dagster_databus.log.manifest import Manifest
    from dagster_databus.log.schemas import SchemaRegistry

class DatabusConsumer:
    """Override the callbacks you need. Raise, or return False, to roll the current window back."""

    def on_start_bootstrap(self, scn: Scn) -> Any: ...
    def on_end_bootstrap(self, scn: Scn) -> Any: ...
    def on_start_data_event_sequence(self, scn: Scn) -> Any: ...
    def on_start_source(self, table: str) -> Any: ...
    def on_schema_change(self, table: str, version: int, schema: TableSchema) -> Any: ...
    def on_data_event(self, event: ChangeEvent) -> Any: ...
    def on_end_source(self, table: str) -> Any: ...
    def on_end_data_event_sequence(self, scn: Scn) -> Any: ...
    def on_checkpoint(self, scn: Scn) -> Any: ...
    def on_rollback(self, scn: Scn) -> Any: ...
    def on_error(self, error: BaseException) -> Any: ...


def _call(consumer: DatabusConsumer, name: str, *args: Any) -> None:
    if getattr(consumer, name)(*args) is False:
        raise CallbackFailed(f"{type(consumer).__name__}.{name} returned False")


class SequentialDispatcher:
    def __init__(self, consumer: DatabusConsumer) -> None:
        self.consumer = consumer

    def broadcast(self, name: str, *args: Any) -> None:
        _call(self.consumer, name, *args)

    def data(self, event: Change) -> None:
        _call(self.consumer, "on_data_event", event)

    def drain(self) -> None:
        """Nothing is ever pending."""

    def close(self) -> None:
        """No threads to stop."""


def dispatcher(consumer: DatabusConsumer | Callable[[], DatabusConsumer],
               workers: int) -> SequentialDispatcher | ParallelDispatcher:
    """The consumer called in order on the caller's thread, or ``workers`` consumers from the factory
    ``consumer`` on threads of their own."""
    if workers <= 1:
        return SequentialDispatcher(consumer if isinstance(consumer, DatabusConsumer) else consumer())
    if not callable(consumer) or isinstance(consumer, DatabusConsumer):
        raise ValueError("parallel dispatch needs a consumer factory (one consumer per worker)")
    return ParallelDispatcher([consumer() for _ in range(workers)])


class ParallelDispatcher:
    """N consumers on N threads (Databus's parallel consumer execution): data events are dispatched by key, so
    each key's events stay in order on one worker; boundaries are broadcast with barriers:

    ====================  ===========  =============
    callback              delivery     barrier
    ====================  ===========  =============
    start sequence        broadcast    before/after
    start source          broadcast    before
    data event            dispatch     none
    checkpoint, error     broadcast    before/after
    end source, sequence  broadcast    before/after
    rollback              broadcast    after
    ====================  ===========  =============
    """

    AFTER = {"on_start_data_event_sequence", "on_checkpoint", "on_error", "on_end_source", "on_schema_change",
             "on_end_data_event_sequence", "on_rollback", "on_start_bootstrap", "on_end_bootstrap"}

    def __init__(self, consumers: Sequence[DatabusConsumer]) -> None:
        self.consumers = list(consumers)
        self.workers = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"databus-worker-{i}")
                        for i in range(len(consumers))]
        self.pending: list[Future[None]] = []
        self.router = KeyRouter(len(self.consumers))

    def _wait(self, futures: list[Future[None]]) -> None:
        errors = [f.exception() for f in futures]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed

    def drain(self) -> None:
        pending, self.pending = self.pending, []
        self._wait(pending)

    def broadcast(self, name: str, *args: Any) -> None:
        if name != "on_rollback":
            self.drain()  # barrier before
        else:
            for future in self.pending:  # let in-flight work finish, whatever its outcome
                future.exception()
            self.pending = []
        futures = [w.submit(_call, c, name, *args) for w, c in zip(self.workers, self.consumers, strict=True)]
        if name in self.AFTER:
            self._wait(futures)
        else:
            self.pending += futures

    def data(self, event: Change) -> None:
        i = self.router.member(event.key)  # the product's one key hash: the same worker for a key, always
        self.pending.append(self.workers[i].submit(_call, self.consumers[i], "on_data_event", event))

    def close(self) -> None:
        for worker in self.workers:
            worker.shutdown(wait=True)


@dataclass(slots=True)
class DeliveryStats:
    """What a run delivered; ``follow`` adds its runs' up."""

    windows: int = 0
    events: int = 0
    rollbacks: int = 0
    discarded: int = 0  # events the dedupe sink dropped as stale or duplicate
    bootstrapped: bool = False
    bootstrap_rows: int = 0

    def add(self, run: DeliveryStats) -> None:
        """Count a later run into these totals."""
        self.windows += run.windows
        self.events += run.events
        self.rollbacks += run.rollbacks
        self.discarded += run.discarded
        self.bootstrapped = self.bootstrapped or run.bootstrapped
        self.bootstrap_rows += run.bootstrap_rows


Stats = TypeVar("Stats", bound=DeliveryStats)


def follow(run: Callable[[], Stats], total: Stats, interval_s: float, stop: Callable[[], bool]) -> Stats:
    """The consumers' follow loop: ``run`` until ``stop()`` says so, pausing ``interval_s`` after a run that
    found nothing new; returns ``total`` with every run added."""
    while not stop():
        stats = run()
        total.add(stats)
        if not stats.windows:
            time.sleep(interval_s)
    return total


class SchemaAnnouncer:
    """Tells consumers the shape of a table's rows before the first row in it: ``on_schema_change`` (table,
    schema version, ``TableSchema``) once per table per run, and again whenever the columns change (two
    versions with the same columns, which a capture restart can register, are one shape)."""

    def __init__(self, schemas: SchemaRegistry) -> None:
        self.schemas = schemas  # the log's row schema versions
        self.told: dict[str, str] = {}  # table -> fingerprint of the shape last announced
        self.last: dict[str, int] = {}  # table -> the version of its last event (the common case: unchanged)
        self.versions: dict[int, int] = {}  # id(event) -> its schema version, for the window being delivered

    def window(self, window: Window) -> None:
        self.versions = ({id(e): v for e, v in zip(window.events, window.schema_versions, strict=True)}
                         if window.schema_versions else {})

    def before(self, dispatcher: Any, event: Change) -> None:
        version = self.versions.get(id(event))
        if version is None or self.last.get(event.table) == version:
            return
        self.last[event.table] = version
        schema = self.schemas.load(event.table, version)
        if self.told.get(event.table) != schema.fingerprint():
            dispatcher.broadcast("on_schema_change", event.table, version, schema)
            self.told[event.table] = schema.fingerprint()


def deliver_window(dispatcher: Any, sink: IdempotentSink | None, lineage: str, scn: Scn, start: Scn,
                   events: Sequence[Change], order: Callable[[list[str]], list[str]], max_retries: int,
                   stats: DeliveryStats, failure: Callable[[Exception, int], ConsumerError],
                   shapes: SchemaAnnouncer | None = None) -> None:
    """Deliver one window, grouped per table in ``order``, with the rollback-and-retry protocol.

    A callback that raises rolls the window back (``on_rollback``) and it is delivered again from
    its start, up to ``max_retries`` times; then ``on_error`` and the error ``failure`` builds. With
    a dedupe ``sink``, events are admitted afresh on every attempt (a rollback forgets the failed
    one's) and held only once ``on_end_data_event_sequence`` succeeded, before the checkpoint moves:
    a crash in between redelivers a window the sink then discards. With ``shapes``, a table's events in a
    schema version the consumer was not told of yet are preceded by ``on_schema_change``.
    """
    for attempt in range(max_retries + 1):
        admitted = list(events) if sink is None else [e for e in events if sink.admit(e, lineage)]
        if not admitted:  # all already applied by this sink: nothing to redo
            _commit_sink(sink, stats)
            return
        by_table: dict[str, list[Change]] = {}
        for event in admitted:
            by_table.setdefault(event.table, []).append(event)
        try:
            dispatcher.broadcast("on_start_data_event_sequence", scn)
            for table in order(list(by_table)):
                dispatcher.broadcast("on_start_source", table)
                for event in by_table[table]:
                    if shapes is not None:
                        shapes.before(dispatcher, event)
                    dispatcher.data(event)
                dispatcher.broadcast("on_end_source", table)
            dispatcher.broadcast("on_end_data_event_sequence", scn)
            _commit_sink(sink, stats)
            stats.windows += 1
            stats.events += len(admitted)
            return
        except Exception as exc:
            if sink is not None:
                sink.rollback()
            stats.rollbacks += 1
            dispatcher.broadcast("on_rollback", start)
            if attempt == max_retries:
                dispatcher.broadcast("on_error", exc)
                raise failure(exc, attempt + 1) from exc


def _commit_sink(sink: IdempotentSink | None, stats: DeliveryStats) -> None:
    if sink is None:
        return
    before = sink.discarded
    sink.commit()
    stats.discarded += sink.discarded - before


def log_end(manifest: Manifest) -> Scn:
    """The last position a change log has reached: its checkpoint, which polls that found nothing for it move
    past the last event (``last_scn``). Every change up to it is in the log, so a consumer may start or stand
    anywhere up to it; a position after it is one the log has not reached."""
    checkpoint = manifest.checkpoint
    return max(manifest.last_scn, checkpoint.scn) if checkpoint is not None else manifest.last_scn
