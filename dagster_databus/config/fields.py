"""The parts of a config every source shares: strict models, identifiers, tables, polling, retention,
reconciliation and upkeep schedules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dagster_databus.core.cron import cron_problem
from dagster_databus.core.identifiers import PLAIN_NAME, RESERVED_PREFIX, is_plain_name


def plain_name(value: str) -> str:
    if not is_plain_name(value):
        raise ValueError(
            f"{value!r} is not a plain identifier; use letters, digits and underscores, "
            f"starting with a letter or underscore (pattern {PLAIN_NAME.pattern})"
        )
    if value.startswith(RESERVED_PREFIX):
        raise ValueError(f"{value!r} starts with {RESERVED_PREFIX!r}, which is reserved for metadata columns")
    return value


def unique_table_names(value: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
    names = [t.name.lower() for t in value]
    if len(set(names)) != len(names):
        raise ValueError("a table is listed twice")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# What a change to a captured table's columns does (docs/types.md, "Schema changes"): evolve the
# snapshot in place where the change keeps every value exact (columns added, types widened), else
# read the table again; resnapshot: always read it again; stop: hold the snapshot at the change.
SchemaChanges = Literal["evolve", "resnapshot", "stop"]


VerifyPolicy = Literal["repair", "report", "off"]


class TableConfig(Strict):
    name: str
    primary_key: tuple[str, ...] = Field(min_length=1)
    schema_changes: SchemaChanges | None = None  # None: the source's policy
    # What a delete does to the snapshot: apply (the key's row goes: AUTO CDC's apply_as_deletes), or soft (the
    # row stays, marked __op = 'd' with the delete's SCN and commit time; readers of current rows skip it).
    deletes: Literal["apply", "soft"] = "apply"
    # A history table (SCD type 2, ``dataplane.history``) beside the snapshot: every version of every row.
    history: bool = False
    # Which columns' changes start a new version (the rest update the current version in place): these
    # only, or every column but these; neither: every column.
    track_history_columns: tuple[str, ...] | None = None
    track_history_except_columns: tuple[str, ...] = ()
    verify: VerifyPolicy | None = None  # None: the source's ``verify.policy``

    _verify_off = field_validator("verify", mode="before")(lambda cls, v: yaml_policy(v))

    _check_name = field_validator("name")(lambda cls, v: plain_name(v))

    @field_validator("primary_key")
    @classmethod
    def _check_key(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for column in value:
            plain_name(column)
        if len(set(value)) != len(value):
            raise ValueError("primary_key names a column twice")
        return value

    @field_validator("track_history_columns", "track_history_except_columns")
    @classmethod
    def _check_tracked(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for column in value or ():
            plain_name(column)
        return value

    @model_validator(mode="after")
    def _history_options(self) -> TableConfig:
        chosen = self.track_history_columns is not None or bool(self.track_history_except_columns)
        if chosen and not self.history:
            raise ValueError(f"table {self.name}: track_history_columns / track_history_except_columns apply to a "
                             "history table; add history: true, or remove them")
        if self.track_history_columns is not None and self.track_history_except_columns:
            raise ValueError(f"table {self.name}: give either track_history_columns (the columns that start a new "
                             "version) or track_history_except_columns (the columns that do not), not both")
        return self


class RetentionConfig(Strict):
    """How much change log to keep; segments the snapshots have not absorbed are always kept."""

    max_age_hours: float | None = Field(default=None, gt=0)
    max_bytes: int | None = Field(default=None, gt=0)


def schedule(value: str | None, example: str) -> str | None:
    """A ``cron`` field's value, refused with the problem and an example when it is not a schedule."""
    problem = cron_problem(value) if value is not None else None
    if problem:
        raise ValueError(f"{problem}; for example {example}")
    return value


class PollConfig(Strict):
    chunk_rows: int = Field(default=10_000, ge=1, le=10_000_000)
    cron: str = "*/5 * * * *"
    # The capture-lag check fails when the source is more than this many SCNs ahead of the log.
    max_lag_scn: int | None = Field(default=None, ge=0)
    # The capture_lag and snapshot freshness checks fail when the log (or a snapshot) is this many
    # seconds of source commit time behind.
    max_lag_seconds: float | None = Field(default=None, gt=0)

    _check_cron = field_validator("cron")(lambda cls, v: schedule(v, "'*/5 * * * *' (every 5 minutes) or '@hourly'"))


class ReconcileConfig(Strict):
    """When the ``reconciled`` check (a full comparison with the source) runs: on its own cron schedule
    and/or after every N successful sync runs; never as part of every sync."""

    cron: str | None = "0 3 * * *"  # daily at 03:00; null: no schedule
    every_syncs: int | None = Field(default=None, ge=1)

    _check_cron = field_validator("cron")(
        lambda cls, v: schedule(v, "'0 3 * * *' (daily at 03:00), or null for no schedule"))


class VerifyConfig(Strict):
    """The rolling verification every sync runs (``sync.verify``): a slice of each table's keys compared with
    the source at one SCN, differences repaired (``repair``), only reported (``report``), or nothing (``off``).
    Written as a bare policy (``verify: report``) or as these fields."""

    policy: VerifyPolicy = "repair"
    # Every row of a table is compared at least once in this many runs (288: a day of 5-minute runs), unless
    # that takes more than ``share`` of a run: then the rotation is longer (``databus status`` shows it).
    every_runs: int = Field(default=288, ge=1)
    # The share of a run's time verification may take; the slice grows when runs are cheap and shrinks when not.
    share: float = Field(default=0.1, gt=0, le=1)
    min_rows: int = Field(default=1_000, ge=1)  # a slice's rows, at least (a quiet table still rotates)
    max_rows: int = Field(default=200_000, ge=1)  # and at most (a slice is held in memory)

    @model_validator(mode="before")
    @classmethod
    def _bare_policy(cls, value: Any) -> Any:
        return {"policy": yaml_policy(value)} if isinstance(value, str | bool) else value


def yaml_policy(value: Any) -> Any:
    """A policy as YAML 1.1 reads it: ``verify: off`` is the boolean false there (and ``on`` true)."""
    return ("repair" if value else "off") if isinstance(value, bool) else value


class UpkeepConfig(Strict):
    """Upkeep of the source's snapshot tables (``sync.upkeep``): small files joined, old files vacuumed,
    the Delta log checkpointed, on a schedule of its own."""

    cron: str | None = "0 4 * * *"  # daily at 04:00 (the schedule starts stopped); null: no schedule
    # VACUUM keeps files the tables stopped naming less than this long ago (time travel reaches that far),
    # and always those of the last bootstrap's version (what rebuild restores).
    retain_hours: int = Field(default=168, ge=0)

    _check_cron = field_validator("cron")(
        lambda cls, v: schedule(v, "'0 4 * * *' (daily at 04:00), or null for no schedule"))
