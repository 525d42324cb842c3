"""Refresh filters from careless or hostile hands (``databus snapshot --where``, the refresh job's ``where``), on
SQLite and MariaDB: every injection class is refused with a message naming the problem and the fix, before
anything is read or written (the snapshot keeps its version and rows, and a secrets table the config does not
capture never reaches it); key bounds outside the key's type or forming an empty range are refused the same
way; and legitimate filters select exactly their rows, run as ``sources.filters`` rendered them.

PostgreSQL's filters are checked the same way, and run as rendered through psycopg2 on a throwaway cluster
(``pg_shop``): hostile text inside a literal arrives as that literal's value (psycopg2's %-formatting included),
and the allowed functions reach pg_catalog's, not a look-alike on the search_path."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deltalake import DeltaTable

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sources.base import KeyRange, RangeRead, RowSelection
from dagster_databus.sources.filters import Filter, select_clause
from dagster_databus.sources.filters import check_filter as check_dialect_filter
from dagster_databus.sources.keys import selection_for
from dagster_databus.sources.registry import source_kind
from dagster_databus.sources.sqlite import reads as sqlite_reads
from dagster_databus.sync.merge import sync_source
from tests.support.checks import cycle, require_tool
from tests.support.harness import MysqlHarness, SourceHarness, SqliteHarness, config_document, make_config
from tests.support.mariadb import MariaDBServer
from tests.support.postgres import PostgresServer, find_pg_bindir

SECRET = "hunter2-TOPSECRET"
TABLE = "accounts"
# (id, owner, status, balance, note)
ROWS = [
    (1, "alice", "new", 100, "it's"), (2, "bob", "paid", 250, "50% off"), (3, "carol", "new", 75, None),
    (4, "Carol", "closed", 0, "back\\slash"), (5, "dave", "paid", 990, "vip"), (6, "erin", "new", 310, None),
    (7, "frank", "closed", 45, "it's"), (8, "grace", "paid", 120, "a_b"), (9, "heidi", "new", 5, "axb"),
    (10, "ivan", "paid", 700, None), (11, "judy", "new", 1000, "late"), (12, "mallory", "closed", -3, "ok"),
]
SCHEMAS = {
    "sqlite": ["CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL, "
               "balance INTEGER, note TEXT)",
               "CREATE TABLE secrets (id INTEGER PRIMARY KEY, pw TEXT NOT NULL)"],
    "mysql": ["CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(50) NOT NULL, status VARCHAR(20) NOT NULL, "
              "balance BIGINT, note VARCHAR(100))",
              "CREATE TABLE secrets (id INT PRIMARY KEY, pw VARCHAR(100) NOT NULL)"],
    # varchar, not text: a look-alike upper(varchar) on the search_path matches it better than pg_catalog's.
    "postgres": ["CREATE TABLE accounts (id integer PRIMARY KEY, owner varchar(50) NOT NULL, "
                 "status varchar(20) NOT NULL, balance bigint, note varchar(100))",
                 "CREATE TABLE secrets (id integer PRIMARY KEY, pw text NOT NULL)",
                 "CREATE TABLE texts (id integer PRIMARY KEY, body text NOT NULL)"],
}
COLUMNS = ("id", "owner", "status", "balance", "note")
PG_COLUMNS = {c: f'"{c}"' for c in COLUMNS}  # as the PostgreSQL source quotes them


def check_filter(text: str, kind: str, table: str, columns: dict[str, str]) -> Filter:
    """``sources.filters.check_filter`` in the dialect of source kind ``kind`` (its registry entry's)."""
    return check_dialect_filter(text, source_kind(kind).filter_dialect(), table, columns)


@dataclass
class Shop:
    """A source with ``accounts`` captured into a bootstrapped snapshot and ``secrets`` beside it, uncaptured."""

    kind: str
    source: SourceHarness
    config: DatabusConfig
    config_path: Path
    spark: Callable[[], object]

    @property
    def snap(self) -> DeltaSnapshot:
        return DeltaSnapshot(self.config.lake, "shop", TABLE)

    def refresh(self, where: str | None = None, after: list[Any] | None = None,
                through: list[Any] | None = None) -> Any:
        rows = capture.row_selection(self.config, "shop", [TABLE], after, through, where)
        [result] = sync_source(self.spark, self.config, "shop", [TABLE], mode="refresh", rows=rows)
        return result

    def cli(self, *args: str) -> int:
        return main(["--config", str(self.config_path), "snapshot", "--source", "shop", "--tables", TABLE, *args])

    def damage(self) -> None:
        """Every balance in the snapshot set to -1 behind the log's back: a refresh repairs only what it reads."""
        DeltaTable(self.snap.uri, storage_options=self.snap.storage_options).update(updates={"balance": "-1"})

    def held(self) -> dict[int, dict[str, Any]]:
        return {r["id"]: r for r in self.snap.read().to_pylist()}


@pytest.fixture(scope="module", params=["sqlite", "mysql"])
def shop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    root = tmp_path_factory.mktemp(f"filters-{request.param}")
    if request.param == "sqlite":
        source: SourceHarness = SqliteHarness(root / "source.db")
        source.execute(SCHEMAS["sqlite"])
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb")
        source = MysqlHarness(server)
        server.execute(*SCHEMAS["mysql"], database=source.database)
    source.execute([("INSERT INTO secrets VALUES (?, ?)", (1, SECRET)), ("INSERT INTO secrets VALUES (?, ?)",
                                                                          (2, SECRET + "-2"))])
    source.execute([("INSERT INTO accounts VALUES (?, ?, ?, ?, ?)", row) for row in ROWS])
    source_config = source.source_config("shop", [(TABLE, ["id"])])
    config = make_config(root / "lake", source_config, merge={"engine": "local"})
    config_path = root / "databus.yaml"
    config_path.write_text(json.dumps({**config_document(config, [source_config]), "merge": {"engine": "local"}}))

    def no_spark() -> object:
        raise AssertionError("the local engine starts no Spark")

    cycle(config, no_spark)
    yield Shop(request.param, source, config, config_path, no_spark)


def _no_secret_anywhere(shop: Shop) -> None:
    for row in shop.snap.read().to_pylist():
        assert not any(isinstance(v, str) and SECRET in v for v in row.values()), row


# -- refused ----------------------------------------------------------------------------------------------

# (filter, a fragment of the refusal naming the problem); both dialects.
REFUSED = [
    ("(SELECT pw FROM secrets) = 'x'", "subquery"),
    ("id IN (SELECT id FROM secrets)", "subquery"),
    ("EXISTS (SELECT 1 FROM secrets WHERE pw LIKE 'h%')", "subquery"),
    ("1=1 UNION SELECT pw, pw, pw, pw, pw FROM secrets", "UNION"),
    ("id = 1; DROP TABLE secrets", "holds a ';'"),
    ("id = 1 -- comment", "comment"),
    ("id = 1 /* */", "comment"),
    ("id = 1 /* OR 1=1 */ OR 0", "comment"),
    ("load_extension('x') IS NULL", "load_extension()"),
    ("length(randomblob(2000000000)) > 0", "randomblob()"),
    ("length(zeroblob(2000000000)) > 0", "zeroblob()"),
    ("sleep(5) = 0", "sleep()"),
    ("benchmark(100000000, md5('a')) = 0", "benchmark()"),
    ("pg_sleep(5) IS NULL", "pg_sleep()"),
    ("my_udf(id) = 1", "my_udf()"),
    ("hex(owner) = '616C696365'", "hex()"),
    ("secrets.pw = 'x'", "another table"),
    ("pw = 'x'", "'pw'"),
    ("`pw` = 'x'", "'pw'"),
    ("id = ?", "parameter"),
    ("id = :id", "parameter"),
    ("(status = 'new'", "parenthesis open"),
    ("status = 'new')", "did not open"),
    ("status = 'new", "quote open"),
    ("id IN (1, owner)", "IN (...)"),
    ("lower(owner, status) = 'x'", "argument"),
]
SQLITE_ONLY = [
    ("[pw] = 'x'", "'pw'"),
    ("\"pw\" = 'x'", "'pw'"),
    # The old quote tracker took [']'s quote for a string's and waved the rest through as text.
    ("id = 1 OR [']=1 OR (SELECT pw FROM secrets) LIKE 'h%' OR [']=1", "\"'\""),
    ("['] IS NULL OR owner = (SELECT group_concat(pw) FROM secrets)", "\"'\""),
    ("ATTACH DATABASE 'other.db' AS other", "ATTACH"),
    ("PRAGMA table_info(secrets)", "PRAGMA"),
    ("main.secrets.pw = 'x'", "qualified"),
    ("id = $id", "'$id'"),
]
MYSQL_ONLY = [
    # The old quote tracker read '\'' as a string and a quote opening another; MariaDB reads one string.
    ("note = '\\'' OR (SELECT pw FROM secrets LIMIT 1) LIKE '%' OR note = '\\''", "subquery"),
    ("note = '\\'' OR owner = (SELECT pw FROM secrets LIMIT 1) -- '", "comment"),
    ("id = 1 /*!50000 OR 1=1 */", "comment"),
    ("id = 1 # comment", "comment"),
    ("\"pw\" = 'x'", "double quotes"),
    ("[pw] = 'x'", "Array"),
    ("@@version LIKE '1%'", "parameter or variable"),
    ("@x := 1", "assignment"),
    ("owner = _latin1'alice'", "string literal"),
    ("owner = X'616C696365'", "string literal"),
]
POSTGRES_ONLY = [
    ("`pw` = 'x'", "Unexpected token"),  # backticks are not PostgreSQL's quotes
    ("\"pw\" = 'x'", "'pw'"),
    ("U&\"pw\" = 'x'", "BitwiseAnd"),
    # Strings with escape rules of their own: refused by token, whatever they hold.
    ("note = E'\\x27' OR 1=1", "E'...' escape string"),
    ("note = e'it\\'s'", "E'...' escape string"),
    ("note = U&'\\0027'", "U&'...' Unicode escape string"),
    ("note = $$x$$ OR (SELECT pw FROM secrets) = $$y$$", "dollar-quoted string"),
    ("note = $q$ $$ OR 1=1 $$ $q$", "dollar-quoted string"),
    ("note = 'a\x00b'", "NUL character"),
    # Casts: none needed (a quoted literal takes the compared column's type), and some look up the catalog.
    ("id::text = '1'", "a cast"),
    ("'secrets'::regclass IS NOT NULL", "a cast"),
    ("CAST(id AS text) = '1'", "a cast"),
    ("date '2024-01-01' < note", "a cast"),
    ("pg_sleep(10) IS NULL", "pg_sleep()"),
    ("id = 1 OR pg_sleep(1) IS NULL", "pg_sleep()"),
    ("current_setting('data_directory') = 'x'", "current_setting()"),
    ("set_config('search_path', 'x', false) = 'x'", "set_config()"),
    ("pg_read_file('/etc/passwd') = 'x'", "pg_read_file()"),
    ("query_to_xml('SELECT pw FROM secrets', true, true, '') IS NULL", "query_to_xml()"),
    ("txid_current() > 0", "txid_current()"),
    ("substring(owner, 'a.*') = 'a'", "substring()"),  # its regular-expression form
    ("\"Lower\"(owner) = 'x'", "quoted name"),
    ("pg_catalog.lower(owner) = 'x'", "qualified"),
    ("public.secrets.pw = 'x'", "qualified by a database or schema"),
    ("accounts.* IS NULL", "uses *"),
    ("current_user = 'postgres'", "'current_user'"),
    ("NOT EXISTS (SELECT 1 FROM pg_sleep(5))", "subquery"),
    ("id = $1", "parameter"),
    ("id = %s", "parameter"),
    ("note = %(pw)s", "parameter"),
    ("owner ~ 'a.*'", "regular-expression"),
    ("owner ~* 'A'", "regular-expression"),
    ("owner SIMILAR TO 'a%'", "regular-expression"),
    ("id = ANY(ARRAY[1, 2])", "Any"),
    ("ROW(id, id) = ROW(1, 1)", "ROW()"),
    ("id = (1, 2)", "row value"),
    ("id = 0x1F", "hex"),
    ("owner COLLATE \"C\" = 'x'", "COLLATE"),
    ("owner AT TIME ZONE 'UTC' = 'x'", "AtTimeZone"),
    ("id OPERATOR(pg_catalog.=) 1", "Operator"),
    ("balance ^ 2 > 1", "Pow"),
    ("id # 1 = 0", "BitwiseXor"),
    ("id BETWEEN SYMMETRIC 3 AND 1", "symmetric"),
    ("lower(x => owner) = 'x'", "Kwarg"),
    ("id = 1 /* /* */ OR 1=1 */", "comment"),
]
# The refusals every dialect shares, then PostgreSQL's own (the backtick case is PostgreSQL's own).
PG_HOSTILE = [case for case in REFUSED if not case[0].startswith("`")] + POSTGRES_ONLY


HOSTILE = [("sqlite", *case) for case in REFUSED + SQLITE_ONLY] + [("mysql", *case) for case in REFUSED + MYSQL_ONLY]


@pytest.mark.parametrize("shop, where, problem", HOSTILE, indirect=["shop"], ids=[f"{k}: {w}" for k, w, _ in HOSTILE])
def test_a_hostile_filter_is_refused_naming_why_and_nothing_is_read_or_written(shop: Shop, executed: list[str],
                                                                               where: str, problem: str) -> None:
    version, before = shop.snap.version(), shop.held()
    executed.clear()
    with pytest.raises(ConfigError) as refused:
        shop.refresh(where)
    message = str(refused.value)
    assert refused.value.field == "snapshot.where"
    assert problem in message, message
    assert "cannot select" in message and "\nFix: " in message, message
    assert not any("secrets" in statement for statement in executed), executed  # the database never saw it
    assert shop.snap.version() == version and shop.held() == before
    _no_secret_anywhere(shop)


@pytest.mark.parametrize("where, problem", [("(SELECT pw FROM secrets) = 'x'", "subquery"),
                                            ("id = 1; DROP TABLE secrets", "holds a ';'"),
                                            ("pw = 'x'", "'pw'")])
def test_the_cli_refuses_a_hostile_filter_with_the_fix(shop: Shop, where: str, problem: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    version = shop.snap.version()
    assert shop.cli("--where", where) == 2
    err = capsys.readouterr().err
    assert problem in err and "Fix: " in err, err
    assert shop.snap.version() == version
    _no_secret_anywhere(shop)


def test_a_whitespace_filter_is_refused_with_a_key_range(shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    version = shop.snap.version()
    schema = open_source(shop.config.source("shop")).catalog.schemas()[TABLE]
    for blank in ("", "   ", "\t\n"):
        with pytest.raises(ConfigError, match="is empty"):
            selection_for(schema, None, None, blank)
    with pytest.raises(ConfigError, match=r"(?s)is empty.*Fix: give a condition"):
        shop.refresh("   ", after=[3])
    assert shop.cli("--after", "3", "--where", " \t ") == 2
    assert "is empty" in capsys.readouterr().err
    assert shop.snap.version() == version


def test_a_whitespace_filter_alone_is_refused_not_widened_to_every_row(shop: Shop) -> None:
    version = shop.snap.version()
    with pytest.raises(ConfigError, match="is empty"):
        shop.refresh("   ")
    assert shop.snap.version() == version


def test_the_authorizer_stops_what_a_filter_must_not_do_on_sqlite(tmp_path: Path) -> None:
    """The second fence: while a filtered read runs, its SQLite connection may read only the table being read
    and call only the allowed functions, whatever SQL reaches it."""
    source = SqliteHarness(tmp_path / "s.db")
    source.execute([*SCHEMAS["sqlite"], ("INSERT INTO secrets VALUES (?, ?)", (1, SECRET)),
                    ("INSERT INTO accounts VALUES (?, ?, ?, ?, ?)", ROWS[0])])
    where = check_filter("lower(owner) LIKE 'a%'", "sqlite", TABLE, {"owner": '"owner"'})
    conn = sqlite3.connect(tmp_path / "s.db")
    with sqlite_reads.reading_only(conn, TABLE, where):
        assert conn.execute(f'SELECT "id" FROM "accounts" WHERE {where.sql}', where.params).fetchall() == [(1,)]
        for statement in ["SELECT pw FROM secrets", "SELECT id FROM accounts WHERE (SELECT pw FROM secrets) > ''",
                          "SELECT id FROM accounts UNION SELECT pw FROM secrets",
                          "SELECT load_extension('x')", "SELECT length(randomblob(2000000000))",
                          "SELECT hex(owner) FROM accounts", "ATTACH DATABASE ':memory:' AS other",
                          "PRAGMA table_info(secrets)", "INSERT INTO accounts VALUES (99, 'x', 'x', 0, NULL)",
                          "SELECT * FROM temp.sqlite_master", "DELETE FROM secrets"]:
            with pytest.raises(sqlite3.DatabaseError, match=r"not authorized|prohibited"):
                conn.execute(statement).fetchall()
    assert conn.execute("SELECT pw FROM secrets").fetchone() == (SECRET,)  # only while the filter runs
    conn.close()


def test_a_filter_that_slipped_past_the_check_is_stopped_by_the_authorizer_at_every_sqlite_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the parser ever to pass a subquery, check_selection, the key ranges and the range read itself (the
    Spark task's code) would still refuse to read another table."""
    source = SqliteHarness(tmp_path / "s.db")
    source.execute([*SCHEMAS["sqlite"], ("INSERT INTO secrets VALUES (?, ?)", (1, SECRET)),
                    *[("INSERT INTO accounts VALUES (?, ?, ?, ?, ?)", row) for row in ROWS]])
    config = make_config(tmp_path / "lake", source.source_config("shop", [(TABLE, ["id"])]))
    capture.install(config, "shop")  # the range read reads the txlog's high-water mark first
    src = open_source(config.source("shop"))
    slipped = Filter("x", "sqlite", "((SELECT pw FROM secrets) IS NOT NULL)", (), frozenset({"like"}))
    monkeypatch.setattr(sqlite_reads, "sqlite_filter", lambda *_: slipped)
    rows = RowSelection(where="x")
    with pytest.raises(ConfigError, match=r"access to secrets\.pw is prohibited"):
        src.reads.check_selection(TABLE, rows)
    with pytest.raises(sqlite3.DatabaseError, match=r"access to secrets\.pw is prohibited"):
        src.reads.ranges(TABLE, 5, rows)
    schema = src.catalog.schemas()[TABLE]
    spec = sqlite_reads.SqliteRangeSpec(path=str(tmp_path / "s.db"), busy_timeout_s=5, page_rows=5)
    read = RangeRead("sqlite", "shop", schema, spec, (KeyRange(None, None),), None, "x")
    with pytest.raises(sqlite3.DatabaseError, match=r"access to secrets\.pw is prohibited"):
        list(sqlite_reads.read_range(read, 0).batches)


# -- key bounds -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("after, through, field, problem", [
    (["99999999999999999999999"], None, "snapshot.after", "beyond the range of key column 'id'"),
    (None, ["-99999999999999999999999"], "snapshot.through", "beyond the range of key column 'id'"),
    (["20"], ["10"], "snapshot.through", "empty range"),
    (["10"], ["10"], "snapshot.through", "empty range"),
    (["NaN"], None, "snapshot.after", "is not a value of key column 'id'"),
])
def test_key_bounds_outside_the_type_or_leaving_nothing_are_refused(shop: Shop, after: list[str] | None,
                                                                    through: list[str] | None, field: str,
                                                                    problem: str) -> None:
    version = shop.snap.version()
    with pytest.raises(ConfigError) as refused:
        shop.refresh(after=after, through=through)
    assert refused.value.field == field and problem in str(refused.value), refused.value
    assert "\nFix: " in str(refused.value)
    assert shop.snap.version() == version


def test_the_cli_names_the_bound_and_the_fix(shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    version = shop.snap.version()
    assert shop.cli("--after", "99999999999999999999999") == 2
    err = capsys.readouterr().err
    assert "--after (key_after) 99999999999999999999999 is beyond the range of key column 'id'" in err, err
    assert "Fix: give id a value from" in err
    assert shop.cli("--after", "20", "--through", "10") == 2
    err = capsys.readouterr().err
    assert "empty range" in err and "Fix: give --through (key_through) a key above --after" in err, err
    assert shop.snap.version() == version


def test_a_mysql_int_key_is_bounded_by_its_own_range(shop: Shop) -> None:
    """INT is 32 bits on MariaDB, 64 on SQLite (INTEGER): the bound is checked against the column's type."""
    big = str(2 ** 40)
    if shop.kind == "mysql":
        with pytest.raises(ConfigError, match=r"beyond the range of key column 'id' \(integer"):
            shop.refresh(after=[big])
    else:
        assert shop.refresh(after=[big]).refreshed.rows_read == 0


# -- allowed ----------------------------------------------------------------------------------------------

def _matches(kind: str) -> list[tuple[str, Callable[[dict[str, Any]], bool], str]]:
    """(filter, which source rows it selects, what its rendered SQL holds) for ``kind``."""
    q = (lambda c: f"`{c}`") if kind == "mysql" else (lambda c: f'"{c}"')
    fn = (lambda f: f"pg_catalog.{f}") if kind == "postgres" else str.upper  # see test_..._not_a_look_alike
    quoted = {"sqlite": "[status] = 'new'", "mysql": "`status` = 'new'"}.get(kind, "\"status\" = 'new'")
    escaped = "note = 'it\\'s'" if kind == "mysql" else "note = 'it''s'"
    return [
        ("status = 'new'", lambda r: r["status"] == "new", f"({q('status')} = "),
        ("id IN (2, 4, 6)", lambda r: r["id"] in (2, 4, 6), f"({q('id')} IN (2, 4, 6))"),
        # Any case on SQLite and MariaDB (their default collations); PostgreSQL's LIKE tells case (ILIKE does not).
        ("owner LIKE 'c%'", lambda r: (r["owner"] if kind == "postgres" else r["owner"].lower()).startswith("c"),
         f"({q('owner')} LIKE "),
        ("status = 'paid' AND (balance > 500 OR owner = 'bob')",
         lambda r: r["status"] == "paid" and (r["balance"] > 500 or r["owner"] == "bob"),
         f"(({q('status')} = "),
        ("NOT status = 'closed' AND balance BETWEEN 100 AND 400",
         lambda r: r["status"] != "closed" and 100 <= r["balance"] <= 400, f"({q('balance')} BETWEEN 100 AND 400)"),
        ("upper(owner) = 'CAROL'", lambda r: r["owner"].upper() == "CAROL", f"({fn('upper')}({q('owner')}) = "),
        ("length(owner) = 4 OR note IS NULL", lambda r: len(r["owner"]) == 4 or r["note"] is None,
         f"({fn('length')}({q('owner')}) = 4)"),
        (quoted, lambda r: r["status"] == "new", f"({q('status')} = "),
        (escaped, lambda r: r["note"] == "it's", f"({q('note')} = "),
        # MySQL's and PostgreSQL's default LIKE escape is the backslash (kept in the bound pattern); SQLite
        # names one.
        ("note LIKE '%!%%' ESCAPE '!'" if kind == "sqlite" else "note LIKE '%\\%%'",
         lambda r: r["note"] is not None and "%" in r["note"], f"({q('note')} LIKE "),
        ("CASE WHEN balance < 50 THEN 'low' ELSE 'high' END = 'low'", lambda r: r["balance"] < 50,
         f"((CASE WHEN ({q('balance')} < 50) THEN"),
    ] + (POSTGRES_MATCHES if kind == "postgres" else [])


# PostgreSQL's own: ILIKE, IS [NOT] DISTINCT FROM, ||, % as pg_catalog.mod, and its other functions.
POSTGRES_MATCHES: list[tuple[str, Callable[[dict[str, Any]], bool], str]] = [
    ("owner ILIKE 'c%'", lambda r: r["owner"].lower().startswith("c"), '("owner" ILIKE %s)'),
    ("owner NOT ILIKE '%A%' AND status <> 'closed'", lambda r: "a" not in r["owner"].lower()
     and r["status"] != "closed", '("owner" NOT ILIKE %s)'),
    ("note ILIKE 'A!_%' ESCAPE '!'", lambda r: (r["note"] or "").startswith("a_"), '("note" ILIKE %s ESCAPE %s)'),
    ("note IS DISTINCT FROM 'it''s'", lambda r: r["note"] != "it's", '("note" IS DISTINCT FROM %s)'),
    ("note IS NOT DISTINCT FROM NULL", lambda r: r["note"] is None, '("note" IS NOT DISTINCT FROM NULL)'),
    ("owner || '/' || status = 'bob/paid'", lambda r: f"{r['owner']}/{r['status']}" == "bob/paid",
     '((("owner" || %s) || "status") = %s)'),
    ("id % 3 = 0", lambda r: r["id"] % 3 == 0, '(pg_catalog.mod("id", 3) = 0)'),  # no bare % for psycopg2
    ("mod(balance, 100) = 0 AND balance > 0", lambda r: r["balance"] > 0 and r["balance"] % 100 == 0,
     '(pg_catalog.mod("balance", 100) = 0)'),
    ("left(owner, 2) = 'ca' OR right(owner, 2) = 'ob'", lambda r: r["owner"][:2] == "ca" or r["owner"][-2:] == "ob",
     'pg_catalog.left("owner", 2)'),
    ("strpos(owner, 'a') = 2 AND char_length(owner) < 5", lambda r: r["owner"].find("a") == 1
     and len(r["owner"]) < 5, 'pg_catalog.strpos("owner", %s)'),
    ("substr(owner, 2, 2) = 'ar'", lambda r: r["owner"][1:3] == "ar", 'pg_catalog.substr("owner", 2, 2)'),
    ("trim(owner) = 'bob' OR btrim(status, 'd') = 'pai'", lambda r: r["owner"] == "bob" or r["status"] == "paid",
     'TRIM("owner")'),  # TRIM is grammar: PostgreSQL's parser makes it pg_catalog.btrim itself
    ("coalesce(note, 'none') = 'none' AND nullif(status, 'new') IS NULL",
     lambda r: r["note"] is None and r["status"] == "new", 'COALESCE("note", %s)'),
    ("abs(balance) < 10 OR round(balance / 7.0, 1) = 14.3", lambda r: abs(r["balance"]) < 10
     or round(r["balance"] / 7, 1) == 14.3, 'pg_catalog.abs("balance")'),
    ("to_char(balance, 'FM9999') = '990'", lambda r: r["balance"] == 990, 'pg_catalog.to_char("balance", %s)'),
    ("(balance > 500) IS TRUE", lambda r: r["balance"] > 500, '(("balance" > 500) IS TRUE)'),
    ("\"Owner\" = 'carol'", lambda r: r["owner"] == "carol", '("owner" = %s)'),  # quotes map to columns too
]


@pytest.fixture
def executed(shop: Shop, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the source ran from here on, as the database received it (parameters filled in)."""
    seen: list[str] = []
    if shop.kind == "sqlite":
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = connect(*args, **kwargs)
            conn.set_trace_callback(seen.append)
            return conn

        monkeypatch.setattr(sqlite3, "connect", traced)
    else:
        execute = pymysql.cursors.Cursor.execute

        def recorded(self: Any, query: str, args: Any = None) -> int:
            try:
                return execute(self, query, args)
            finally:
                seen.append(self._executed or query)

        monkeypatch.setattr(pymysql.cursors.Cursor, "execute", recorded)
    return seen


ALLOWED = [(kind, i) for kind in ("sqlite", "mysql") for i in range(len(_matches(kind)))]


@pytest.mark.parametrize("shop, case", ALLOWED, indirect=["shop"],
                         ids=[f"{kind}: {_matches(kind)[i][0]}" for kind, i in ALLOWED])
def test_a_legitimate_filter_reads_exactly_its_rows_as_rendered(shop: Shop, executed: list[str], case: int) -> None:
    where, selects, rendered = _matches(shop.kind)[case]
    source_rows = {r["id"]: r for r in read_rows(open_source(shop.config.source("shop")), TABLE)}
    wanted = {k for k, r in source_rows.items() if selects(r)}
    assert wanted and wanted != set(source_rows), "each case selects some rows, not all"
    shop.damage()
    executed.clear()
    result = shop.refresh(where)
    assert result.refreshed is not None and result.refreshed.rows_read == len(wanted)
    held = shop.held()
    assert {k for k, r in held.items() if r["balance"] != -1} == wanted  # the others were not read
    for k in wanted:
        assert {c: held[k][c] for c in source_rows[k]} == source_rows[k]
    # What ran is the filter as rendered from its tree, with its literals bound, never the text as typed.
    checked = check_filter(where, shop.kind, TABLE, {c: (f'"{c}"' if shop.kind == "sqlite" else f"`{c}`")
                                                     for c in ("id", "owner", "status", "balance", "note")})
    assert rendered in checked.sql, checked.sql
    pieces = re.split(r"\?|%s", checked.sql)  # the rendered text between its bound literals
    assert any(_in_order(pieces, s) for s in executed if " FROM " in s and "WHERE" in s), (checked.sql, executed)
    _no_secret_anywhere(shop)


def _in_order(pieces: list[str], text: str) -> bool:
    at = 0
    for piece in pieces:
        found = text.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def test_a_literal_with_quotes_and_backslashes_is_bound_not_pasted(shop: Shop) -> None:
    """On MariaDB '\\'' is one quote whatever the server's sql_mode, because the value travels as a
    parameter; on SQLite '' is. The row whose note holds a backslash is found by its own text."""
    shop.damage()
    where = "note = 'back\\\\slash'" if shop.kind == "mysql" else "note = 'back\\slash'"
    result = shop.refresh(where)
    assert result.refreshed is not None and result.refreshed.rows_read == 1
    assert shop.held()[4]["balance"] == 0


# -- the renderer alone (no database) ---------------------------------------------------------------------

def test_literals_are_bound_in_the_order_their_placeholders_appear() -> None:
    """The renderer meets ESCAPE's literal, IN's and CASE's in its own order; the parameters follow the text."""
    columns = {"note": '"note"', "status": '"status"'}
    where = check_filter("coalesce(note, 'a') IN ('b', 'c') AND status NOT LIKE 'd!%' ESCAPE '!' AND "
                         "CASE status WHEN 'e' THEN 'f' ELSE 'g' END = 'h'", "sqlite", TABLE, columns)
    assert where.sql == ('(((COALESCE("note", ?) IN (?, ?)) AND ("status" NOT LIKE ? ESCAPE ?)) AND '
                         '((CASE "status" WHEN ? THEN ? ELSE ? END) = ?))')
    assert where.params == ("a", "b", "c", "d!%", "!", "e", "f", "g", "h")


def test_oracle_filters_are_rendered_with_binds_and_refused_alike() -> None:
    """No Oracle server here: what the Oracle source would run, and what it refuses, from the renderer."""
    from dagster_databus.sources.oracle.dialect import selection_clause

    columns = {"id": '"ID"', "status": '"STATUS"', "placed_at": '"PLACED_AT"'}
    where = check_filter("status = 'new' AND TO_CHAR(placed_at, 'YYYY') = '2024'", "oracle", TABLE, columns)
    assert where.sql == '(("STATUS" = :w0) AND (TO_CHAR("PLACED_AT", :w1) = :w2))'
    clause, binds = selection_clause(['"ID"'], KeyRange((1,), (9,)), where)
    assert clause.endswith(f"AND ({where.sql})") and binds == {"a0": 1, "t0": 9, "w0": "new", "w1": "YYYY",
                                                               "w2": "2024"}
    for text, problem in [("SYSDATE > placed_at", "CurrentTimestamp"), ("ROWNUM < 5", "'ROWNUM'"),
                          ("dbms_pipe.receive_message('a', 10) = 1", "qualified"), ("id = :x", "parameter"),
                          ("id = TRUE", "TRUE/FALSE"), ("id IN (SELECT id FROM secrets)", "subquery"),
                          ("id(+) = 1", "join_mark"), ("id = 1 -- x", "comment")]:
        with pytest.raises(ConfigError, match=re.escape(problem)):
            check_filter(text, "oracle", TABLE, columns)


@pytest.mark.parametrize("text, problem", [("(" * 300 + "id = 1" + ")" * 300, "nests deeper"),
                                           ("NOT " * 100 + "id = 1", "nests deeper"),
                                           ("id = 1 OR " * 3000 + "id = 2", "characters long")])
def test_a_filter_too_deep_or_too_long_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        check_filter(text, "sqlite", TABLE, {"id": '"id"'})


# -- PostgreSQL (rendered here, run through psycopg2 on a throwaway cluster) ------------------------------

@pytest.mark.parametrize("where, problem", PG_HOSTILE, ids=[w for w, _ in PG_HOSTILE])
def test_a_hostile_filter_is_refused_on_postgres_naming_why(where: str, problem: str) -> None:
    """Refused from the text alone, before any connection: nothing of it reaches the server."""
    with pytest.raises(ConfigError) as refused:
        check_filter(where, "postgres", TABLE, PG_COLUMNS)
    message = str(refused.value)
    assert refused.value.field == "snapshot.where"
    assert problem in message, message
    assert "cannot select" in message and "\nFix: " in message and "PostgreSQL filters allow" in message, message


def test_a_postgres_cast_is_refused_with_the_literal_to_write_instead() -> None:
    with pytest.raises(ConfigError) as refused:
        check_filter("id::text = '1'", "postgres", TABLE, PG_COLUMNS)
    fix = str(refused.value).split("\nFix: ", 1)[1]
    assert fix.startswith("compare with a plain quoted literal, which PostgreSQL reads as the type"), fix
    assert "regclass" in fix, fix


def test_postgres_filters_are_rendered_with_percent_s_and_pg_catalog_calls() -> None:
    """%s placeholders in the order of the text, no other '%' (psycopg2 formats the text with %), functions
    qualified, PostgreSQL's own operators kept."""
    where = check_filter("coalesce(note, 'a') IN ('b', 'c') AND owner NOT ILIKE 'd!%' ESCAPE '!' AND id % 2 = 0 "
                         "AND note IS DISTINCT FROM 'e' AND lower(owner) || '-' = '%s%(x)s'", "postgres", TABLE,
                         PG_COLUMNS)
    assert where.sql == ('(((((COALESCE("note", %s) IN (%s, %s)) AND ("owner" NOT ILIKE %s ESCAPE %s)) AND '
                         '(pg_catalog.mod("id", 2) = 0)) AND ("note" IS DISTINCT FROM %s)) AND '
                         '((pg_catalog.lower("owner") || %s) = %s))')
    assert where.params == ("a", "b", "c", "d!%", "!", "e", "-", "%s%(x)s")
    assert "%" not in where.sql.replace("%s", "")
    assert where.functions == frozenset(source_kind("postgres").filter_dialect().functions)


@pytest.mark.parametrize("kind, quoted", [("postgres", '"50%"'), ("mysql", "`50%`")])
def test_a_column_whose_name_holds_a_percent_sign_is_refused_where_the_driver_formats_with_it(kind: str,
                                                                                               quoted: str) -> None:
    """psycopg2 and pymysql fill parameters in with Python's %: "50%" in the text would take one (or fail)."""
    with pytest.raises(ConfigError, match=r"holds a '%'"):
        check_filter(f"{quoted} = 1", kind, TABLE, {"50%": quoted, "id": quoted.replace("50%", "id")})
    assert check_filter("id = 1", kind, TABLE, {"50%": quoted, "id": quoted.replace("50%", "id")}).params == ()


ALL_KEYS = KeyRange(None, None)


@dataclass
class PgShop:
    """A PostgreSQL database holding ``accounts`` (ROWS), ``secrets`` and ``texts`` (HOSTILE_TEXTS)."""

    server: PostgresServer
    database: str

    def run(self, sql: str, params: Any) -> tuple[list[tuple[Any, ...]], str]:
        """``sql`` run with ``params`` as the source runs it (psycopg2), and the text the server received."""
        conn = self.server.connect(self.database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall()), (cur.query or b"").decode()
        finally:
            conn.close()

    def intact(self) -> None:
        """The tables as the fixture made them: nothing a filter held ran as SQL."""
        assert self.run("SELECT id, pw FROM secrets ORDER BY id", None)[0] == [(1, SECRET), (2, SECRET + "-2")]
        assert self.run("SELECT count(*) FROM accounts", None)[0] == [(len(ROWS),)]


# Text that would be SQL, a quote's end, a psycopg2 mark or another quoting's opening if it were pasted.
HOSTILE_TEXTS = [
    "x' OR 1=1 --", "1; DROP TABLE secrets", "'; DROP TABLE secrets; --", "$$ OR 1=1 $$", "$q$ OR 1=1 $q$",
    "E'\\x27' OR 1=1", "pg_sleep(10)", "(SELECT pw FROM secrets)", "current_setting('data_directory')",
    "%s", "%(name)s", "%%s", "100%", "%", "U&'\\0027'", "back\\slash' OR '1'='1", "*/ OR 1=1 /*",
    "it's \"quoted\"", "\\'", "ä 😀 \u2028", "secrets.pw", "t.*",
]


@pytest.fixture(scope="module")
def pg_shop() -> Iterator[PgShop]:
    require_tool(find_pg_bindir() is not None,
                 "PostgreSQL server binaries not found: install Debian's postgresql (.ci/prereqs install)")
    server = PostgresServer()
    try:
        server.create_database("filters")
        server.execute(*SCHEMAS["postgres"],
                       *[("INSERT INTO accounts VALUES (%s, %s, %s, %s, %s)", row) for row in ROWS],
                       ("INSERT INTO secrets VALUES (1, %s), (2, %s)", (SECRET, SECRET + "-2")),
                       *[("INSERT INTO texts VALUES (%s, %s)", (i, text)) for i, text in enumerate(HOSTILE_TEXTS)],
                       database="filters")
        yield PgShop(server, "filters")
    finally:
        server.close()


def _pg_select(where: Filter, keys: KeyRange = ALL_KEYS, table: str = TABLE) -> tuple[str, list[Any]]:
    """The query a PostgreSQL read runs for ``keys`` and ``where`` (select_clause, as the source builds it)."""
    clause, params = select_clause('"id"', "%s", keys, where)
    return f'SELECT "id" FROM "{table}" {clause}ORDER BY "id"', params


PG_ALLOWED = list(range(len(_matches("postgres"))))



@pytest.mark.server
@pytest.mark.parametrize("case", PG_ALLOWED, ids=[_matches("postgres")[i][0] for i in PG_ALLOWED])
def test_a_legitimate_postgres_filter_selects_exactly_its_rows_as_rendered(pg_shop: PgShop, case: int) -> None:
    where, selects, rendered = _matches("postgres")[case]
    wanted = [r[0] for r in ROWS if selects(dict(zip(COLUMNS, r, strict=True)))]
    assert wanted and len(wanted) != len(ROWS), "each case selects some rows, not all"
    checked = check_filter(where, "postgres", TABLE, PG_COLUMNS)
    assert rendered in checked.sql, checked.sql
    assert "%" not in checked.sql.replace("%s", ""), checked.sql
    sql, params = _pg_select(checked)
    rows, sent = pg_shop.run(sql, params)
    assert [r[0] for r in rows] == wanted, (checked.sql, sent)
    # The server received the rendered text with each literal quoted by psycopg2, never the text as typed.
    assert _in_order(checked.sql.split("%s"), sent), (checked.sql, sent)
    # With key bounds: the bounds' parameters come first, the filter's after them.
    sql, params = _pg_select(checked, KeyRange((2,), (10,)))
    assert [r[0] for r in pg_shop.run(sql, params)[0]] == [k for k in wanted if 2 < k <= 10]
    pg_shop.intact()


@pytest.mark.server
@pytest.mark.parametrize("index", range(len(HOSTILE_TEXTS)), ids=HOSTILE_TEXTS)
def test_hostile_text_in_a_postgres_literal_arrives_as_its_value(pg_shop: PgShop, index: int) -> None:
    """Each text, written as a plain literal ('' for its quotes), is one bound value: it finds exactly its own
    row, whatever quote, comment, statement, dollar quote or psycopg2 mark it holds."""
    text = HOSTILE_TEXTS[index]
    columns = {"id": '"id"', "body": '"body"'}
    for where, found in [(f"body = '{text.replace(chr(39), chr(39) * 2)}'", [index]),
                         (f"body <> '{text.replace(chr(39), chr(39) * 2)}' AND id = {index}", [])]:
        checked = check_filter(where, "postgres", "texts", columns)
        assert checked.params == (text,) and "%" not in checked.sql.replace("%s", ""), checked
        sql, params = _pg_select(checked, table="texts")
        assert [r[0] for r in pg_shop.run(sql, params)[0]] == found
        # Without key bounds too (params holds the filter's literal alone).
        assert [r[0] for r in pg_shop.run(f'SELECT "id" FROM "texts" WHERE {checked.sql}', checked.params)[0]] == found
    pg_shop.intact()


@pytest.mark.server
def test_what_postgresql_reads_as_one_string_is_bound_as_one(pg_shop: PgShop) -> None:
    """'\\'' is one string on PostgreSQL (standard strings: the backslash is itself, '' a quote), so the
    subquery and the comment below are text inside it, bound as one value: no row, and no secret read."""
    where = "note = '\\'' OR owner = (SELECT pw FROM secrets LIMIT 1) -- '"
    checked = check_filter(where, "postgres", TABLE, PG_COLUMNS)
    assert checked.sql == '("note" = %s)'
    assert checked.params == ("\\' OR owner = (SELECT pw FROM secrets LIMIT 1) -- ",)
    rows, sent = pg_shop.run(*_pg_select(checked))
    assert rows == [] and SECRET not in sent
    pg_shop.intact()


@pytest.mark.server
def test_a_postgres_filter_without_literals_runs_with_or_without_parameters(pg_shop: PgShop) -> None:
    """No '%' but placeholders in the text: psycopg2 leaves it as it is with parameters (even none) and
    without (with an empty list it formats it, where a bare % would fail or take a parameter)."""
    checked = check_filter("id % 5 = 0 OR balance % 2 = 1", "postgres", TABLE, PG_COLUMNS)
    assert checked.params == ()
    # PostgreSQL's mod takes the dividend's sign (mod(-3, 2) is -1), Python's % the divisor's.
    wanted = [r[0] for r in ROWS if r[0] % 5 == 0 or (r[3] > 0 and r[3] % 2 == 1)]
    nothing: list[Any] = [[], (), None]
    for params in nothing:
        assert [r[0] for r in pg_shop.run(f'SELECT "id" FROM "accounts" WHERE {checked.sql} ORDER BY "id"',
                                          params)[0]] == wanted


@pytest.mark.server
def test_postgres_filter_calls_reach_pg_catalog_not_a_look_alike_on_the_search_path(pg_shop: PgShop) -> None:
    """Whoever may create a function in a schema on the search_path can shadow a built-in with a closer argument
    type (CVE-2018-1058): public.upper(varchar) wins over pg_catalog.upper(text) for a varchar column. The
    filter's pg_catalog.upper does not meet it."""
    conn = pg_shop.server.connect(pg_shop.database, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE FUNCTION public.upper(varchar) RETURNS text LANGUAGE sql AS $$ SELECT 'CAROL' $$")
            cur.execute('SELECT count(*) FROM "accounts" WHERE upper("owner") = \'CAROL\'')
            assert cur.fetchone() == (len(ROWS),)  # the look-alike answers an unqualified call
            checked = check_filter("upper(owner) = 'CAROL'", "postgres", TABLE, PG_COLUMNS)
            cur.execute(f'SELECT "id" FROM "accounts" WHERE {checked.sql} ORDER BY "id"', checked.params)
            assert cur.fetchall() == [(3,), (4,)]
    finally:
        conn.rollback()  # the look-alike goes with the transaction
        conn.close()
