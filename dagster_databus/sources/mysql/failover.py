"""Primary/standby failover for MySQL sources (Canal's ``master`` / ``standby`` addresses; docs/ha.md).

When the server a source reads stays unreachable for ``failover.retries`` attempts,
``failover.interval_s`` apart, capture switches to the other configured server and finds its
position there:

- by GTID (MariaDB): right after the last transaction captured, located through each binlog's
  ``Gtid_list`` and ``SHOW BINLOG EVENTS``. Nothing is read twice and nothing is skipped; a
  standby that lacks that transaction is refused (``StandbyBehindError``).
- by commit time: from the first transaction committed at or after the last captured commit
  time minus ``failover.fallback_interval_s``. Transactions in that interval are read again;
  the snapshot merge absorbs them (they carry the same images, in the same order).

Binlog positions of the two servers are unrelated, so the switch opens the next *era*: every
SCN after it is larger than every SCN before (``Scn.from_binlog``), and the change log records
the switch, the position found and the old epoch in its manifest (``LogWriter.switch_epoch``).
"""

from __future__ import annotations

import re
import time
from contextlib import closing
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dagster_databus.errors import LogGapError, SourceUnavailableError, StandbyBehindError
from dagster_databus.sources.base import FailoverState
from dagster_databus.sources.mysql.connect import Cursor
from dagster_databus.sources.mysql.positions import MysqlPositions
from dagster_databus.sources.mysql.servers import MysqlServers, other_role
from dagster_databus.sources.mysql.wire import codes
from dagster_databus.sources.mysql.wire.stream import DumpStream
from dagster_databus.sources.mysql.wire.unpack import query_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dagster_databus.core.progress import Progress
    from dagster_databus.log.manifest import Checkpoint

_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass(frozen=True, slots=True)
class Switch:
    """A failover: where capture was, where it resumes, and how the position was found."""

    from_server: str
    to_server: str
    from_epoch: str
    to_epoch: str
    method: str  # "gtid" or "timestamp"
    era: int
    resume_file: str
    resume_offset: int
    resume_scn: str
    reason: str
    last_gtid: str = ""
    last_commit_ts: int | None = None  # seconds, source clock: the last transaction captured before
    search_from_ts: int | None = None  # seconds: where the timestamp search started

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


def unreachable(servers: MysqlServers, retries: int, interval_s: float) -> SourceUnavailableError | None:
    """None if the active server answers within ``retries`` attempts, else the last error."""
    error: SourceUnavailableError | None = None
    for attempt in range(retries):
        try:
            servers.probe()
            return None
        except SourceUnavailableError as exc:
            error = exc
            if attempt + 1 < retries:
                time.sleep(interval_s)
    return error


def parse_gtid(text: str) -> tuple[int, int, int]:
    match = _GTID.match(text.strip())
    if not match:
        raise ValueError(f"not a MariaDB GTID: {text!r}")
    domain, server, seq = (int(g) for g in match.groups())
    return domain, server, seq


def _gtid_list(text: str) -> dict[int, int]:
    """Domain → sequence number of a GTID list such as ``[0-1-3,1-2-5]`` or ``0-1-3``."""
    out: dict[int, int] = {}
    for part in text.strip().strip("[]").split(","):
        if part.strip():
            domain, _, seq = parse_gtid(part)
            out[domain] = seq
    return out


def find_after_gtid(source: MysqlServers, cur: Cursor, gtid: str) -> tuple[str, int]:
    """The binlog position right after transaction ``gtid`` on the server ``cur`` is connected to (the one
    ``source`` reads)."""
    domain, _, seq = parse_gtid(gtid)
    where = source.describe()
    cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
    row = cur.fetchone()
    assert row is not None  # a SELECT without FROM returns its one row
    have = _gtid_list(str(row[0] or "")).get(domain, 0)
    if have < seq:
        raise StandbyBehindError(
            f"{where} has written GTID domain {domain} only up to sequence {have}, but capture already read "
            f"{gtid} from the other server: switching now would lose or re-order committed changes",
            "if the server is still applying its relay log, wait until it has applied everything it received "
            "and run capture again; if those transactions are lost for good (the old primary died before "
            f"sending them), run `databus bootstrap --source {source.name}` so the snapshots match this server",
            source=source.name, gtid=gtid, server_has=have)
    cur.execute("SHOW BINARY LOGS")
    files = [r[0] for r in cur.fetchall()]
    for file in reversed(files):
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 4", (file,))
        listed = next((r[5] for r in cur.fetchall() if r[2] == "Gtid_list"), "[]")
        if _gtid_list(listed).get(domain, 0) >= seq:
            continue  # the transaction was written before this file began
        cur.execute("SHOW BINLOG EVENTS IN %s", (file,))
        inside = False
        for _, _, kind, _, end, info in cur.fetchall():
            if kind == "Gtid":
                inside = str(info).split()[-1] == gtid
                ddl = inside and not str(info).startswith("BEGIN")
                continue
            if inside and (kind == "Xid" or (kind == "Query" and (ddl or str(info).strip().upper() == "COMMIT"))):
                return file, int(end)
        raise StandbyBehindError(
            f"{where} has GTID domain {domain} past sequence {seq}, but not transaction {gtid} itself: its "
            "history diverged from the server capture read before (a different transaction has that number)",
            f"run `databus bootstrap --source {source.name}` so the snapshots match this server",
            source=source.name, gtid=gtid, transient=False)
    raise LogGapError(
        f"{where} no longer holds the binlog with GTID {gtid}: its oldest binlog {files[0]} starts after it",
        f"run `databus bootstrap --source {source.name}`, or set sources.{source.name}.on_purged: bootstrap",
        source=source.name)


def _transaction_starts(source: MysqlServers, file: str) -> list[tuple[int, int]]:
    """(resume offset, timestamp) of every transaction in one binlog file, in file order.

    The resume offset is the end of the transaction before (4 for the file's first): reading from
    there yields the transaction whole, plus at most some non-transactional events.
    """
    starts: list[tuple[int, int]] = []
    previous_end, opened = 4, False  # opened: a GTID event began the transaction, so BEGIN is no new start
    conn = source.connect(database=False)
    try:
        for event in DumpStream(conn, source.config.replica_server_id(), file, 4):
            code = event.type
            if code == codes.ROTATE:
                if bytes(event.body[8:]).decode() != file:
                    break
            elif code in (codes.MARIADB_GTID, codes.GTID, codes.ANONYMOUS_GTID, codes.GTID_TAGGED):
                starts.append((previous_end, event.timestamp))
                opened = True
            elif code in (codes.XID, codes.TRANSACTION_PAYLOAD):
                previous_end, opened = event.log_pos, False
            elif code in (codes.QUERY, codes.QUERY_COMPRESSED):
                query = query_text(event.body, code == codes.QUERY_COMPRESSED, f"{file}:{event.log_pos}")
                if query.strip().upper() == "BEGIN":
                    if not opened:
                        starts.append((previous_end, event.timestamp))
                    opened = True
                else:  # COMMIT, or DDL (a transaction of its own)
                    previous_end, opened = event.log_pos, False
    finally:
        conn.close()
    return starts


def find_by_time(source: MysqlServers, cur: Cursor, since_ts: int, captured_ts: int | None = None) -> tuple[str, int]:
    """The start of the first transaction committed at or after ``since_ts`` (seconds).

    ``captured_ts``, the commit time of the last transaction capture read from the other server:
    replicated events keep the primary's timestamps, so a server whose newest transaction is older
    lacks that transaction, and switching to it would lose it.
    """
    cur.execute("SHOW BINARY LOGS")
    sizes = [(r[0], int(r[1])) for r in cur.fetchall()]
    newest: int | None = None
    for i in range(len(sizes) - 1, -1, -1):
        file, size = sizes[i]
        starts = _transaction_starts(source, file)
        if starts and newest is None:
            newest = max(ts for _, ts in starts)
            if captured_ts is not None and newest < captured_ts:
                raise StandbyBehindError(
                    f"{source.describe()}'s newest transaction was committed at {newest}, before the last one "
                    f"capture already read from the other server ({captured_ts}): this server lacks it",
                    "if the server is still applying its relay log, wait until it has applied everything it "
                    "received and run capture again; if those transactions are lost for good, run "
                    f"`databus bootstrap --source {source.name}` so the snapshots match this server",
                    source=source.name, captured_ts=captured_ts, server_newest_ts=newest)
        if starts and starts[0][1] < since_ts:
            later = [offset for offset, ts in starts if ts >= since_ts]
            return (file, later[0]) if later else (file, size)
    if captured_ts is not None and newest is None:
        raise StandbyBehindError(
            f"{source.describe()} has no transaction in its binlogs, but capture already read transactions "
            "from the other server", f"make it a replica that logs what it replicates (log_slave_updates), or "
            f"run `databus bootstrap --source {source.name}`", source=source.name)
    oldest = sizes[0][0]
    if int(oldest.rsplit(".", 1)[1]) != 1:
        raise LogGapError(
            f"{source.describe()} holds no binlog from before {since_ts} (its oldest is {oldest}): transactions "
            "of the fallback interval may have been purged there",
            f"run `databus bootstrap --source {source.name}`, or set sources.{source.name}.on_purged: bootstrap",
            source=source.name)
    return oldest, 4  # the server's whole binlog history is there: read all of it


class MysqlFailover:
    """Switching a source between its primary and its standby (``base.Failover``): which server a checkpoint
    names, whether it is down, and where capture resumes on the other one."""

    def __init__(self, servers: MysqlServers, positions: MysqlPositions) -> None:
        self.servers = servers
        self.positions = positions
        self.config = servers.config
        self.name = servers.name

    def check_server(self, state: Mapping[str, str], progress: Progress) -> SourceUnavailableError | None:
        """Point capture at the server the checkpoint ``state`` names; the error that server gave if it stayed
        down for ``failover.retries`` attempts and the source has a standby to fail over to, else None."""
        servers = self.servers
        servers.attach(state)
        settings = self.config.failover
        if self.config.standby is None:
            return None
        down = unreachable(servers, settings.retries, settings.interval_s)
        if down is not None:
            progress(f"{self.name}: {servers.describe()} did not answer {settings.retries} attempts "
                     f"{settings.interval_s:g}s apart ({down.problem}); failing over to the {other_role(servers.role)}")
        return down

    def plan_switch(self, checkpoint: Checkpoint, down: SourceUnavailableError,
                    progress: Progress) -> tuple[Switch, dict[str, str]] | None:
        """The switch to the other server and the checkpoint state to resume with, decided from ``checkpoint``
        as read under the log's writer lock (another run may have switched already: then its server is
        attached and None returned, as when the server answers again). The caller commits it to the change log
        before any change is read from the new server."""
        self.servers.attach(checkpoint.state)
        if unreachable(self.servers, 1, 0) is None:
            return None
        switch, state = self.fail_over(dict(checkpoint.state), checkpoint.updated_ms, checkpoint.epoch, down.problem)
        reread = switch.last_commit_ts if switch.method == "timestamp" else None
        state.update(FailoverState(switched_ms=int(time.time() * 1000), reread_through_s=reread).entries())
        progress(f"{self.name}: switching to {switch.to_server}, resuming at {switch.resume_file}:"
                 f"{switch.resume_offset} (found by {switch.method}; era {switch.era})")
        return switch, state

    def fail_over(self, state: dict[str, str], checkpoint_ms: int, epoch: str,
                  reason: str) -> tuple[Switch, dict[str, str]]:
        """Switch to the other server; return the switch and the checkpoint state to resume with."""
        servers, settings = self.servers, self.config.failover
        origin = servers.describe()
        servers.switch()
        with closing(servers.connect()) as conn, conn.cursor() as cur:
            gtid = state.get("gtid", "")
            server_gtids = self.positions.gtid_pos(cur)
            method = "gtid" if settings.position == "gtid" and gtid and server_gtids else "timestamp"
            last_ts = int(state["commit_ts"]) if state.get("commit_ts") else checkpoint_ms // 1000
            search_from = None
            if method == "gtid":
                file, offset = find_after_gtid(servers, cur, gtid)
            else:
                search_from = last_ts - settings.fallback_interval_s
                file, offset = find_by_time(servers, cur, search_from,
                                            int(state["commit_ts"]) if state.get("commit_ts") else None)
        resume = servers.scn(file, offset)
        new_state = {**servers.base_state(file, self.positions.binlog_created(file)),
                     **{k: state[k] for k in ("gtid", "commit_ts") if state.get(k)}}
        switch = Switch(from_server=origin, to_server=servers.describe(), from_epoch=epoch,
                        to_epoch=self.positions.epoch(), method=method, era=servers.era, resume_file=file,
                        resume_offset=offset, resume_scn=str(resume), reason=reason, last_gtid=gtid,
                        last_commit_ts=last_ts, search_from_ts=search_from)
        return switch, new_state
