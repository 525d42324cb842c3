"""The Oracle grammar gate: every statement install renders parses with a real Oracle grammar
(sqlfluff's ``oracle`` dialect), for a sample table with a column of every type Oracle capture maps.

The statements are the ones ``OracleInstall.install`` applies (``oracle.sql.install_scripts``), rendered
without a server. Where sqlfluff cannot parse valid Oracle, the construct is named in ``NOT_IN_SQLFLUFF``
and stood in for by something sqlfluff parses, so the rest of the statement is still checked; every
entry must still be needed and still be used, so the list cannot grow stale. Needs no server: never
skipped."""

from __future__ import annotations

import re
from functools import cache

import pytest
from sqlfluff.core import FluffConfig, Linter

from dagster_databus.core.types import KINDS
from dagster_databus.sources.oracle.sql import Statement, TableObjects, install_scripts, quote, split_script
from dagster_databus.sources.oracle.types import oracle_column_type, select_expression

# One declared type for every kind Oracle capture maps to (and the variants that render differently).
SAMPLE_TYPES = ("NUMBER(9,0)", "NUMBER(18,0)", "NUMBER(38,0)", "NUMBER(10,2)", "NUMBER", "FLOAT(49)", "FLOAT(126)",
                "BINARY_FLOAT", "BINARY_DOUBLE", "DATE", "TIMESTAMP(6)", "TIMESTAMP(9)", "TIMESTAMP(3) WITH TIME ZONE",
                "TIMESTAMP(9) WITH TIME ZONE", "TIMESTAMP(6) WITH LOCAL TIME ZONE", "INTERVAL DAY(9) TO SECOND(6)",
                "VARCHAR2(100)", "NVARCHAR2(50)", "CHAR(3)", "CLOB", "NCLOB", "RAW(16)", "BLOB", "BOOLEAN")
COLUMNS = tuple((f"C{i}_{re.sub(r'[^A-Z0-9]+', '_', declared).strip('_')}", declared)
                for i, declared in enumerate(SAMPLE_TYPES))
KEY = (COLUMNS[0][0], COLUMNS[16][0])  # a compound key: an integer and a string
SAMPLE = TableObjects(table="ORDERS", source="crm", key=KEY, columns=tuple(name for name, _ in COLUMNS))

# Valid Oracle that sqlfluff's oracle dialect cannot parse: name -> (the construct, what stands in for it).
NOT_IN_SQLFLUFF: dict[str, tuple[re.Pattern[str], str]] = {
    # A DML trigger's conditional predicate (IF UPDATING THEN ...): sqlfluff reads UPDATING only as a
    # keyword; TRUE is a boolean of the same place in the grammar.
    "trigger conditional predicate": (re.compile(r"\b(?:INSERTING|UPDATING|DELETING)\b(?!\s*\()"), "TRUE"),
}


@cache
def linter() -> Linter:
    return Linter(config=FluffConfig(overrides={"dialect": "oracle"}))


def problems(text: str, plsql: bool) -> list[str]:
    """What sqlfluff's oracle dialect cannot parse in one statement (empty: it parses)."""
    parsed = linter().parse_string(text + ("\n/\n" if plsql else ";\n"))
    if parsed.tree is None:
        return [str(v) for v in parsed.violations] or ["no parse tree"]
    return ([f"unparsable: {s.raw[:120]!r}" for s in parsed.tree.recursive_crawl("unparsable")]
            + [str(v) for v in parsed.violations])


def without_known_gaps(text: str) -> str:
    for construct, stand_in in NOT_IN_SQLFLUFF.values():
        text = construct.sub(stand_in, text)
    return text


def install_statements() -> list[tuple[str, Statement]]:
    return [(f"{script} #{i}", statement) for script, statements in install_scripts({"orders": SAMPLE})
            for i, statement in enumerate(statements)]


STATEMENTS = install_statements()


def test_the_sample_table_has_a_column_of_every_mapped_kind() -> None:
    kinds = {mapped.kind for _, declared in COLUMNS if (mapped := oracle_column_type(declared)) is not None}
    assert all(oracle_column_type(declared) is not None for _, declared in COLUMNS)
    oracle_kinds = {"boolean", "integer", "long", "float", "double", "decimal", "number", "string", "binary",
                    "timestamp_ntz", "timestamp", "time"}
    assert oracle_kinds <= set(KINDS)
    assert kinds == oracle_kinds


def test_install_renders_the_core_and_every_table_script() -> None:
    scripts = {script.split(" (")[0] for script, _ in install_scripts({"orders": SAMPLE})}
    assert {"install/02_sync_core.sql", "table/04_triggers.sql", "table/05_view.sql"} <= scripts
    assert len(STATEMENTS) >= 18


@pytest.mark.parametrize(("where", "statement"), STATEMENTS, ids=[w for w, _ in STATEMENTS])
def test_every_install_statement_parses_as_oracle(where: str, statement: Statement) -> None:
    assert problems(without_known_gaps(statement.text), statement.plsql) == [], where


@pytest.mark.parametrize("name", sorted(NOT_IN_SQLFLUFF))
def test_every_named_gap_is_still_used_and_still_needed(name: str) -> None:
    construct = NOT_IN_SQLFLUFF[name][0]
    using = [s for _, s in STATEMENTS if construct.search(s.text)]
    assert using, f"{name}: no install statement uses it any more; remove it from NOT_IN_SQLFLUFF"
    others = {n: gap for n, gap in NOT_IN_SQLFLUFF.items() if n != name}
    for statement in using:
        text = statement.text
        for pattern, other in others.values():
            text = pattern.sub(other, text)
        assert problems(text, statement.plsql), f"{name}: sqlfluff parses it now; remove it from NOT_IN_SQLFLUFF"


def test_the_bootstrap_select_of_every_mapped_type_parses() -> None:
    keys = [quote(k) for k in KEY]
    exact = ", ".join(select_expression(quote(name), declared, quote(name)) for name, declared in COLUMNS)
    text = (f"SELECT {exact}, {', '.join(keys)} FROM \"ORDERS\" AS OF SCN :scn WHERE ({keys[0]} > :a0) "
            f"ORDER BY {', '.join(keys)} FETCH FIRST :n ROWS ONLY")
    assert problems(text, plsql=False) == []


@pytest.mark.parametrize(("broken", "where"), [
    (("currentMask := v_mask;", "currentMask := ;"), "an assignment without a value"),
    (("END IF;\n        RETURN currentTxn;", "RETURN currentTxn;"), "an IF without END IF"),
    (("IF v_enabled = 'N' THEN", "IF v_enabled = 'N'"), "an IF without THEN"),
])
def test_a_broken_plsql_body_fails_the_gate(broken: tuple[str, str], where: str) -> None:
    [body] = [s for name, s in STATEMENTS if name.startswith("install/02_sync_core.sql") and "PACKAGE BODY" in s.text]
    assert problems(without_known_gaps(body.text), plsql=True) == []
    original, damaged = broken
    assert original in body.text
    assert problems(without_known_gaps(body.text.replace(original, damaged, 1)), plsql=True), where


def test_a_broken_trigger_fails_the_gate_even_with_its_gap_stood_in_for() -> None:
    [trigger] = [s for name, s in STATEMENTS if name.startswith("table/04_triggers.sql") and "UPDATING" in s.text]
    assert problems(without_known_gaps(trigger.text.replace("END IF;", "END;", 1)), plsql=True)


def test_the_gate_reads_statements_as_install_splits_them() -> None:
    [statement] = split_script("CREATE OR REPLACE PACKAGE p AS\n    PROCEDURE x;\nEND p;\n/\n")
    assert statement.plsql and problems(statement.text, statement.plsql) == []
