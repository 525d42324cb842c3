"""PostgreSQL's type mapping, text conversion and pgoutput decoding, against a real server (tests/postgres.py).

A table with one column per case is filled from known SQL literals; each value is read as the bootstrap
reads it (``col::text``) and as the change stream does (a pgoutput Insert from a slot, through the SQL
interface), converted, and compared with the Python value the literal means. The pgoutput tests decode
real messages: inserts, updates with unchanged TOASTed values under both replica identities, key
changes, deletes, truncates, logical messages, an origin, and protocol 2's streamed transactions.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import pickle
import struct
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType, float32
from dagster_databus.errors import SchemaMismatchError, TypeValueError, UnsupportedTypeError
from dagster_databus.sources.postgres.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    PgoutputDecoder,
    PgoutputMessageError,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    lsn_text,
)
from dagster_databus.sources.postgres.types import (
    BUILTIN_TYPES,
    PgColumn,
    column_type,
    interval_value,
    numeric_modifier,
    pg_column_type,
    text_converter,
)
from tests.support.fixtures import server_fixture, start_postgres
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.server

D = decimal.Decimal
UTC = dt.UTC
_numbers = itertools.count()
BIG = "x" * 5000  # stored out of line (STORAGE EXTERNAL): an update that leaves it is sent as UNCHANGED

# (declared type, SQL literal, product type, the Python value the literal means)
CASES: list[tuple[str, str, str, Any]] = [
    ("smallint", "-32768", "short", -32768),
    ("integer", "-2147483648", "integer", -2147483648),
    ("bigint", "-9223372036854775808", "long", -9223372036854775808),
    ("oid", "'4294967295'", "long", 4294967295),
    ("numeric(10,2)", "-12345678.9", "decimal(10,2)", D("-12345678.90")),
    ("numeric(10,2)", "-0.001", "decimal(10,2)", D("0.00")),
    ("numeric(38,0)", "-" + "9" * 38, "decimal(38,0)", D("-" + "9" * 38)),
    ("numeric(65,30)", "-12345678901234567890123456789012345.000000000000000000000000000001", "decimal(65,30)",
     D("-12345678901234567890123456789012345.000000000000000000000000000001")),
    ("numeric(3,5)", "0.00123", "decimal(5,5)", D("0.00123")),
    ("numeric(2,-3)", "12345", "decimal(5,0)", D("12000")),
    ("numeric", "-1.5e-100", "number", D("-1.5e-100")),
    ("numeric", "123.4500", "number", D("123.45")),
    ("real", "0.3", "float", float32(0.3)),
    ("real", "'-0'", "float", -0.0),
    ("real", "'NaN'", "float", math.nan),
    ("real", "3.4028235e38", "float", float32(3.4028235e38)),
    ("double precision", "0.30000000000000004", "double", 0.30000000000000004),
    ("double precision", "'-Infinity'", "double", -math.inf),
    ("double precision", "'Infinity'", "double", math.inf),
    ("double precision", "'-0'", "double", -0.0),
    ("double precision", "5e-324", "double", 5e-324),
    ("double precision", "'NaN'", "double", math.nan),
    ("boolean", "true", "boolean", True),
    ("boolean", "false", "boolean", False),
    ("bytea", "'\\x00ff5c41'", "binary", b"\x00\xff\\A"),
    ("bytea", "''", "binary", b""),
    ("char(4)", "'ab'", "string", "ab  "),
    ("varchar(20)", "'héllo ☃ 𝄞'", "string", "héllo ☃ 𝄞"),
    ("text", "E'line 1\\nline 2'", "string", "line 1\nline 2"),
    ("text", "''", "string", ""),
    ('"char"', "'x'", "string", "x"),
    ("name", "'a_name'", "string", "a_name"),
    ("json", """'{"a": [1, 2.50, "x"]}'""", "string", '{"a": [1, 2.50, "x"]}'),
    ("jsonb", """'{"b": 1, "a": [1, 2.50]}'""", "string", '{"a": [1, 2.50], "b": 1}'),
    ("uuid", "'123E4567-E89B-12D3-A456-426614174000'", "string", "123e4567-e89b-12d3-a456-426614174000"),
    ("mood", "'happy'", "string", "happy"),
    ("date", "'2024-02-29'", "date", dt.date(2024, 2, 29)),
    ("date", "'0001-01-01'", "date", dt.date(1, 1, 1)),
    ("date", "'9999-12-31'", "date", dt.date(9999, 12, 31)),
    ("timestamp", "'2024-02-29 23:59:59.123456'", "timestamp_ntz", dt.datetime(2024, 2, 29, 23, 59, 59, 123456)),
    ("timestamp(3)", "'2024-01-01 00:00:00.5'", "timestamp_ntz", dt.datetime(2024, 1, 1, 0, 0, 0, 500000)),
    ("timestamp", "'0001-01-01 00:00:00'", "timestamp_ntz", dt.datetime(1, 1, 1)),
    ("timestamptz", "'2024-06-01 12:00:00+02'", "timestamp", dt.datetime(2024, 6, 1, 10, tzinfo=UTC)),
    ("timestamptz", "'2024-06-01 12:00:00.25+05:30'", "timestamp", dt.datetime(2024, 6, 1, 6, 30, 0, 250000, UTC)),
    ("timestamptz", "'1800-01-01 00:00:00+00'", "timestamp", dt.datetime(1800, 1, 1, tzinfo=UTC)),
    ("timestamptz", "'9999-12-31 23:59:59.999999+00'", "timestamp", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)),
    ("timestamptz", "'0001-01-01 00:00:00+00'", "timestamp", dt.datetime(1, 1, 1, tzinfo=UTC)),
    ("time", "'24:00:00'", "time", dt.timedelta(hours=24)),
    ("time", "'23:59:59.999999'", "time", dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999)),
    ("time(2)", "'00:00:00.5'", "time", dt.timedelta(microseconds=500000)),
    ("timetz", "'12:00:00+02'", "string", "12:00:00+02"),
    ("interval", "'1 year 2 mons -3 days 04:05:06.5'", "string", "P1Y2M-3DT4H5M6.5S"),
    ("interval", "'-1.5 seconds'", "string", "PT-1.5S"),
    ("interval", "'0'", "string", "PT0S"),
    ("interval", "'-1 year -2 months'", "string", "P-1Y-2M"),
    ("interval day to second", "'-3 days 100 hours'", "string", "P-3DT100H"),
    ("integer[]", "'{1,2,NULL}'", "string", "{1,2,NULL}"),
    ("text[]", """'{"a b",c}'""", "string", '{"a b",c}'),
    ("mood[]", "'{sad,happy}'", "string", "{sad,happy}"),
    ("int4range", "'[1,10)'", "string", "[1,10)"),
    ("inet", "'192.0.2.1/24'", "string", "192.0.2.1/24"),
    ("macaddr", "'08:00:2B:01:02:03'", "string", "08:00:2b:01:02:03"),
    ("bit(8)", "B'10100101'", "string", "10100101"),
    ("varbit", "B'101'", "string", "101"),
    ("point", "'(1.5,-2)'", "string", "(1.5,-2)"),
    ("xml", "'<a>x</a>'", "string", "<a>x</a>"),
    ("tsvector", "'a fat cat'", "string", "'a' 'cat' 'fat'"),
    ("pg_lsn", "'16/B374D848'", "string", "16/B374D848"),
    ("price", "1.5", "decimal(5,2)", D("1.50")),
]

# Session settings the two roads run with; every reading below must give the values above whatever the others.
SESSIONS = [
    "SET DateStyle = 'ISO, MDY'; SET TimeZone = 'UTC'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3",
    "SET DateStyle = 'ISO, DMY'; SET TimeZone = 'Asia/Kolkata'; SET IntervalStyle = 'postgres'; "
    "SET extra_float_digits = 1; SET bytea_output = 'escape'",
    "SET TimeZone = 'America/St_Johns'; SET IntervalStyle = 'postgres'",
    "SET TimeZone = 'Asia/Kathmandu'",
]

COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(bt.typname, t.typname),
       coalesce(bt.oid, t.oid)::int, CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END,
       coalesce(bt.typtype, t.typtype) = 'e', et.typname
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN pg_type et ON et.oid = coalesce(bt.typelem, t.typelem) AND coalesce(bt.typcategory, t.typcategory) = 'A'
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def lsn_of(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def same_value(got: Any, expected: Any) -> bool:
    """Equal, of the same type, and for floats the same NaN-ness and sign of zero."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(got)
        return got == expected and math.copysign(1, got) == math.copysign(1, expected)
    if isinstance(expected, decimal.Decimal):
        return got == expected and str(got) == str(expected)  # the same digits, to the last fractional zero
    if isinstance(expected, dt.datetime):
        return got == expected and got.tzinfo == expected.tzinfo
    return bool(got == expected)


def _typed_server() -> PostgresServer:
    server = start_postgres()
    try:
        server.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')", "CREATE DOMAIN price AS numeric(5,2)")
    except BaseException:
        server.close()
        raise
    return server


pg_server = server_fixture(_typed_server, "A PostgreSQL cluster of the module's own, with an enum and a domain.",
                           name="pg_server", scope="module")


def catalog(pg_server: PostgresServer, table: str) -> list[PgColumn]:
    return [PgColumn(name=name, declared=declared, type_name=type_name, typmod=typmod, is_enum=is_enum,
                     element=element, type_oid=oid)
            for name, declared, type_name, oid, typmod, is_enum, element in pg_server.query(COLUMNS_SQL, (table,))]


def schema_of(pg_server: PostgresServer, table: str) -> TableSchema:
    columns = []
    for c in catalog(pg_server, table):
        mapped = pg_column_type(c)
        assert mapped is not None, c
        columns.append(Column(c.name, mapped, source_type=c.declared))
    return TableSchema("pg", table, tuple(columns), (columns[0].name,))


def changes(pg_server: PostgresServer, slot: str, *options: str, settings: str = "") -> list[tuple[int, Message]]:
    """The slot's changes so far, decoded in order (the SQL interface: each row one pgoutput message)."""
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            if settings:
                cur.execute(settings)
            cur.execute("SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
                        "'publication_names', 'pub', 'messages', 'true'" + ", %s" * len(options) + ")",
                        (slot, *options))
            rows = cur.fetchall()
    finally:
        conn.close()
    decoder = PgoutputDecoder()
    decoded = [(lsn_of(lsn), decoder.decode(bytes(data), lsn_of(lsn))) for lsn, data in rows]
    assert not decoder.in_stream
    return decoded


def write(pg_server: PostgresServer, *statements: str) -> None:
    """Statements committed synchronously: the SQL interface decodes only WAL that is flushed."""
    pg_server.execute("SET synchronous_commit = on", *statements)


# -- the mapping ----------------------------------------------------------------------------------------


def test_builtin_oids_are_the_servers(pg_server: PostgresServer) -> None:
    rows = dict(pg_server.query("SELECT typname, oid::int FROM pg_type WHERE typnamespace = 'pg_catalog'::regnamespace "
                                "AND typname = ANY(%s)", (list(BUILTIN_TYPES.values()),)))
    assert {oid: name for name, oid in rows.items()} == BUILTIN_TYPES


@pytest.fixture(scope="module")
def typed(pg_server: PostgresServer) -> TableSchema:
    """The table of every case, its row inserted with a slot watching; its schema from the catalog."""
    columns = ", ".join(f"c{i} {declared}" for i, (declared, *_) in enumerate(CASES))
    write(pg_server, f"CREATE TABLE typed (id int PRIMARY KEY, {columns})", "CREATE PUBLICATION pub FOR TABLE typed",
          "SELECT pg_create_logical_replication_slot('typed', 'pgoutput')")
    write(pg_server, f"INSERT INTO typed VALUES (1, {', '.join(literal for _, literal, *_ in CASES)})")
    return schema_of(pg_server, "typed")


def test_mapping(typed: TableSchema) -> None:
    got = [(c.source_type, str(c.type)) for c in typed.columns[1:]]
    declared = {"timestamptz": "timestamp with time zone", "timestamp(3)": "timestamp(3) without time zone",
                "timestamp": "timestamp without time zone", "time": "time without time zone",
                "time(2)": "time(2) without time zone", "timetz": "time with time zone", "varbit": "bit varying",
                "char(4)": "character(4)", "varchar(20)": "character varying(20)", "bit(8)": "bit(8)"}
    assert got == [(declared.get(d, d), t) for d, _, t, _ in CASES]


def output_text(cursor: Any) -> Any:
    """``cursor`` handing over every value as the server's text (its type's output function, as pgoutput
    sends it) rather than psycopg2's Python value."""
    raw = psycopg2.extensions.new_type(tuple(psycopg2.extensions.string_types), "DATABUS_TEXT", lambda v, _c: v)
    psycopg2.extensions.register_type(raw, cursor)
    return cursor


@pytest.mark.parametrize("session", SESSIONS)
def test_bootstrap_text_converts_to_the_literals_values(pg_server: PostgresServer, typed: TableSchema,
                                                        session: str) -> None:
    conn = pg_server.connect()
    try:
        with output_text(conn.cursor()) as cur:
            cur.execute(session)
            cur.execute(f"SELECT {', '.join(c.name for c in typed.columns)} FROM typed")
            (row,) = cur.fetchall()
    finally:
        conn.close()
    values = typed.converter(text_converter)(dict(zip(typed.column_names, row, strict=True)), "bootstrap")
    for i, (declared, literal, _, expected) in enumerate(CASES):
        got = values[f"c{i}"]
        assert same_value(got, expected), f"{declared} {literal}: {row[i + 1]!r} -> {got!r}, not {expected!r}"


def test_change_stream_gives_the_same_values(pg_server: PostgresServer, typed: TableSchema) -> None:
    decoded = [m for _, m in changes(pg_server, "typed", "proto_version", "1",
                                     settings="SET TimeZone = 'Asia/Kolkata'; SET IntervalStyle = 'postgres'")]
    relation = next(m for m in decoded if isinstance(m, Relation))
    assert [c.name for c in relation.columns] == typed.column_names
    assert [c.key for c in relation.columns] == [True] + [False] * len(CASES)
    assert next(m for m in decoded if isinstance(m, Type)).name == "mood"
    insert = next(m for m in decoded if isinstance(m, Insert))
    assert insert.relation_oid == relation.oid
    values = typed.converter(text_converter)(dict(zip(typed.column_names, insert.new, strict=True)), "stream")
    for i, (declared, literal, _, expected) in enumerate(CASES):
        assert same_value(values[f"c{i}"], expected), f"{declared} {literal}: {insert.new[i + 1]!r}"


@pytest.mark.parametrize(("declared", "literal", "message"), [
    ("timestamp", "'infinity'", "infinity has no timestamp value"),
    ("timestamptz", "'-infinity'", "-infinity has no timestamp value"),
    ("date", "'infinity'", "infinity has no date value"),
    ("date", "'0044-03-15 BC'", "before year 1 (BC)"),
    ("timestamp", "'0001-12-31 23:00:00 BC'", "before year 1 (BC)"),
    ("date", "'10000-01-01'", "after year 9999"),
    ("timestamptz", "'10000-01-01 00:00:00+00'", "after year 9999"),
    ("numeric", "'NaN'", "numeric NaN has no decimal value"),
    ("numeric", "'Infinity'", "numeric Infinity has no decimal value"),
    ("numeric(10,2)", "'NaN'", "numeric NaN has no decimal value"),
])
def test_values_without_a_product_value_are_refused_naming_table_and_column(pg_server: PostgresServer, declared: str,
                                                                           literal: str, message: str) -> None:
    table = f"edge_{next(_numbers)}"
    write(pg_server, f"CREATE TABLE {table} (id int PRIMARY KEY, v {declared})",
          f"INSERT INTO {table} VALUES (1, {literal})")
    schema = schema_of(pg_server, table)
    ((text,),) = pg_server.query(f"SELECT v::text FROM {table}")
    with pytest.raises(SchemaMismatchError) as caught:
        schema.converter(text_converter)({"id": "1", "v": text}, "bootstrap")
    assert message in caught.value.problem
    assert f"column {table}.v" in caught.value.problem
    assert "declare the column text" in caught.value.problem or "replace it" in caught.value.problem


def test_text_casts_are_not_the_output_text(pg_server: PostgresServer) -> None:
    """Why the bootstrap reads output text, not ``col::text``: a few types cast to text by a function of
    their own, which prints otherwise than pgoutput does (and booleans are refused, naming the fix)."""
    ((cast, out),) = pg_server.query(
        "SELECT ARRAY[true::text, 'ab'::char(4)::text, '192.0.2.1'::inet::text], "
        "ARRAY[format('%s', true), format('%s', 'ab'::char(4)), format('%s', '192.0.2.1'::inet)]")
    assert (cast, out) == (["true", "ab", "192.0.2.1/32"], ["t", "ab  ", "192.0.2.1"])
    with pytest.raises(TypeValueError, match="output text"):
        text_converter(Column("b", ColumnType("boolean"), "boolean"))("true")


def test_timestamptz_offsets_with_seconds_are_taken_to_utc(pg_server: PostgresServer) -> None:
    # Kolkata's local mean time before 1854: +05:53:28, printed with its seconds.
    ((text,),) = pg_server.query("SELECT '1800-01-01 00:00:00+00'::timestamptz::text FROM "
                                 "(SELECT set_config('TimeZone', 'Asia/Kolkata', false)) s")
    assert text == "1800-01-01 05:53:28+05:53:28"
    convert = text_converter(Column("t", ColumnType("timestamp"), "timestamp with time zone"))
    assert convert(text) == dt.datetime(1800, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("session", "type_name", "literal", "hint"), [
    ("SET DateStyle = 'SQL, DMY'", "date", "'2024-06-01'", "DateStyle"),
    ("SET DateStyle = 'Postgres, MDY'", "timestamptz", "'2024-06-01 12:00:00+00'", "DateStyle"),
    ("SET DateStyle = 'German'", "timestamp", "'2024-06-01 12:00:00'", "DateStyle"),
    ("SET IntervalStyle = 'sql_standard'", "interval", "'1 year 2 mons 3 days 04:05:06'", "IntervalStyle"),
    ("SET IntervalStyle = 'postgres_verbose'", "interval", "'3 days'", "IntervalStyle"),
])
def test_other_session_styles_are_refused_with_the_setting_to_fix(pg_server: PostgresServer, session: str,
                                                                  type_name: str, literal: str, hint: str) -> None:
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(session)
            cur.execute(f"SELECT ({literal}::{type_name})::text")
            ((text,),) = cur.fetchall()
    finally:
        conn.close()
    convert = text_converter(Column("v", column_type(type_name, None, -1), type_name))
    with pytest.raises(TypeValueError, match=hint):
        convert(text)


INTERVALS = ["0", "1 second", "-1 second", "0.000001 seconds", "-0.5 seconds", "1 day", "-1 day", "1 mon", "-1 mon",
             "1 year", "13 months", "-13 months", "1 year -1 mon", "-1 year 1 mon", "1 day -1 hour",
             "-1 day +1 hour", "-1 day -1 hour", "1 year 2 mons 3 days 04:05:06.789",
             "-1 year -2 mons -3 days -04:05:06",
             "1000000 hours", "-1000000 hours 59 minutes", "2 days 25:00:00", "1 mon -30 days", "59.999999 seconds",
             "178000000 years", "1 day 0.1 seconds"]


def test_intervals_become_iso_8601_text_whatever_the_style(pg_server: PostgresServer) -> None:
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            texts: dict[str, list[str]] = {}
            for style in ("postgres", "iso_8601"):
                cur.execute(f"SET IntervalStyle = '{style}'")
                cur.execute("SELECT x::interval::text FROM unnest(%s::text[]) x", (INTERVALS,))
                texts[style] = [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    for literal, postgres, iso in zip(INTERVALS, texts["postgres"], texts["iso_8601"], strict=True):
        assert interval_value(postgres) == iso, (literal, postgres)
        assert interval_value(iso) == iso, literal


@pytest.mark.parametrize(("declared", "fix"), [
    ("money", "numeric"), ("money[]", "numeric"), ("tid", "mapped type"), ("regclass", "mapped type"),
    ("txid_snapshot", "mapped type"), ("pair", "jsonb"),
])
def test_types_without_a_mapping_are_refused_with_the_fix(pg_server: PostgresServer, declared: str, fix: str) -> None:
    table = f"unmapped_{next(_numbers)}"
    pg_server.execute("CREATE TYPE pair AS (a int, b text)" if declared == "pair" else "SELECT 1",
                      f"CREATE TABLE {table} (id int PRIMARY KEY, v {declared})")
    column = catalog(pg_server, table)[1]
    with pytest.raises(UnsupportedTypeError) as caught:
        column_type(column.type_name, column.type_oid, column.typmod, element=column.element, is_enum=column.is_enum,
                    source="pg", table=table, column="v")
    assert f"source 'pg', column {table}.v" in caught.value.problem
    assert fix in caught.value.fix
    if declared.startswith("money"):
        with pytest.raises(UnsupportedTypeError, match="lc_monetary"):
            pg_column_type(column)
    else:
        assert pg_column_type(column) is None


def test_names_alone_map_built_in_types_and_enums_win_over_namesakes() -> None:
    assert str(column_type("numeric", None, ((12 << 16) | 4) + 4)) == "decimal(12,4)"
    assert str(column_type("date", None, -1, is_enum=True)) == "string"  # an enum called date
    assert str(column_type("date", 16500, -1, is_enum=True)) == "string"
    assert str(column_type("date", 1082, -1)) == "date"
    assert str(column_type("citext", 16400, -1)) == "string"
    assert numeric_modifier(-1) is None
    assert numeric_modifier(((1000 << 16) | (-1000 & 0x7FF)) + 4) == (1000, -1000)


# -- pgoutput -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replicated(pg_server: PostgresServer) -> tuple[dict[str, int], list[tuple[int, Message]]]:
    """Two tables, one under REPLICA IDENTITY DEFAULT and one FULL, each with an out-of-line text; a run of
    changes to both; their messages (protocol 1)."""
    write(pg_server,
          "CREATE TABLE rd (id int PRIMARY KEY, big text, n int, m mood)",
          "ALTER TABLE rd ALTER COLUMN big SET STORAGE EXTERNAL",
          "CREATE TABLE rf (id int PRIMARY KEY, big text, n int)", "ALTER TABLE rf REPLICA IDENTITY FULL",
          "ALTER TABLE rf ALTER COLUMN big SET STORAGE EXTERNAL",
          "CREATE PUBLICATION pub_r FOR TABLE rd, rf",
          "SELECT pg_create_logical_replication_slot('r', 'pgoutput')")
    write(pg_server,
          f"INSERT INTO rd VALUES (1, '{BIG}', 1, 'sad')", f"INSERT INTO rf VALUES (1, '{BIG}', 1)",
          "UPDATE rd SET n = 2", "UPDATE rf SET n = 2", "UPDATE rd SET id = 5, n = NULL", "DELETE FROM rd",
          "DELETE FROM rf", "INSERT INTO rf VALUES (7, 'small', 7)", "TRUNCATE rd, rf RESTART IDENTITY CASCADE",
          "SELECT pg_logical_emit_message(true, 'databus', 'hello')",
          "SELECT pg_logical_emit_message(false, 'now', '\\x00ff'::bytea)",
          "SELECT pg_replication_origin_create('elsewhere')", "SELECT pg_replication_origin_session_setup('elsewhere')",
          "BEGIN", "SELECT pg_replication_origin_xact_setup('0/ABCDEF', now())", "INSERT INTO rf VALUES (8, 'o', 8)",
          "COMMIT", "SELECT pg_replication_origin_session_reset()")
    oids = dict(pg_server.query("SELECT relname::text, oid::int FROM pg_class WHERE relname IN ('rd', 'rf')"))
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes('r', NULL, NULL, "
                        "'proto_version', '1', 'publication_names', 'pub_r', 'messages', 'true')")
            rows = cur.fetchall()
    finally:
        conn.close()
    decoder = PgoutputDecoder()
    return oids, [(lsn_of(lsn), decoder.decode(bytes(data), lsn_of(lsn))) for lsn, data in rows]


def test_transactions_are_framed_by_begin_and_commit(replicated: tuple[dict[str, int], list[tuple[int, Message]]]
                                                     ) -> None:
    _, decoded = replicated
    begins = [m for _, m in decoded if isinstance(m, Begin)]
    commits = [m for _, m in decoded if isinstance(m, Commit)]
    assert len(begins) == len(commits) == 11  # the non-transactional message has neither
    for begin, commit in zip(begins, commits, strict=True):
        assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
        assert begin.commit_ts == commit.commit_ts
        assert commit.flags == 0
        # The commit times are this test's: within a minute of now.
        assert abs(commit.commit_ts_ms - dt.datetime.now(UTC).timestamp() * 1000) < 60_000
    xids = [b.xid for b in begins]
    assert xids == sorted(xids)


def test_relations_types_and_row_changes(replicated: tuple[dict[str, int], list[tuple[int, Message]]]) -> None:
    oids, decoded = replicated
    messages = [m for _, m in decoded]
    rd = next(m for m in messages if isinstance(m, Relation) and m.name == "rd")
    rf = next(m for m in messages if isinstance(m, Relation) and m.name == "rf")
    assert (rd.oid, rd.namespace, rd.replica_identity, rd.xid) == (oids["rd"], "public", "d", None)
    assert [(c.name, c.type_oid, c.type_modifier, c.key) for c in rd.columns[:3]] == [
        ("id", 23, -1, True), ("big", 25, -1, False), ("n", 23, -1, False)]
    mood = next(m for m in messages if isinstance(m, Type))
    assert (mood.namespace, mood.name, rd.columns[3].type_oid) == ("public", "mood", mood.oid)
    assert (rf.replica_identity, [c.key for c in rf.columns]) == ("f", [True, True, True])

    changes_ = [m for m in messages if isinstance(m, Insert | Update | Delete)]
    assert changes_ == [
        Insert(oids["rd"], ("1", BIG, "1", "sad")),
        Insert(oids["rf"], ("1", BIG, "1")),
        # DEFAULT: the untouched TOASTed value is UNCHANGED and no old row is sent.
        Update(oids["rd"], ("1", UNCHANGED, "2", "sad")),
        # FULL: the new row still leaves it out, the old row has it in full.
        Update(oids["rf"], ("1", UNCHANGED, "2"), old=("1", BIG, "1")),
        # A changed key: the old key ('K'), the other columns NULL.
        Update(oids["rd"], ("5", UNCHANGED, None, "sad"), old_key=("1", None, None, None)),
        Delete(oids["rd"], old_key=("5", None, None, None)),
        Delete(oids["rf"], old=("1", BIG, "2")),
        Insert(oids["rf"], ("7", "small", "7")),
        Insert(oids["rf"], ("8", "o", "8")),
    ]
    (truncate,) = [m for m in messages if isinstance(m, Truncate)]
    assert truncate == Truncate((oids["rd"], oids["rf"]), cascade=True, restart_identity=True)


def test_logical_messages_and_origins(replicated: tuple[dict[str, int], list[tuple[int, Message]]]) -> None:
    _, decoded = replicated
    logical = [(lsn, m) for lsn, m in decoded if isinstance(m, LogicalMessage)]
    assert [m for _, m in logical] == [
        LogicalMessage(True, logical[0][1].lsn, "databus", b"hello"),
        LogicalMessage(False, logical[1][0], "now", b"\x00\xff"),
    ]
    at = [m for _, m in decoded].index(logical[0][1])
    assert isinstance(decoded[at - 1][1], Begin) and isinstance(decoded[at + 1][1], Commit)
    (origin,) = [m for _, m in decoded if isinstance(m, Origin)]
    assert origin == Origin(0xABCDEF, "elsewhere")


def test_streamed_transactions_protocol_2(pg_server: PostgresServer) -> None:
    """A transaction larger than logical_decoding_work_mem arrives in stream blocks before its commit; a
    rolled-back subtransaction's streamed changes are cancelled by a Stream Abort."""
    write(pg_server, "CREATE TABLE big_tx (id int PRIMARY KEY, v text)", "CREATE PUBLICATION pub_s FOR TABLE big_tx",
          "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    write(pg_server, "BEGIN", "INSERT INTO big_tx SELECT g, repeat('z', 100) FROM generate_series(1, 3000) g",
          "SAVEPOINT sp", "INSERT INTO big_tx SELECT g, repeat('q', 100) FROM generate_series(5001, 6000) g",
          "ROLLBACK TO SAVEPOINT sp", "RELEASE SAVEPOINT sp", "INSERT INTO big_tx VALUES (9999, 'last')", "COMMIT")
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET logical_decoding_work_mem = '64kB'")
            cur.execute("SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
                        "'proto_version', '2', 'publication_names', 'pub_s', 'streaming', 'on')")
            rows = cur.fetchall()
    finally:
        conn.close()
    decoder = PgoutputDecoder()
    messages: list[Message] = []
    inside: list[bool] = []
    for lsn, data in rows:
        messages.append(decoder.decode(bytes(data), lsn_of(lsn)))
        inside.append(decoder.in_stream)
    starts = [m for m in messages if isinstance(m, StreamStart)]
    stops = [m for m in messages if isinstance(m, StreamStop)]
    assert len(starts) == len(stops) >= 2
    xid = starts[0].xid
    assert [s.first_segment for s in starts] == [True] + [False] * (len(starts) - 1)
    assert {s.xid for s in starts} == {xid}
    assert not any(isinstance(m, Begin | Commit) for m in messages)
    relation = next(m for m in messages if isinstance(m, Relation))
    assert relation.xid == xid and relation.name == "big_tx"
    inserts = [(m, flag) for m, flag in zip(messages, inside, strict=True) if isinstance(m, Insert)]
    assert all(flag for _, flag in inserts)  # every change inside a stream block
    top = [int(str(m.new[0])) for m, _ in inserts if m.xid == xid]
    assert top == [*range(1, 3001), 9999]
    (abort,) = [m for m in messages if isinstance(m, StreamAbort)]
    assert abort.xid == xid and abort.subxid != xid
    sub = [int(str(m.new[0])) for m, _ in inserts if m.xid == abort.subxid]
    assert sub and set(sub) <= set(range(5001, 6001))  # streamed before the rollback reached the decoder
    assert {m.xid for m, _ in inserts} == {xid, abort.subxid}
    commit = messages[-1]
    assert isinstance(commit, StreamCommit) and commit.xid == xid and commit.flags == 0
    assert commit.commit_lsn < commit.end_lsn
    assert messages.index(abort) < messages.index(commit) and not decoder.in_stream


# -- refused messages -----------------------------------------------------------------------------------


def test_an_unknown_message_type_stops_with_its_byte_and_lsn() -> None:
    with pytest.raises(PgoutputMessageError) as caught:
        PgoutputDecoder().decode(b"Zabc", 0x16B374D848)
    assert "unknown type 'Z' (0x5a) at LSN 16/B374D848" in caught.value.problem
    assert "bug" in caught.value.fix and "upgrade" in caught.value.fix


def test_two_phase_messages_name_the_slot_option() -> None:
    with pytest.raises(PgoutputMessageError, match="Begin Prepare") as caught:
        PgoutputDecoder().decode(b"b" + bytes(28) + b"gid\0")
    assert "two_phase" in caught.value.fix


def test_malformed_and_misplaced_messages_are_refused() -> None:
    decoder = PgoutputDecoder()
    insert = b"I" + struct.pack(">I", 16384) + b"N" + struct.pack(">H", 1) + b"t" + struct.pack(">I", 5) + b"hello"
    assert decoder.decode(insert) == Insert(16384, ("hello",))
    with pytest.raises(PgoutputMessageError, match="past the message"):
        decoder.decode(insert[:-1], 1)
    with pytest.raises(PgoutputMessageError, match="byte\\(s\\) past the end"):
        decoder.decode(insert + b"!")
    with pytest.raises(PgoutputMessageError, match="tuple value kind 'x'"):
        decoder.decode(insert[:8] + b"x" + insert[9:])
    with pytest.raises(PgoutputMessageError, match="not UTF-8") as caught:
        decoder.decode(insert.replace(b"hello", b"hell\xff"))
    assert "client_encoding" in caught.value.fix
    with pytest.raises(PgoutputMessageError, match="Stream Stop without a Stream Start"):
        decoder.decode(b"E")
    assert decoder.decode(b"S" + struct.pack(">IB", 77, 1)) == StreamStart(77, True)
    with pytest.raises(PgoutputMessageError, match="cannot come inside a stream block"):
        decoder.decode(b"B" + struct.pack(">QqI", 1, 2, 3))
    streamed = b"I" + struct.pack(">II", 77, 16384) + insert[5:]
    assert decoder.decode(streamed) == Insert(16384, ("hello",), xid=77)
    assert decoder.decode(b"E") == StreamStop() and not decoder.in_stream
    with pytest.raises(PgoutputMessageError, match="empty"):
        decoder.decode(b"")


def test_unchanged_is_one_value_that_survives_pickling() -> None:
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED
    assert repr(UNCHANGED) == "UNCHANGED"
    assert lsn_text(0) == "0/0"
