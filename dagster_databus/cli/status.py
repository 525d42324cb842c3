"""``databus status``: where every source, table, consumer and logical table stands, as one table whose columns
are as wide as their values (a binlog position is 11 digits and more), with notes under the row they concern."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.consumer.pull import MetaManager
from dagster_databus.core.lag import scn_lag
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import DatabusError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Failover, FailoverState, Retaining, Source
from dagster_databus.sources.registry import source_kind
from dagster_databus.sync.rotation import VerifyState

HEADER = ("source/table", "checkpoint", "snapshot", "source", "lag", "segments", "bytes")
LEGEND = ("checkpoint: the change log holds every commit up to this SCN; snapshot: the Delta snapshot reflects the "
          "log up to this SCN; source: the source's current position; lag: how far behind, in SCN units ({units}): "
          "for a source the source minus the checkpoint, for a table or consumer the log minus where it stands; "
          '"-" where there is nothing yet, "?" where the source cannot say.')


@dataclass(frozen=True)
class Row:
    """One line of the table: the cells under ``HEADER`` (fewer: the rest empty) and a note after them."""

    cells: Sequence[str]
    after: str = ""


Line = Row | str  # a str: a note on a line of its own


def status_lines(config: DatabusConfig) -> list[str]:
    """The report, as lines."""
    lines: list[Line] = [Row(HEADER)]
    for source in config.sources:
        lines += _source(config, source)
    for logical in config.logical_tables:
        from dagster_databus.dataplane.logical import LogicalSnapshot

        snap = LogicalSnapshot(config.lake, logical.name)
        lines.append(Row([f"logical {logical.name}"]))
        for part in logical.parts:
            applied = snap.applied_scn(part.label)
            log_scn = ChangeLog(config.lake, part.source).manifest().last_scn
            lines.append(Row([f"  {part.label}", "", _scn(applied), "", _behind(log_scn, applied)]))
    kinds = [source_kind(k) for k in dict.fromkeys(s.kind for s in config.sources)]
    units = "; ".join(f"{k.label}: {k.positions}" for k in kinds)
    return [*render(lines), "", *textwrap.wrap(LEGEND.format(units=units), 110)]


def render(lines: Sequence[Line]) -> list[str]:
    """Rows padded to their columns' widest value (the first column left-aligned, the rest right), two spaces
    between columns; notes as they are."""
    rows = [line for line in lines if isinstance(line, Row)]
    widths = [max((len(r.cells[i]) for r in rows if i < len(r.cells)), default=0) for i in range(len(HEADER))]
    out = []
    for line in lines:
        if isinstance(line, str):
            out.append(line)
            continue
        cells = [*line.cells, *[""] * (len(HEADER) - len(line.cells))]
        text = "  ".join([cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:],
                                                                                  strict=True))])
        out.append(f"{text}  {line.after}".rstrip())
    return out


def _source(config: DatabusConfig, source: SourceConfig) -> list[Line]:
    log = ChangeLog(config.lake, source.name)
    manifest = log.manifest()
    checkpoint = manifest.checkpoint
    cp = checkpoint.scn if checkpoint else None
    src: Source | None = None
    position: Scn | None = None
    try:
        src = open_source(source, config.lake)
        position = src.stream.high_water_mark()
    except Exception:  # a report: a source that cannot say where it is (not installed, down) shows "?"
        pass
    lines: list[Line] = [Row([source.name, _scn(cp), "", "?" if position is None else str(position),
                              _behind(position, cp), str(len(manifest.segments)),
                              str(sum(s.bytes for s in manifest.segments))])]
    for table in source.tables:
        applied = DeltaSnapshot(config.lake, source.name, table.name).applied_scn()
        lines.append(Row([f"  {table.name}", "", _scn(applied), "", _behind(manifest.last_scn, applied)],
                         _verified(config, source, table.name)))
    lines += [f"  damaged: {problem}"
              for problem in capture.lake_damage(config, source.name, [t.name for t in source.tables])]
    if src is not None:
        lines += _retention(src) + _server(src, manifest)
    for client, cursor in MetaManager(config.lake, source.name).cursors().items():
        at = cursor or manifest.start_scn
        lines.append(Row([f"  consumer {client}", _scn(cursor), "", "", _behind(manifest.last_scn, at)],
                         "behind retention: must bootstrap" if at < manifest.start_scn else ""))
    return lines


def _verified(config: DatabusConfig, source: SourceConfig, table: str) -> str:
    """Where the table's rolling verification stands: its last whole pass, and the keys it found different."""
    policy = source.verify_policy(table)
    if policy == "off":
        return "verify: off"
    state = VerifyState.load(config, source.name, table)
    if state.runs == 0:
        return "not verified yet"
    if state.last_full_ms is None:
        full = f"first pass {state.pass_runs} run(s) in"
    else:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(state.last_full_ms / 1000))
        full = f"fully verified {when} UTC ({state.last_full_runs} runs)"
    return f"{full}; repairs {state.repairs}" + (" (verify: report)" if policy == "report" else "")


def _retention(src: Source) -> list[Line]:
    """What the source's server keeps for capture (a replication slot's WAL), where it keeps any."""
    if not isinstance(src, Retaining):
        return []
    try:
        kept = src.retention()
    except DatabusError as exc:
        return [f"  retention: ? ({exc.problem})"]
    held = "not created" if kept.retained_bytes is None else f"holds {kept.retained_bytes:,} bytes of WAL"
    lag = kept.lag_seconds(int(time.time() * 1000))
    waiting = "" if lag is None else "; no change waits" if lag == 0 else f"; the oldest change waits {lag:,.1f}s"
    return [f"  {kept.holder} {held} ({kept.status}){waiting}"]


def _server(src: Source, manifest: Manifest) -> list[Line]:
    """Which server a source with servers to switch between reads, and its switches so far."""
    if not isinstance(src, Failover) or not src.has_standby():
        return []
    checkpoint = manifest.checkpoint
    server = FailoverState.of(checkpoint.state).reading if checkpoint else "primary"
    switches = "; ".join(f"{e.get('from_server')} -> {e.get('to_server')} by {e.get('method')}"
                         for e in manifest.lineage) or "none"
    return [f"  reading the {server} (failovers: {switches})"]


def _scn(scn: Scn | None) -> str:
    return "-" if scn is None else str(scn)


def _behind(ahead: Scn | None, behind: Scn | None) -> str:
    return "-" if ahead is None or behind is None else str(scn_lag(ahead, behind))
