"""Typed errors. Each names what went wrong, where, and how to fix it."""

from __future__ import annotations

import json
from typing import ClassVar


class DatabusError(Exception):
    """Base class: ``problem`` says what happened, ``fix`` says what to do about it.

    ``transient`` says whether running the same thing again, unchanged, may succeed: a server that was
    down, a lock another run held. A permanent error fails the same way until someone acts on its fix, so
    retry policies (Dagster's, a scheduler's) should not spend attempts on it. A class sets the default; a
    raise site that knows better passes ``transient=``."""

    transient: ClassVar[bool] = False

    def __init__(self, problem: str, fix: str, *, transient: bool | None = None, **context: object) -> None:
        self.problem = problem
        self.fix = fix
        self.context = context
        if transient is not None:
            self.transient = transient  # type: ignore[misc]  # one raise site overrides its class
        super().__init__(f"{problem}\nFix: {fix}")


class InstallationError(DatabusError):
    """This installation of the package lacks a file it ships (its SQL): a build that left it out."""


class ConfigError(DatabusError):
    """The configuration file is missing, malformed or names things that do not exist."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        super().__init__(f"config error at {field}: {problem}", fix, field=field)


class SourceUnavailableError(DatabusError):
    """The source database cannot be reached."""

    transient = True


class CaptureNotInstalledError(DatabusError):
    """The capture objects (txlog, triggers) are missing or out of date in the source."""


class EpochMismatchError(DatabusError):
    """A checkpoint belongs to a different lineage of the source and cannot be compared."""


class LogGapError(DatabusError):
    """Changes the checkpoint has not captured are gone from the source (purged or pruned)."""


class SchemaMismatchError(DatabusError):
    """A captured value does not fit the column type the Avro schema declares."""


class UnsupportedTypeError(DatabusError):
    """A captured column's declared type has no mapping to a change-log and Delta type (docs/types.md)."""


class ChangeLogFormatError(DatabusError):
    """The change log was written in a format this version does not read (for example before typed columns)."""


class SchemaDriftError(DatabusError):
    """A table's columns changed while its capture triggers still had the old shape."""


class SnapshotDamagedError(DatabusError):
    """A Delta table of the lake names data files that are gone or not the size it recorded."""


class NullKeyError(DatabusError):
    """A captured row's key holds NULL: it identifies no row, and rows sharing it would fold into one."""


class NaNKeyError(DatabusError):
    """A captured row's float key holds NaN, which the lake's MERGE matches to no row."""


class BinlogEventError(DatabusError):
    """A binlog event capture must not read past: damaged, of a kind it does not decode, or one that would
    make the change log wrong (the event type, its position and the fix are in the message)."""


class ConcurrentRunError(DatabusError):
    """Another process holds the lock on this source's log or this table's snapshot."""

    transient = True


class ChangeLogCorruptError(DatabusError):
    """The change log's manifest and segments disagree in a way recovery cannot repair."""


class SnapshotMissingError(DatabusError):
    """A snapshot was expected to exist (for a merge) but has not been bootstrapped."""


class HistoryGapError(DatabusError):
    """A history table cannot go on: the change log no longer holds the changes after the SCN it reached."""


class LakeNotWritableError(DatabusError):
    """The lake folder cannot be created or written (read-only, a file in its place, no permission)."""


class DiskFullError(DatabusError):
    """The lake's disk filled up while writing; nothing was committed."""


class StandbyBehindError(DatabusError):
    """The server capture would switch to lacks transactions already captured from the other one (it may
    still be applying them: transient, unless its history diverged)."""

    transient = True


class ShardCollisionError(DatabusError):
    """Two parts of a logical table hold the same logical key: the shard column does not separate them."""


class SparkUnavailableError(DatabusError):
    """The Spark Connect server ``spark.remote`` names cannot be reached, or one could not be started."""

    transient = True


class SparkEnvironmentError(DatabusError):
    """The Python that Spark runs this package's tasks in lacks the package or one of its dependencies."""


# Core, storage and log errors that are not ``DatabusError`` s: raised and caught inside the package
# (callers add the context a ``DatabusError`` needs), so they never cross from a Spark task.


class TypeValueError(ValueError):
    """A value that the column's type cannot hold exactly; callers add source, table and column."""


class LakeLocationError(ValueError):
    """A ``lake:`` value or storage option that cannot be used; the message says how to fix it."""


class ManifestPartGoneError(Exception):
    """A manifest part vanished while being read (retention re-sealed it): read the manifest again."""


_TASK_MARK = "databus-error:"


def for_task(exc: DatabusError) -> RuntimeError:
    """``exc`` as it can cross from a Spark task to the driver: Spark re-raises only the worker's text."""
    body = {"kind": type(exc).__name__, "problem": exc.problem, "fix": exc.fix, "transient": exc.transient,
            "context": {k: v for k, v in exc.context.items() if isinstance(v, str | int | float | bool | None)}}
    return RuntimeError(_TASK_MARK + json.dumps(body))


def from_task(exc: BaseException) -> DatabusError | None:
    """The ``DatabusError`` a Spark task raised (through ``for_task``), rebuilt on the driver; else None."""
    text = str(exc)
    at = text.find(_TASK_MARK)
    if at < 0:
        return None
    try:
        body, _ = json.JSONDecoder().raw_decode(text, at + len(_TASK_MARK))
    except ValueError:
        return None
    kind = globals().get(body["kind"])
    if not (isinstance(kind, type) and issubclass(kind, DatabusError)) or kind is ConfigError:
        kind = DatabusError
    error = kind.__new__(kind)
    DatabusError.__init__(error, body["problem"], body["fix"], transient=bool(body.get("transient")),
                          **body["context"])
    return error


# -- consumers ---------------------------------------------------------------------------


class ConsumerError(DatabusError):
    """A window kept failing in the consumer's callbacks; the checkpoint stayed before it."""


class ConsumerPositionError(ConsumerError):
    """A start position or checkpoint the change log cannot continue from without skipping changes (past the
    log's end, or older than it retains with bootstrap off)."""


class SubscriptionMismatchError(ConsumerError):
    """A checkpoint or pull cursor kept for one subscription (source, tables, partition filter, group) used
    with another it does not cover: resuming would silently skip what it never delivered."""


class CheckpointFormatError(ConsumerError):
    """A checkpoint file or document that is not a consumer checkpoint this version reads."""


class LogicalCheckpointError(ConsumerError):
    """A part's checkpoint cannot be resumed from its change log (gone past retention, restarted, or
    belonging to another part)."""


class CallbackFailed(Exception):
    """A callback returned False: the window is rolled back as if it had raised."""


class FilterSpecError(DatabusError):
    """A partition filter or id list that cannot be parsed."""


class PullError(DatabusError):
    """A pull-API call out of order or for an unknown client."""


class OrderingError(DatabusError):
    """Two changes of one key come from logs whose positions cannot be compared."""


class GroupSpecError(DatabusError):
    """A consumer-group member that cannot exist (index outside the group)."""
