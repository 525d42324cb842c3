"""Every PostgreSQL type the product maps, end to end: source → change log → Delta snapshot → consumers.

One table holds a column per type and edge case (integer bounds, numeric(38,10) at its limits, a negative
scale, NaN and signed infinities and zeros of floats, text with emoji and control characters, char(n)
padding, date and timestamp bounds, ``24:00:00``, timestamptz offsets with microseconds, intervals, json
beside jsonb, bytea with zero bytes, enums, arrays with NULLs and more dimensions, a domain, network types).
One set of rows is there before the bootstrap reads the table; the same values are written again after it, as
inserts and updates, so they arrive by change events. On the local engine and on the Spark engine (whose
bootstrap reads key ranges in tasks), the snapshot must hold, per value, exactly the Python value the literal
means, the same by both roads; the change log's events and a consumer must carry the same values.

The database's own settings are hostile (DateStyle German, IntervalStyle postgres, a quarter-hour time zone,
extra_float_digits 0, bytea_output escape): capture's sessions set their own, so none of them may show.

Values the product refuses (an infinite timestamp, a numeric NaN, a date BC, a money column) stop the run
with a typed error naming table, column and the fix, by either road, and nothing is written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.types import float32
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import DatabusError, SchemaMismatchError, UnsupportedTypeError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.storage.lake import Lake
from tests.integration.common.test_types import doc_rows, round_trip
from tests.support.checks import cycle
from tests.support.harness import PostgresHarness, make_config
from tests.support.postgres import PostgresServer

D = decimal.Decimal
UTC = dt.UTC
N38 = "9" * 28 + "." + "9" * 10  # numeric(38,10)'s largest value
JSON_TEXT = r'{"b":1,  "a":[1,2.50,"x"], "a":"dup", "u":"\u00e9"}'  # spaces, key order, a duplicate, an escape


@dataclass(frozen=True)
class Col:
    name: str
    declared: str
    delta: str  # the snapshot's Delta type
    values: tuple[tuple[str, Any], ...]  # (SQL literal, the Python value it must arrive as), one per variant


def v(*pairs: tuple[str, Any]) -> tuple[tuple[str, Any], ...]:
    return pairs


COLUMNS: list[Col] = [
    Col("i2", "smallint", "short", v(("-32768", -32768), ("32767", 32767), ("0", 0))),
    Col("i4", "integer", "integer", v(("-2147483648", -2147483648), ("2147483647", 2147483647))),
    Col("i8", "bigint", "long", v(("-9223372036854775808", -(2**63)), ("9223372036854775807", 2**63 - 1))),
    Col("oid_", "oid", "long", v(("4294967295", 4294967295), ("0", 0))),
    Col("posint", "posint", "integer", v(("1", 1), ("2147483647", 2147483647))),  # a domain over integer
    Col("n38", "numeric(38,10)", "decimal(38,10)", v(
        (N38, D(N38)), ("-" + N38, D("-" + N38)), ("0.0000000001", D("0.0000000001")),
        ("-0.00000000001", D("0E-10")), ("0", D("0E-10")), ("-0", D("0E-10")), ("1.5", D("1.5000000000")))),
    Col("n_neg", "numeric(10,-2)", "decimal(12,0)", v(
        ("12345678949", D("12345678900")), ("-999999999949", D("-999999999900")), ("150", D("200")),
        ("-49", D("0")))),
    Col("n_any", "numeric", "string", v(
        ("-1.5e-100", D("-1.5E-100")), ("123.4500", D("123.45")), ("1e30", D("1" + "0" * 30)),
        ("123456789012345678901234567890.123456789012345678901234567890",
         D("123456789012345678901234567890.12345678901234567890123456789")), ("0.000", D("0")), ("-0", D("0")))),
    Col("n_wide", "numeric(50,20)", "string", v(
        ("-123456789012345678901234567890.00000000000000000001",
         D("-123456789012345678901234567890.00000000000000000001")), ("0", D("0E-20")))),
    Col("f4", "real", "float", v(
        ("0.3", float32(0.3)), ("'NaN'", math.nan), ("'Infinity'", math.inf), ("'-Infinity'", -math.inf),
        ("'-0'", -0.0), ("3.4028235e38", float32(3.4028235e38)), ("1.4e-45", float32(1.4e-45)))),
    Col("f8", "double precision", "double", v(
        ("0.30000000000000004", 0.30000000000000004), ("'NaN'", math.nan), ("'Infinity'", math.inf),
        ("'-Infinity'", -math.inf), ("'-0'", -0.0), ("5e-324", 5e-324),
        ("1.7976931348623157e308", 1.7976931348623157e308), ("-1e-300", -1e-300))),
    Col("txt", "text", "string", v(
        ("'héllo ☃ 𝄞 😀 👩‍👩‍👧'", "héllo ☃ 𝄞 😀 👩‍👩‍👧"),
        (r"E'ctl \x01\x02\x1f\x7f\t\r\n end'", "ctl \x01\x02\x1f\x7f\t\r\n end"),
        ("''", ""), (r"E'back\\slash '' quote \"dq\" 50%'", "back\\slash ' quote \"dq\" 50%"),
        ("'   '", "   "))),
    Col("vc", "varchar(10)", "string", v(("'ünïcødé 10'", "ünïcødé 10"), ("''", ""), ("'a  '", "a  "))),
    Col("vc_any", "varchar", "string", v(("'x'", "x"),)),
    Col("ch", "char(5)", "string", v(("'ab'", "ab   "), ("''", "     "), ("'é'", "é    "), ("'abcde'", "abcde"))),
    Col("b", "boolean", "boolean", v(("true", True), ("false", False))),
    Col("d", "date", "date", v(
        ("'0001-01-01'", dt.date(1, 1, 1)), ("'9999-12-31'", dt.date(9999, 12, 31)),
        ("'2024-02-29'", dt.date(2024, 2, 29)), ("'1970-01-01'", dt.date(1970, 1, 1)))),
    Col("t", "time", "long", v(
        ("'24:00:00'", dt.timedelta(hours=24)), ("'00:00:00'", dt.timedelta(0)),
        ("'23:59:59.999999'", dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999)),
        ("'12:00:00.000001'", dt.timedelta(hours=12, microseconds=1)))),
    Col("t3", "time(3)", "long", v(("'01:02:03.4567'", dt.timedelta(hours=1, minutes=2, seconds=3,
                                                                    microseconds=457000)),)),
    Col("ttz", "timetz", "string", v(
        ("'12:00:00+02'", "12:00:00+02"), ("'23:59:59.999999-05:30'", "23:59:59.999999-05:30"),
        ("'24:00:00+00'", "24:00:00+00"), ("'00:00:00+14:59'", "00:00:00+14:59"))),
    Col("ts", "timestamp", "timestamp_ntz", v(
        ("'0001-01-01 00:00:00'", dt.datetime(1, 1, 1)),
        ("'9999-12-31 23:59:59.999999'", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
        ("'2024-02-29 12:34:56.000001'", dt.datetime(2024, 2, 29, 12, 34, 56, 1)),
        ("'1969-12-31 23:59:59.5'", dt.datetime(1969, 12, 31, 23, 59, 59, 500000)))),
    Col("ts0", "timestamp(0)", "timestamp_ntz", v(("'2024-06-01 12:00:00.6'", dt.datetime(2024, 6, 1, 12, 0, 1)),)),
    Col("tstz", "timestamptz", "timestamp", v(
        ("'2024-06-01 12:00:00.123456+05:30'", dt.datetime(2024, 6, 1, 6, 30, 0, 123456, UTC)),
        ("'0001-01-01 00:00:00+00'", dt.datetime(1, 1, 1, tzinfo=UTC)),
        ("'9999-12-31 23:59:59.999999+00'", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)),
        ("'2024-01-01 00:00:00.000001-08:00'", dt.datetime(2024, 1, 1, 8, 0, 0, 1, UTC)),
        ("'1800-01-01 00:00:00+05:53:28'", dt.datetime(1799, 12, 31, 18, 6, 32, tzinfo=UTC)),
        ("'1970-01-01 00:00:00+00'", dt.datetime(1970, 1, 1, tzinfo=UTC)))),
    Col("iv", "interval", "string", v(
        ("'1 year 2 mons -3 days 04:05:06.5'", "P1Y2M-3DT4H5M6.5S"), ("'0'", "PT0S"),
        ("'-1.5 seconds'", "PT-1.5S"), ("'-1 year -2 months'", "P-1Y-2M"), ("'100 hours 0.000001 seconds'",
                                                                              "PT100H0.000001S"))),
    Col("uid", "uuid", "string", v(("'123E4567-E89B-12D3-A456-426614174000'", "123e4567-e89b-12d3-a456-426614174000"),
                                   ("'00000000-0000-0000-0000-000000000000'", "00000000-0000-0000-0000-000000000000"))),
    # json keeps the text exactly as written; jsonb is PostgreSQL's normal form (keys sorted by length then
    # bytes, the last of duplicate keys, one space after ':' and ',', \u escapes decoded).
    Col("js", "json", "string", v(
        (f"'{JSON_TEXT}'", JSON_TEXT),
        ("'null'", "null"), ("'[]'", "[]"))),
    Col("jsb", "jsonb", "string", v(
        (f"'{JSON_TEXT}'", '{"a": "dup", "b": 1, "u": "é"}'), ("'null'", "null"), ("'[]'", "[]"),
        ("""'{"bb": 1.0e2, "a": {"z": true}}'""", '{"a": {"z": true}, "bb": 100}'))),
    Col("bin", "bytea", "binary", v(
        (r"'\x00ff00'", b"\x00\xff\x00"), ("''", b""), (r"'\x00'", b"\x00"), (r"'\x5c27225c'", b"\\'\"\\"),
        ("decode(repeat('ab', 3000), 'hex')", b"\xab" * 3000))),
    Col("mood", "mood", "string", v(("'happy'", "happy"), ("'ok 😀'", "ok 😀"))),
    Col("ints", "integer[]", "string", v(
        ("'{1,NULL,3}'", "{1,NULL,3}"), ("'{}'", "{}"), ("'{{1,2},{3,NULL}}'", "{{1,2},{3,NULL}}"),
        ("'[0:1]={7,8}'", "[0:1]={7,8}"))),
    Col("texts", "text[]", "string", v(
        ("""ARRAY['a b', NULL, 'c,d', 'q"x', '', 'NULL', 'é']""", '{"a b",NULL,"c,d","q\\"x","","NULL",é}'),
        ("'{{a,b},{c,d}}'", "{{a,b},{c,d}}"))),
    Col("moods", "mood[]", "string", v(("'{sad,happy}'", "{sad,happy}"),)),
    Col("stamps", "timestamptz[]", "string", v(("ARRAY['2024-06-01 12:00:00+02'::timestamptz]",
                                                '{"2024-06-01 10:00:00+00"}'),)),
    Col("inet_", "inet", "string", v(("'192.0.2.1/24'", "192.0.2.1/24"), ("'::ffff:1.2.3.4'", "::ffff:1.2.3.4"),
                                     ("'192.0.2.1'", "192.0.2.1"))),
    Col("cidr_", "cidr", "string", v(("'10.0.0.0/8'", "10.0.0.0/8"), ("'2001:db8::/32'", "2001:db8::/32"))),
    Col("mac", "macaddr", "string", v(("'08:00:2B:01:02:03'", "08:00:2b:01:02:03"),)),
    Col("bits", "bit(4)", "string", v(("B'1010'", "1010"),)),
    Col("vbits", "varbit", "string", v(("B'1'", "1"), ("B''", ""))),
    Col("rng", "numrange", "string", v(("'[1.5,2.5)'", "[1.5,2.5)"), ("'empty'", "empty"))),
    Col("tsrng", "tstzrange", "string", v(("'[2024-06-01 12:00+02,)'", '["2024-06-01 10:00:00+00",)'),)),
    Col("x", "xml", "string", v(("'<a b=\"1\">x</a>'", '<a b="1">x</a>'),)),
    Col("pt", "point", "string", v(("'(1.5,-2)'", "(1.5,-2)"),)),
    Col("lsn", "pg_lsn", "string", v(("'16/B374D848'", "16/B374D848"),)),
]
VARIANTS = max(len(c.values) for c in COLUMNS)


def variant(i: int) -> dict[str, tuple[str, Any]]:
    """Variant ``i`` of every column: (literal, expected); a column with fewer cases repeats them."""
    return {c.name: c.values[i % len(c.values)] for c in COLUMNS}


def insert(row_id: int, i: int) -> str:
    values = variant(i)
    literals = ", ".join(literal for literal, _ in values.values())
    return f"INSERT INTO typed (id, {', '.join(values)}) VALUES ({row_id}, {literals})"


def update(row_id: int, i: int) -> str:
    sets = ", ".join(f"{name} = {lit}" for name, (lit, _) in variant(i).items())
    return f"UPDATE typed SET {sets} WHERE id = {row_id}"


def expected(i: int | None) -> dict[str, Any]:
    return {name: None if i is None else value for name, (_, value) in variant(i or 0).items()}


# Rows present before the bootstrap: ids 1..VARIANTS (variant id-1), 50 all NULL, 60..62 changed afterwards.
BEFORE: dict[int, int | None] = {**{1 + i: i for i in range(VARIANTS)}, 50: None, 60: 0, 61: 1, 62: 2}
# After it, by change events: the same variants again as ids 101.., updates, a delete.
AFTER: dict[int, int | None] = {**BEFORE, **{101 + i: i for i in range(VARIANTS)}, 150: None, 60: 3, 61: None,
                                 160: 4}
del AFTER[62]
# The change events those writes are, in commit order: (op, id, variant of the row image).
EVENTS: list[tuple[str, int, int | None]] = [
    *(("i", 101 + i, i) for i in range(VARIANTS)), ("i", 150, None), ("u", 60, 3), ("u", 61, None), ("d", 62, None),
    ("i", 160, 0), ("u", 160, 4)]

HOSTILE_SETTINGS = ("DateStyle = 'German, DMY'", "IntervalStyle = 'postgres'", "TimeZone = 'Asia/Kathmandu'",
                    "extra_float_digits = 0", "bytea_output = 'escape'")


def same_value(got: Any, want: Any) -> bool:
    """Equal, of the same type; floats with the same NaN-ness and sign of zero; decimals with the same digits;
    datetimes with the same zone."""
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        if math.isnan(want):
            return math.isnan(got)
        return bool(got == want and math.copysign(1, got) == math.copysign(1, want))
    if isinstance(want, D):
        return bool(got == want and got.as_tuple() == want.as_tuple())
    if isinstance(want, dt.datetime):
        return bool(got == want and got.tzinfo == want.tzinfo)
    return bool(got == want)


def differences(got: dict[int, dict[str, Any]], want: dict[int, int | None], what: str) -> list[str]:
    problems = [f"{what}: ids {sorted(got)}, expected {sorted(want)}"] if sorted(got) != sorted(want) else []
    for row_id in sorted(set(got) & set(want)):
        wanted = expected(want[row_id])
        for name, value in wanted.items():
            if not same_value(got[row_id].get(name), value):
                literal = variant(want[row_id] or 0)[name][0] if want[row_id] is not None else "NULL"
                problems.append(f"{what}: id {row_id} {name} ({literal}) is {got[row_id].get(name)!r}, "
                                f"expected {value!r}")
    return problems


class Collector(DatabusConsumer):
    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []

    def on_data_event(self, event: ChangeEvent) -> None:
        self.events.append(event)


def final_rows(events: list[ChangeEvent]) -> dict[int, dict[str, Any]]:
    """The rows a consumer ends with, applying its events in order."""
    rows: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.op.value == "d":
            rows.pop(int(event.key[0]), None)
        else:
            rows[int(event.key[0])] = dict(event.row)
    return rows


def hostile_database(harness: PostgresHarness) -> None:
    """The database's own settings print every type otherwise than capture reads it; and the user types."""
    harness.server.execute(*(f'ALTER DATABASE "{harness.database}" SET {s}' for s in HOSTILE_SETTINGS))
    harness.execute(["CREATE TYPE mood AS ENUM ('sad', 'happy', 'ok 😀')",
                     "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)"])


def prepare(harness: PostgresHarness) -> None:
    """Hostile database defaults, the table and the rows before the bootstrap."""
    hostile_database(harness)
    columns = ", ".join(f"{c.name} {c.declared}" for c in COLUMNS)
    harness.execute([f"CREATE TABLE typed (id integer PRIMARY KEY, {columns})"])
    harness.execute([insert(row_id, i) if i is not None else f"INSERT INTO typed (id) VALUES ({row_id})"
                     for row_id, i in BEFORE.items()])


def change(harness: PostgresHarness) -> None:
    """What arrives by change events, in a few transactions."""
    harness.execute([insert(101 + i, i) for i in range(VARIANTS)] + ["INSERT INTO typed (id) VALUES (150)"])
    harness.execute([update(60, 3), "UPDATE typed SET " + ", ".join(f"{c.name} = NULL" for c in COLUMNS)
                     + " WHERE id = 61", "DELETE FROM typed WHERE id = 62"])
    harness.execute([insert(160, 0), update(160, 4)])  # inserted and updated in one transaction


@pytest.fixture
def harness(postgres: PostgresServer) -> Iterator[PostgresHarness]:
    db = PostgresHarness(postgres)
    try:
        yield db
    finally:
        db.close()


def snapshot_rows(config: DatabusConfig, schema: TableSchema) -> dict[int, dict[str, Any]]:
    return {int(r["id"]): r for r in schema.rows_from_arrow(DeltaSnapshot(config.lake, "shop", "typed").read())}


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_every_type_reaches_delta_the_log_and_consumers_exactly_by_either_road(
        harness: PostgresHarness, lake: Path | Lake, engine: str, lazy_spark: SparkRuntime) -> None:
    prepare(harness)
    config = make_config(lake, harness.source_config("shop", [("typed", ["id"])], bootstrap_chunk_rows=3,
                                                     poll={"chunk_rows": 5}), merge={"engine": engine})
    cycle(config, lazy_spark)
    latest = ChangeLog(config.lake, "shop").schemas.latest("typed")
    assert latest is not None
    schema = latest[1]
    problems = differences(snapshot_rows(config, schema), BEFORE, "snapshot after the bootstrap")
    change(harness)
    cycle(config, lazy_spark)

    # The snapshot: documented Delta types, and every value as expected whichever road brought it.
    delta_types = DeltaSnapshot(config.lake, "shop", "typed").delta_types()
    problems += [f"Delta type of {c.name} ({c.declared}) is {delta_types.get(c.name)}, expected {c.delta}"
                 for c in COLUMNS if delta_types.get(c.name) != c.delta]
    stored = snapshot_rows(config, schema)
    problems += differences(stored, AFTER, "snapshot")
    for i in range(VARIANTS):  # the same literals by the bootstrap (id 1+i) and by change events (id 101+i)
        problems += [f"{c.name}: bootstrap {stored[1 + i][c.name]!r} != change event {stored[101 + i][c.name]!r}"
                     for c in COLUMNS if not same_value(stored[1 + i][c.name], stored[101 + i][c.name])]

    # The change log: only the changes after the bootstrap, each row image exact.
    events = [e.event for e in ChangeLog(config.lake, "shop").read()]
    assert [(e.op.value, int(e.key[0])) for e in events] == [(op, row_id) for op, row_id, _ in EVENTS]
    for event, (op, row_id, i) in zip(events, EVENTS, strict=True):
        if op != "d":
            problems += differences({row_id: dict(event.row)}, {row_id: i}, f"change event {op} {row_id}")
    logged = final_rows(events)
    changed = {k: AFTER[k] for k in (*range(101, 101 + VARIANTS), 150, 60, 61, 160)}
    problems += differences(logged, changed, "change log")

    # Consumers: one that bootstraps from the snapshot and catches up, one that reads the log, the pull API.
    from_snapshot, from_log = Collector(), Collector()
    DatabusClient(config.lake, "shop", from_snapshot).run()
    DatabusClient(config.lake, "shop", from_log, bootstrap=False).run()
    problems += differences(final_rows(from_snapshot.events), AFTER, "consumer from the snapshot")
    problems += differences(final_rows(from_log.events), changed, "consumer from the log")
    MetaManager(config.lake, "shop").subscribe("types")
    pulled = list(PullConsumer(config.lake, "shop", "types").get_without_ack(10_000).events)
    problems += differences(final_rows(pulled), changed, "pull API")
    assert not problems, "\n".join(problems)


def test_postgres_types_round_trip_as_documented(harness: PostgresHarness, tmp_path: Path, spark: SparkRuntime,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """docs/types.md's PostgreSQL table, row by row (``test_types.round_trip``): the documented Avro and
    Delta types, the consumer's Python type and ``databus tail``'s JSON, by the bootstrap and by change events."""
    hostile_database(harness)
    assert harness.query("SELECT current_setting('TimeZone'), current_setting('IntervalStyle'), "
                         "current_setting('extra_float_digits'), current_setting('bytea_output')") == \
        [("Asia/Kathmandu", "postgres", "0", "escape")]  # (psycopg2 itself sets DateStyle ISO on connecting)
    round_trip(harness, doc_rows("postgres"), tmp_path, spark, capsys)


# -- refusals -------------------------------------------------------------------------------------------

# (table, column type, a value the product refuses, what the error says about it)
REFUSED = [
    ("ts_infinite", "timestamp", "'infinity'", "infinity has no timestamp value"),
    ("tstz_infinite", "timestamptz", "'-infinity'", "-infinity has no timestamp value"),
    ("num_nan", "numeric(10,2)", "'NaN'", "numeric NaN has no decimal value"),
    ("num_inf", "numeric", "'-Infinity'", "numeric -Infinity has no decimal value"),
    ("year_zero", "date", "'0001-12-31 BC'", "before year 1 (BC)"),  # 1 BC: the year 0 of ISO 8601
    ("ts_bc", "timestamp", "'0044-03-15 12:00:00 BC'", "before year 1 (BC)"),
]
NO_SPARK = SparkRuntime.deferred(lambda: pytest.fail("the local engine starts no Spark"))
GOOD = {"timestamp": "'2024-06-01 12:00:00'", "timestamptz": "'2024-06-01 12:00:00+00'", "numeric(10,2)": "1.5",
        "numeric": "1.5", "date": "'2024-06-01'"}


def refused_tables(harness: PostgresHarness, cases: list[tuple[str, str, str, str]]) -> None:
    """A table per case: a good row, and one holding the refused value."""
    harness.execute([f"CREATE TABLE {t} (id integer PRIMARY KEY, v {declared})" for t, declared, _, _ in cases])
    harness.execute([statement for t, declared, bad, _ in cases
                     for statement in (f"INSERT INTO {t} VALUES (1, {GOOD[declared]})",
                                       f"INSERT INTO {t} VALUES (2, {bad})")])


def assert_refused(caught: pytest.ExceptionInfo[SchemaMismatchError], table: str, literal: str, message: str,
                   road: str) -> None:
    error = caught.value
    assert (error.context.get("source"), error.context.get("table"), error.context.get("column")) == \
        ("shop", table, "v"), error.context
    assert f"source 'shop', column {table}.v" in error.problem, error.problem
    assert message in error.problem and road in error.problem, error.problem
    assert literal.strip("'") in error.problem, error.problem
    assert "correct the value in the source" in error.fix and "databus bootstrap --source shop" in error.fix, error.fix


def test_values_without_a_product_value_stop_the_bootstrap_naming_table_column_and_fix(
        harness: PostgresHarness, tmp_path: Path) -> None:
    """Each table holds a good row and one the product refuses: the bootstrap stops naming the first such
    table, column and value; no refused table gets a snapshot; once the value is corrected in the source, the
    next run bootstraps it (and stops at the next table)."""
    refused_tables(harness, REFUSED)
    config = make_config(tmp_path / "lake", harness.source_config("shop", [(t, ["id"]) for t, *_ in REFUSED]),
                         merge={"engine": "local"})
    for index, (table, _, bad, message) in enumerate(REFUSED):
        with pytest.raises(SchemaMismatchError) as caught:
            cycle(config, NO_SPARK)
        assert_refused(caught, table, bad, message, f"bootstrap of {table}")
        for later, *_ in REFUSED[index:]:
            assert not DeltaSnapshot(config.lake, "shop", later).exists(), later
        harness.execute([f"UPDATE {table} SET v = NULL WHERE id = 2"])  # corrected: the next run takes it
    cycle(config, NO_SPARK)
    for table, *_ in REFUSED:
        rows = sorted(DeltaSnapshot(config.lake, "shop", table).read().to_pylist(), key=lambda r: r["id"])
        assert [r["id"] for r in rows] == [1, 2] and rows[1]["v"] is None, rows


def test_values_without_a_product_value_stop_the_spark_bootstrap_typed(harness: PostgresHarness, tmp_path: Path,
                                                                      spark: SparkRuntime) -> None:
    """The same refusal raised in a Spark task reading a key range (the other range's task succeeds) reaches the
    driver as itself, typed, and nothing is committed; once the value is corrected, the next run bootstraps the
    table, resuming the failed bootstrap's ranges."""
    table, _, bad, message = case = REFUSED[2]
    refused_tables(harness, [case])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [(table, ["id"])], bootstrap_chunk_rows=1),
                         merge={"engine": "spark"})
    with pytest.raises(SchemaMismatchError) as caught:
        cycle(config, spark)
    assert_refused(caught, table, bad, message, f"bootstrap of {table}")
    assert not DeltaSnapshot(config.lake, "shop", table).exists()
    harness.execute([f"UPDATE {table} SET v = NULL WHERE id = 2"])
    cycle(config, spark)
    rows = sorted(DeltaSnapshot(config.lake, "shop", table).read().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["v"]) for r in rows] == [(1, D("1.50")), (2, None)]


def test_values_without_a_product_value_stop_capture_and_nothing_is_logged(
        harness: PostgresHarness, tmp_path: Path) -> None:
    """A refused value in a change event stops capture naming table, column and the fix; the transaction that
    held it is not in the log (nor its good row), the checkpoint and the snapshot stay where they were."""
    harness.execute([f"CREATE TABLE {t} (id integer PRIMARY KEY, v {declared})" for t, declared, _, _ in REFUSED])
    harness.execute([f"INSERT INTO {t} VALUES (1, {GOOD[declared]})" for t, declared, _, _ in REFUSED])
    for table, declared, bad, message in REFUSED:  # a change log (and slot) each: a refused change stays in the slot
        config = make_config(tmp_path / f"lake-{table}", harness.source_config("shop", [(table, ["id"])]),
                             merge={"engine": "local"})
        cycle(config, NO_SPARK)
        log, snapshot = ChangeLog(config.lake, "shop"), DeltaSnapshot(config.lake, "shop", table)
        before = (log.checkpoint(), [e.event for e in log.read()], snapshot.version())
        harness.execute([f"INSERT INTO {table} VALUES (3, {GOOD[declared]})", f"INSERT INTO {table} VALUES (4, {bad})"])
        with pytest.raises(SchemaMismatchError) as caught:
            cycle(config, NO_SPARK)
        assert_refused(caught, table, bad, message, "the transaction committed at")
        assert (log.checkpoint(), [e.event for e in log.read()], snapshot.version()) == before


def test_the_documented_fix_recovers_from_a_refused_change_event(harness: PostgresHarness, tmp_path: Path) -> None:
    """The error's fix: correct the value in the source, then `databus bootstrap`; the next run goes on."""
    harness.execute(["CREATE TABLE num_nan (id integer PRIMARY KEY, v numeric(10,2))",
                     "INSERT INTO num_nan VALUES (1, 1.5)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("num_nan", ["id"])]),
                         merge={"engine": "local"})
    cycle(config, NO_SPARK)
    harness.execute(["INSERT INTO num_nan VALUES (3, 2.5)", "INSERT INTO num_nan VALUES (4, 'NaN')"])
    with pytest.raises(SchemaMismatchError):
        capture.run(config, "shop")
    harness.execute(["UPDATE num_nan SET v = NULL WHERE id = 4"])
    capture.restart(config, "shop")
    cycle(config, NO_SPARK)
    rows = sorted(DeltaSnapshot(config.lake, "shop", "num_nan").read().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["v"]) for r in rows] == [(1, D("1.50")), (3, D("2.50")), (4, None)]


def assert_money_refused(error: DatabusError, table: str, column: str) -> None:
    assert isinstance(error, UnsupportedTypeError), error
    assert f"table {table!r}" in error.problem and f"column {column} (money" in error.problem, error.problem
    assert "lc_monetary" in error.problem, error.problem
    assert "numeric" in error.fix and "ALTER TABLE" in error.fix, error.fix


@pytest.mark.parametrize(("table", "column", "declared"), [("priced", "price", "money"),
                                                           ("prices", "history", "money[]")])
def test_money_is_refused_by_validate_and_capture_naming_the_fix(harness: PostgresHarness, tmp_path: Path,
                                                                  table: str, column: str, declared: str) -> None:
    """money's text follows lc_monetary: a money column (or array) is refused naming table, column and the fix
    (numeric), and nothing reaches the log or a snapshot."""
    harness.execute([f"CREATE TABLE {table} (id integer PRIMARY KEY, {column} {declared})",
                     f"INSERT INTO {table} VALUES (1, NULL)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [(table, ["id"])]),
                         merge={"engine": "local"})
    problems = capture.validate(config).problems["shop"]
    assert len(problems) == 1 and f"column {column} (money" in problems[0] and "numeric" in problems[0], problems
    with pytest.raises(DatabusError) as caught:
        cycle(config, NO_SPARK)
    assert_money_refused(caught.value, table, column)
    assert [e for e in ChangeLog(config.lake, "shop").read()] == []
    assert not DeltaSnapshot(config.lake, "shop", table).exists()


def test_install_refuses_a_money_column_before_creating_anything(harness: PostgresHarness, tmp_path: Path) -> None:
    harness.execute(["CREATE TABLE priced (id integer PRIMARY KEY, price money)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("priced", ["id"])]))
    with pytest.raises(UnsupportedTypeError):
        capture.install(config, "shop")
    assert harness.query("SELECT count(*) FROM pg_replication_slots") == [(0,)]


def test_a_money_column_added_to_a_captured_table_stops_capture(harness: PostgresHarness, tmp_path: Path) -> None:
    """Added later, the column reaches capture in the stream's relation message: refused there, the same way,
    with nothing of the transaction in the log."""
    harness.execute(["CREATE TABLE later (id integer PRIMARY KEY, v integer)", "INSERT INTO later VALUES (1, 1)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("later", ["id"])]),
                         merge={"engine": "local"})
    cycle(config, NO_SPARK)
    log = ChangeLog(config.lake, "shop")
    before = (log.checkpoint(), [e.event for e in log.read()])
    harness.execute(["ALTER TABLE later ADD COLUMN price money", "INSERT INTO later VALUES (2, 2, 3.5)"])
    with pytest.raises(DatabusError) as caught:
        capture.run(config, "shop")
    assert_money_refused(caught.value, "later", "price")
    assert (log.checkpoint(), [e.event for e in log.read()]) == before
