"""Every binlog event type code MySQL 5.7 to 9.x and MariaDB 10.x to 11.x write, and what capture does with
each: decode it, ignore it for a stated reason, or stop.

Capture reads the stream against this table and nothing else: a code that is not in it stops capture
like a ``stop`` entry does, so a server that starts writing a new kind of event is never read past in
silence. Codes come from MySQL's ``mysql::binlog::event::Log_event_type`` (``binlog_event.h``) and
MariaDB's ``Log_event_type`` (``sql/log_event.h``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Disposition(Enum):
    DECODE = "decoded"
    IGNORE = "ignored"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class EventType:
    code: int
    name: str
    disposition: Disposition
    why: str  # for IGNORE: why nothing is lost; for STOP: what the event means and the fix

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"


_D, _I, _S = Disposition.DECODE, Disposition.IGNORE, Disposition.STOP

_PRE_GA = ("row events of MySQL 5.1 betas, which capture does not read: upgrade the server and run "
           "`databus bootstrap --source {source}`")
_STATEMENT = ("it belongs to statement-based logging, whose changes cannot be read as rows; set "
              "binlog_format=ROW (globally and in every session that writes captured tables), then run "
              "`databus bootstrap --source {source}`")

EVENT_TYPES: dict[int, EventType] = {e.code: e for e in (
    EventType(0, "UNKNOWN_EVENT", _S, "the server wrote an event it does not name; the binlog may be damaged: "
              "run `databus bootstrap --source {source}`"),
    EventType(1, "START_EVENT_V3", _S, "a binlog of format v1/v3 (MySQL before 5.0), which capture does not read: "
              "upgrade the server and run `databus bootstrap --source {source}`"),
    EventType(2, "QUERY_EVENT", _D, "BEGIN, COMMIT, ROLLBACK, SAVEPOINT, XA and DDL"),
    EventType(3, "STOP_EVENT", _I, "the server stopped; the next binlog follows by a rotation"),
    EventType(4, "ROTATE_EVENT", _D, "the next binlog file"),
    EventType(5, "INTVAR_EVENT", _I, "LAST_INSERT_ID / INSERT_ID for replaying a statement: row images carry "
              "the values"),
    EventType(6, "LOAD_EVENT", _S, _STATEMENT),
    EventType(7, "SLAVE_EVENT", _I, "never written (reserved since MySQL 4.0)"),
    EventType(8, "CREATE_FILE_EVENT", _S, _STATEMENT),
    EventType(9, "APPEND_BLOCK_EVENT", _S, _STATEMENT),
    EventType(10, "EXEC_LOAD_EVENT", _S, _STATEMENT),
    EventType(11, "DELETE_FILE_EVENT", _S, _STATEMENT),
    EventType(12, "NEW_LOAD_EVENT", _S, _STATEMENT),
    EventType(13, "RAND_EVENT", _I, "RAND() seeds for replaying a statement: row images carry the values"),
    EventType(14, "USER_VAR_EVENT", _I, "user variables for replaying a statement: row images carry the values"),
    EventType(15, "FORMAT_DESCRIPTION_EVENT", _D, "a binlog file's header: its creation time and checksum"),
    EventType(16, "XID_EVENT", _D, "the commit of a transaction"),
    EventType(17, "BEGIN_LOAD_QUERY_EVENT", _S, _STATEMENT),
    EventType(18, "EXECUTE_LOAD_QUERY_EVENT", _S, _STATEMENT),
    EventType(19, "TABLE_MAP_EVENT", _D, "the table and column shapes of the row events after it"),
    EventType(20, "PRE_GA_WRITE_ROWS_EVENT", _S, _PRE_GA),
    EventType(21, "PRE_GA_UPDATE_ROWS_EVENT", _S, _PRE_GA),
    EventType(22, "PRE_GA_DELETE_ROWS_EVENT", _S, _PRE_GA),
    EventType(23, "WRITE_ROWS_EVENT_V1", _D, "inserted rows"),
    EventType(24, "UPDATE_ROWS_EVENT_V1", _D, "updated rows, before and after"),
    EventType(25, "DELETE_ROWS_EVENT_V1", _D, "deleted rows"),
    EventType(26, "INCIDENT_EVENT", _S, "the server recorded an incident: changes may be missing from the binlog "
              "after this point (for example a transaction too large for the binlog cache): run "
              "`databus bootstrap --source {source}` so the snapshots match the server again"),
    EventType(27, "HEARTBEAT_LOG_EVENT", _I, "a keep-alive of the replication connection, never in a file"),
    EventType(28, "IGNORABLE_LOG_EVENT", _I, "marked ignorable by the server: it carries no change"),
    EventType(29, "ROWS_QUERY_LOG_EVENT", _I, "the statement text of the row events after it "
              "(binlog_rows_query_log_events), informational"),
    EventType(30, "WRITE_ROWS_EVENT", _D, "inserted rows (v2)"),
    EventType(31, "UPDATE_ROWS_EVENT", _D, "updated rows, before and after (v2)"),
    EventType(32, "DELETE_ROWS_EVENT", _D, "deleted rows (v2)"),
    EventType(33, "GTID_LOG_EVENT", _D, "the start of a transaction and its GTID"),
    EventType(34, "ANONYMOUS_GTID_LOG_EVENT", _D, "the start of a transaction without a GTID"),
    EventType(35, "PREVIOUS_GTIDS_LOG_EVENT", _I, "a binlog file's header: the GTIDs of earlier files"),
    EventType(36, "TRANSACTION_CONTEXT_EVENT", _I, "group replication's certification data, no change"),
    EventType(37, "VIEW_CHANGE_EVENT", _I, "a group replication membership change, no row change"),
    EventType(38, "XA_PREPARE_LOG_EVENT", _S, "an XA transaction was prepared; its rows are in the binlog but "
              "whether it commits is only known later, in another transaction, which capture does not follow "
              "yet: stop XA transactions on captured tables, then run `databus bootstrap --source {source}`"),
    EventType(39, "PARTIAL_UPDATE_ROWS_EVENT", _S, "a JSON column was logged as a partial update "
              "(binlog_row_value_options=PARTIAL_JSON), which does not carry the whole new value: SET GLOBAL "
              "binlog_row_value_options = '' (and in my.cnf, and in sessions that set it), then run "
              "`databus bootstrap --source {source}`"),
    EventType(40, "TRANSACTION_PAYLOAD_EVENT", _D, "a whole transaction's events, compressed "
              "(binlog_transaction_compression)"),
    EventType(41, "HEARTBEAT_LOG_EVENT_V2", _I, "a keep-alive of the replication connection, never in a file"),
    EventType(42, "GTID_TAGGED_LOG_EVENT", _D, "the start of a transaction and its tagged GTID (MySQL 8.3+)"),
    EventType(43, "LARGE_TRANSACTION_HEADER_EVENT", _I, "a hint ahead of a large transaction (MySQL 9.x), written "
              "ignorable: the transaction's own events follow"),
    # MariaDB
    EventType(160, "ANNOTATE_ROWS_EVENT", _I, "the statement text of the row events after it "
              "(binlog_annotate_row_events), informational"),
    EventType(161, "BINLOG_CHECKPOINT_EVENT", _I, "which binlogs crash recovery needs, no change"),
    EventType(162, "GTID_EVENT", _D, "the start of a transaction (or a DDL statement) and its GTID"),
    EventType(163, "GTID_LIST_EVENT", _I, "a binlog file's header: the GTID state when it began"),
    EventType(164, "START_ENCRYPTION_EVENT", _I, "the file is encrypted from here; the server decrypts what it "
              "sends to a replica"),
    EventType(165, "QUERY_COMPRESSED_EVENT", _D, "a query event with its statement compressed (log_bin_compress)"),
    EventType(166, "WRITE_ROWS_COMPRESSED_EVENT_V1", _D, "inserted rows, compressed (log_bin_compress)"),
    EventType(167, "UPDATE_ROWS_COMPRESSED_EVENT_V1", _D, "updated rows, compressed (log_bin_compress)"),
    EventType(168, "DELETE_ROWS_COMPRESSED_EVENT_V1", _D, "deleted rows, compressed (log_bin_compress)"),
    EventType(169, "WRITE_ROWS_COMPRESSED_EVENT", _D, "inserted rows (v2), compressed (log_bin_compress)"),
    EventType(170, "UPDATE_ROWS_COMPRESSED_EVENT", _D, "updated rows (v2), compressed (log_bin_compress)"),
    EventType(171, "DELETE_ROWS_COMPRESSED_EVENT", _D, "deleted rows (v2), compressed (log_bin_compress)"),
    EventType(172, "PARTIAL_ROW_DATA_EVENT", _S, "a row event split in fragments (MariaDB 12.3+, "
              "binlog_row_event_fragment_threshold), which capture does not reassemble yet: raise "
              "binlog_row_event_fragment_threshold above the largest row event, then run "
              "`databus bootstrap --source {source}`"),
)}

UNKNOWN_FIX = ("this version of capture does not know binlog event type {code}, so it cannot tell whether "
               "the event changes captured rows; upgrade dagster-databus (or report the server version), "
               "then run capture again")


LOG_EVENT_IGNORABLE_F = 0x80


def event_type(code: int, flags: int = 0) -> EventType:
    """The table's entry for ``code``. An unknown code is a stop, unless the server flagged the event
    ignorable (which it does for events older readers may skip)."""
    known = EVENT_TYPES.get(code)
    if known is not None:
        return known
    if flags & LOG_EVENT_IGNORABLE_F:
        return EventType(code, "unknown type", Disposition.IGNORE, "unknown, but flagged ignorable by the "
                         "server (LOG_EVENT_IGNORABLE_F): readers that do not know it may skip it")
    return EventType(code, "unknown type", Disposition.STOP, UNKNOWN_FIX.format(code=code))


# The codes the reader dispatches on.
QUERY, STOP, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP = 2, 3, 4, 15, 16, 19
HEARTBEAT, HEARTBEAT_V2 = 27, 41
GTID, ANONYMOUS_GTID, GTID_TAGGED, MARIADB_GTID = 33, 34, 42, 162
TRANSACTION_PAYLOAD = 40
QUERY_COMPRESSED = 165
WRITE_ROWS = frozenset((23, 30, 166, 169))
UPDATE_ROWS = frozenset((24, 31, 167, 170))
DELETE_ROWS = frozenset((25, 32, 168, 171))
ROWS = WRITE_ROWS | UPDATE_ROWS | DELETE_ROWS
ROWS_V2 = frozenset((30, 31, 32, 169, 170, 171))  # a post-header with extra data after the flags
COMPRESSED_ROWS = frozenset(range(166, 172))
PARTIAL_UPDATE_ROWS = 39
XA_PREPARE = 38
