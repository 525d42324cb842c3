"""The contract every capture source implements and the records it returns: ``Source``, a record of its four
parts (``Catalog``, ``Setup``, ``Stream``, ``Reads``: the protocols of each part's job), and the optional
capabilities a source may have besides (``Failover`` for a source with servers to switch between, ``Alerting``,
``Drifting``, ``Uninstallable``, ``Retaining``), checked on the source with ``isinstance``. What sources share
besides lives beside it: ``generic`` (what the SQL kinds' parts share), ``keys`` (key ranges, keyset paging),
``fingerprints`` (fingerprints computed here); ``registry`` names the kinds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa

from dagster_databus.core.batch import Changes
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError, SourceUnavailableError

if TYPE_CHECKING:
    from dagster_databus.config import SourceConfig
    from dagster_databus.core.fingerprint import Fingerprint
    from dagster_databus.log.manifest import Checkpoint


def not_installed(problem: str, problems: Sequence[str], fix: str, *, bulleted: bool = False,
                  **context: Any) -> CaptureNotInstalledError:
    """The error for capture that is not ready: ``problem``, then ``verify()``'s problems (one a line with
    ``bulleted``, else joined with "; "), and ``fix``."""
    listed = "\n  - " + "\n  - ".join(problems) if bulleted else " " + "; ".join(problems)
    return CaptureNotInstalledError(problem + listed, fix, **context)


class Verifiable(Protocol):
    def verify(self) -> list[str]: ...


def require_installed(setup: Verifiable, error: Callable[[list[str]], CaptureNotInstalledError]) -> None:
    """Every setup part's ``require_installed``: raise ``error(problems)`` if ``setup.verify()`` finds any."""
    problems = setup.verify()
    if problems:
        raise error(problems)


@dataclass(frozen=True, slots=True)
class InstallReport:
    epoch: str
    version: str
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


@dataclass(slots=True)
class PollStats:
    """Filled in while a poll runs; read after its iterator is exhausted."""

    until: Scn = Scn.BEGINNING
    source_hwm: Scn = Scn.BEGINNING
    chunks: int = 0
    # Checkpoint state for the end of the chunk just yielded (source-specific, may be empty).
    state: dict[str, str] = field(default_factory=dict)
    # DDL statements on captured tables met by this poll, as (SCN after the statement, table, statement).
    ddl: list[tuple[Scn, str, str]] = field(default_factory=list)
    # The final state must be kept even where the checkpoint's SCN does not move: what the source records of itself
    # in it changed (a table's identity), and a next poll would otherwise find the change again.
    restate: bool = False


@dataclass(frozen=True)
class TableRead:
    """A consistent read of one table at ``scn``: every change <= scn is in ``batches``."""

    scn: Scn
    schema: TableSchema
    batches: Iterator[pa.RecordBatch] = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Primary keys after ``after`` (exclusive) through ``through`` (inclusive); None: unbounded."""

    after: tuple[Any, ...] | None
    through: tuple[Any, ...] | None


ALL_KEYS = KeyRange(None, None)


@dataclass(frozen=True, slots=True)
class RowSelection:
    """The rows an on-demand snapshot reads again: keys in ``keys`` and, when ``where`` is set, only rows it
    matches (a predicate in the source's own SQL, checked by the source before anything is read)."""

    keys: KeyRange = ALL_KEYS
    where: str | None = None

    @property
    def whole(self) -> bool:
        return self.keys == ALL_KEYS and self.where is None

    def describe(self) -> str:
        parts = [f"keys after {list(self.keys.after)}" if self.keys.after is not None else "",
                 f"keys through {list(self.keys.through)}" if self.keys.through is not None else "",
                 f"rows where {self.where}" if self.where is not None else ""]
        return ", ".join(p for p in parts if p) or "every row"


ALL_ROWS = RowSelection()


@dataclass(frozen=True)
class RangeSpec:
    """What a range's task needs to read its range: each kind's reads define a subclass holding its connection
    and query settings as plain picklable data (it travels to Spark tasks); it may hold a password."""

    page_rows: int  # the rows read a query (``generic.reads.page_rows``)


@dataclass(frozen=True)
class RangeRead:
    """A table read in primary-key ranges, each range by its own task (a Spark task, in the spark engine),
    described by plain picklable data: the task opens its own connection from ``spec``.

    With ``scn`` set, every range reads the table at that one SCN (a flashback query, ``AS OF SCN``). Without
    it, each range reads in its own consistent snapshot at a position it reports and
    stamps on its rows as ``__scn``; the table's snapshot SCN is then the lowest of them, and replaying
    the log from there is exact because the MERGE applies an event only to a row older than it.
    """

    kind: str  # the source kind whose reader reads a range (``sources.read_range``)
    source: str
    schema: TableSchema
    spec: RangeSpec = field(repr=False)  # connection and query settings; may hold a password
    ranges: tuple[KeyRange, ...]
    scn: Scn | None
    where: str | None = None  # only rows matching this predicate (``RowSelection.where``)


@dataclass(frozen=True)
class SourceFingerprint:
    """A table's reconciliation fingerprint (``core.fingerprint``) read consistently at ``scn``. The SCN
    is known at once; the fingerprint is computed in the background (``fingerprint`` waits for it), so
    the snapshot's side can be computed meanwhile."""

    scn: Scn
    schema: TableSchema
    pending: Future[Fingerprint] = field(repr=False)
    pushed_down: bool  # True: computed by the database; False: its rows streamed through this process

    @property
    def fingerprint(self) -> Fingerprint:
        return self.pending.result()


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """A failover a source decided (``Failover.plan_switch``), for capture to commit to the change log
    (``LogWriter.switch_epoch``) before anything is read from the new server: the checkpoint SCN capture resumes
    after, the new epoch, the checkpoint state to resume with, and what the log's lineage records of the switch."""

    resume: Scn
    epoch: str
    state: dict[str, str]
    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FailoverState:
    """What a checkpoint's state says of failover (``Failover``), typed for capture, its figures and ``status``. It is
    kept in the checkpoint among the source's own string entries: ``of`` reads it from them, ``entries`` writes it."""

    server: str | None = None  # the server capture reads ("primary", "standby"); None: the source names none
    switched_ms: int | None = None  # when capture switched to it; set until the first capture after the switch
    # After a switch by commit time: the commit time (seconds, the source's clock) of the last transaction captured
    # before it. Windows committed up to then are read again (the merge absorbs them).
    reread_through_s: int | None = None

    @classmethod
    def of(cls, state: Mapping[str, str]) -> FailoverState:
        switched, reread = state.get("switched_ms"), state.get("reread_through")
        return cls(state.get("server"), None if switched is None else int(switched),
                   None if reread is None else int(reread))

    def entries(self) -> dict[str, str]:
        """The checkpoint state's entries for what is set, as the change log keeps them."""
        out = {"server": self.server, "switched_ms": self.switched_ms, "reread_through": self.reread_through_s}
        return {key: str(value) for key, value in out.items() if value is not None}

    @property
    def reading(self) -> str:
        """The server capture reads, the primary unless the state names another."""
        return "primary" if self.server is None else self.server


@dataclass(frozen=True)
class Sample:
    """A sample database of a kind that needs no server, made in a folder for ``databus warm``: the ``sources[]``
    entry of its source (paths relative to that folder), its one table empty; ``fill`` writes its rows, and
    ``change`` changes every one of them."""

    config: dict[str, Any]
    fill: Callable[[], None]
    change: Callable[[], None]


class Catalog(Protocol):
    """A source's ``catalog`` part: the configured tables' schemas, read from the database, and their keys
    checked."""

    def preflight(self) -> Mapping[str, TableSchema]:
        """Check the database and the configured tables; raise before anything is written."""

    def schemas(self) -> Mapping[str, TableSchema]:
        """Table schemas in effect for the chunk the poll yielded last (before polling: the current ones)."""

    def null_keys(self) -> list[str]:
        """``validate``'s problem for each configured table whose key columns hold NULL, which capture and the
        bootstrap refuse (``generic.catalog.null_key_problem``); empty when none does."""


class Setup(Protocol):
    """A source's ``setup`` part: what capture needs in the database, installed and checked, and what
    ``validate`` says of it."""

    def install(self) -> InstallReport:
        """Create or update the capture objects, idempotently (after the catalog's checks)."""

    def verify(self) -> list[str]:
        """Problems with the installed capture objects, each naming the object; empty when healthy."""

    def installed(self) -> bool:
        """Whether install has run here (its capture objects exist, current or not)."""

    def require_installed(self) -> None:
        """Raise ``CaptureNotInstalledError`` listing ``verify()``'s problems; call before ``stream.poll``."""

    def notes(self) -> list[str]:
        """What ``validate`` says of the source beyond its problems (a server's version and settings, a scan
        for text capture would refuse); empty when there is nothing to say. May raise a ``DatabusError`` that
        names a problem found."""


class Stream(Protocol):
    """A source's ``stream`` part: its positions, and its changes after a checkpoint in commit order."""

    def epoch(self) -> str:
        """The source lineage that positions belong to."""

    def high_water_mark(self) -> Scn:
        """The newest committed SCN the source has allocated."""

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        """Where a brand-new change log starts, with its checkpoint state."""

    def reading(self) -> AbstractContextManager[None]:
        """Held for a whole capture run: where the source itself cannot serve two readers (a binlog per
        replica server id), turns a second run away up front with ``ConcurrentRunError``."""

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[Changes]:
        """Whole windows after ``since`` up to a bound fixed when the poll starts, in chunks (``core.batch.Changes``:
        by column as a ``ChangeBatch``, or, for a transaction too large to hold, as a ``SpooledBatch`` read back
        piece by piece).

        Precondition: ``setup.require_installed()`` passed.
        """

    def release(self, through: Scn) -> None:
        """The change log durably holds everything up to ``through``; the source may drop it."""


class Reads(Protocol):
    """A source's ``reads`` part: consistent reads of a table, in this process or cut into key ranges for
    tasks."""

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        """A consistent, chunked read of one table at a known SCN, in this process (the local engine's
        bootstrap, reconciliation, tests), ``batch_rows`` a batch (None: the source's own size)."""

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """The table (or the ``rows`` selected: ``check_selection`` first) cut into primary-key ranges of about
        ``rows_per_range`` rows, for tasks to read (``sources.read_range``) and write in parallel: the spark
        engine's bootstrap and on-demand snapshots; ``first``: only that many ranges from the selection's start
        (the rolling verification's slice)."""

    def check_selection(self, table: str, rows: RowSelection) -> None:
        """Raise ``ConfigError`` naming the problem if the database cannot select ``rows`` of ``table`` (a bad
        predicate, key values of the wrong arity or type); reads no rows."""

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        """The table's reconciliation fingerprint at one SCN, computed by the database where it can, in the
        background once the SCN is fixed."""

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableRead:
        """A consistent read of the table's rows in some fingerprint buckets (to compare one by one)."""


@runtime_checkable
class Source(Protocol):
    """A capture source: one per configured source, made by its kind's entry in ``registry``. Capture,
    the engines and the checks hold sources only as this.

    A source is a record of its four parts, each a small object with one job that its kind writes in a module
    named after it (``<kind>/catalog.py``, ``setup.py``, ``stream.py``, ``reads.py``); callers call the part:
    ``source.catalog.schemas()``, ``source.setup.install()``, ``source.stream.poll(...)``,
    ``source.reads.read_table(...)``. What only some kinds can do is a capability of the source, one of the
    protocols below, checked with ``isinstance``."""

    kind: str
    name: str
    sees_ddl: bool  # True when DDL statements reach the poll (recorded in the DDL log)
    # True when verify's problems are capture objects that install creates or updates (validate gives running
    # install as their fix); False when each problem states its own fix (a server's settings and privileges).
    install_repairs: bool

    @property
    def config(self) -> SourceConfig:
        """The source's configuration, as validated."""

    @property
    def catalog(self) -> Catalog:
        """The configured tables' schemas, read from the database, and their keys checked."""

    @property
    def setup(self) -> Setup:
        """What capture needs in the database, installed and checked, and what validate says."""

    @property
    def stream(self) -> Stream:
        """The source's positions and its changes after a checkpoint, in commit order."""

    @property
    def reads(self) -> Reads:
        """Consistent reads of a table, in this process or cut into key ranges for tasks."""


@runtime_checkable
class Failover(Protocol):
    """What a source with servers to switch between implements besides ``Source`` (a primary and a
    standby); capture checks for it by type. The source reads from the server its change log's checkpoint
    names (``attach``). Before a run reads, capture asks whether that server is down (``check_server``) and,
    under the log's writer lock, for the switch (``plan_switch``), which it commits to the log before any change
    is read from the new server: sources read the log, they do not write it."""

    def attach(self, state: Mapping[str, str]) -> None:
        """Read from the server (and failover era) a checkpoint's ``state`` names."""

    def check_server(self, state: Mapping[str, str], progress: Progress) -> SourceUnavailableError | None:
        """Attach to the server the checkpoint ``state`` names; why it is down, if failing over is called for
        (it stayed down and there is a server to switch to), else None."""

    def plan_switch(self, checkpoint: Checkpoint, down: SourceUnavailableError,
                    progress: Progress) -> SwitchPlan | None:
        """The switch to another server, decided from ``checkpoint`` as read under the log's writer lock; None
        when the server answers again or another run switched already (its server is then attached)."""

    def has_standby(self) -> bool:
        """Whether the config names a server to switch to (without one, a server down is only waited out)."""


@runtime_checkable
class Alerting(Protocol):
    """A source whose database signals new commits (a database alert): a sensor waits for the signal and
    asks for a run then, instead of polling on a schedule alone."""

    def alert_wait_s(self) -> int:
        """Seconds one wait may block (the source's config): a sensor evaluation's bound."""

    def wait_for_changes(self, max_wait_s: int) -> str | None:
        """Block up to ``max_wait_s`` for the signal; the source's name if changes were signalled, else None."""


@runtime_checkable
class Drifting(Protocol):
    """A source whose capture objects can be replaced behind capture's back with nothing for install to repair (a
    slot or publication dropped and created again under its name): checked against the change log's checkpoint
    by validate, as capture checks it before each poll."""

    def drift(self, since: Scn, state: Mapping[str, str]) -> list[str]:
        """A problem, with its fix, for each capture object that can no longer give the changes after the
        checkpoint at ``since`` (with its ``state``)."""


@runtime_checkable
class Uninstallable(Protocol):
    """A source whose install leaves objects in the database (triggers, a txlog, a replication slot and its WAL)
    that ``databus uninstall`` removes when capture of it ends."""

    def uninstall(self) -> tuple[str, ...]:
        """Remove what install created for this source, and only that; what was removed, by name."""


@dataclass(frozen=True, slots=True)
class Retention:
    """What a source keeps on its server for capture (``Retaining``): a replication slot's WAL, in bytes."""

    holder: str  # what holds it, as the server names it ("replication slot databus_app_1a2b3c4d")
    retained_bytes: int | None  # None: the holder does not exist (not installed)
    status: str  # the server's word for its state (a slot's wal_status: reserved, extended, unreserved, lost)
    # How far capture is behind in time: the commit time (ms) of the oldest change the server holds that capture
    # has not confirmed, 0 when there is none, None when it cannot be told now (the slot is being read). A
    # server's position moves without captured changes (the server's checkpoints, other databases), so this,
    # not the distance of positions, says whether changes wait.
    waiting_since_ms: int | None = None

    def lag_seconds(self, now_ms: int) -> float | None:
        """Seconds the oldest waiting change has waited (0.0 when none waits; None when unknown)."""
        if self.waiting_since_ms is None:
            return None
        return 0.0 if self.waiting_since_ms == 0 else max(0, now_ms - self.waiting_since_ms) / 1000


@runtime_checkable
class Retaining(Protocol):
    """A source whose server keeps what capture has not read yet (a replication slot's WAL), so ``status`` and
    the capture-lag check show how much: it grows on the server's disk while capture does not run."""

    def retention(self) -> Retention:
        """What the server keeps for capture now."""

