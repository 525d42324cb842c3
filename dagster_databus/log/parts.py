"""A part of a logical table with its change log: what a logical table's consumer and its sync both read a
part by (``consumer.logical``, ``dataplane.logical``)."""

from __future__ import annotations

from dataclasses import dataclass

from dagster_databus.config import LogicalPartConfig
from dagster_databus.log.changelog import ChangeLog


@dataclass(frozen=True, slots=True)
class PartLog:
    config: LogicalPartConfig
    log: ChangeLog

    @property
    def label(self) -> str:
        return self.config.label
