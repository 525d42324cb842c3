"""Configuration: the minimal form works as written; every bad input names the field and the fix,
and nothing is written (no lake folder, no capture objects in the database)."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.config import load_config
from dagster_databus.errors import ConfigError
from dagster_databus.storage.lake import Lake


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "databus.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL, note TEXT)")
        conn.execute("CREATE TABLE lines (order_id INTEGER, line INTEGER, sku TEXT, PRIMARY KEY (order_id, line))")
        conn.execute("CREATE TABLE loose (a INTEGER, b TEXT)")
    return path


def minimal(db: Path, table: str = "orders", key: str = "[id]", kind: str = "sqlite") -> str:
    return textwrap.dedent(f"""
        lake: ./lake
        sources:
          - name: shop
            kind: {kind}
            path: {db}
            tables:
              - name: {table}
                primary_key: {key}
        """)


def schema_objects(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%databus%'"))


def test_minimal_config_works_as_written(tmp_path: Path, db: Path) -> None:
    config = load_config(write(tmp_path, minimal(db)))
    assert config.lake.path == tmp_path / "lake"
    assert config.sources[0].tables[0].primary_key == ("id",)
    capture.install(config, "shop")
    result = capture.run(config, "shop")
    assert result.events == 0 and (tmp_path / "lake" / "log" / "shop").is_dir()


def test_verify_is_a_bare_policy_or_its_fields_and_tables_override_the_policy(tmp_path: Path, db: Path) -> None:
    config = load_config(write(tmp_path, minimal(db) + "        verify: off\n      - name: lines\n"
                                                         "        primary_key: [order_id, line]\n    verify: report\n"))
    source = config.sources[0]
    assert (source.verify.policy, source.verify.every_runs) == ("report", 288)
    assert (source.verify_policy("orders"), source.verify_policy("lines")) == ("off", "report")
    fields = load_config(write(tmp_path, minimal(db) + "    verify: {every_runs: 12, min_rows: 10}\n")).sources[0]
    assert (fields.verify.policy, fields.verify.every_runs, fields.verify.min_rows) == ("repair", 12, 10)


def test_a_file_uri_lake_is_its_folder(tmp_path: Path, db: Path) -> None:
    config = load_config(write(tmp_path, minimal(db).replace("lake: ./lake", f"lake: file://{tmp_path}/elsewhere")))
    assert config.lake.path == tmp_path / "elsewhere"


def test_an_object_store_lake_takes_its_options_secrets_only_from_the_environment(
        tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_SECRET", "hunter2")
    config = load_config(write(tmp_path, minimal(db).replace("lake: ./lake", (
        "lake: s3://bucket/prod/lake\n"
        "storage_options: {AWS_REGION: eu-west-1, AWS_SECRET_ACCESS_KEY: '${LAKE_SECRET}'}"))))
    location = config.lake.location
    assert (location.scheme, location.bucket, location.prefix, config.lake.path) == ("s3", "bucket", "prod/lake", None)
    assert location.options == {"AWS_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "hunter2"}
    # What other processes are given (a Spark task, a step in another container) holds the reference only.
    assert "hunter2" not in config.lake.spec() + repr(config) + config.lake.described()
    assert Lake.from_spec(config.lake.spec()).location.options == location.options


def test_relative_database_path_resolves_against_the_config_folder(tmp_path: Path, db: Path) -> None:
    config = load_config(write(tmp_path, minimal(Path(db.name))))
    assert config.sources[0].path == db


def test_relative_spill_folder_resolves_against_the_config_folder(tmp_path: Path, db: Path) -> None:
    config = load_config(write(tmp_path, minimal(db) + "merge: {memory_mb: 64, spill_dir: ./spill}\n"))
    assert (config.merge.memory_mb, config.merge.spill_dir) == (64, tmp_path / "spill")


@pytest.mark.parametrize(
    ("case", "field", "words"),
    [
        (lambda db: minimal(db, kind="mongodb"), "sources[0].kind", "unknown source kind 'mongodb'"),
        (lambda db: minimal(db, table='"orders; DROP TABLE orders"'), "sources[0].tables[0].name",
         "not a plain identifier"),
        (lambda db: minimal(db, key='["id) --"]'), "sources[0].tables[0].primary_key", "not a plain identifier"),
        (lambda db: minimal(db, key="[]"), "sources[0].tables[0].primary_key", "at least 1"),
        (lambda db: minimal(db, table="__shadow"), "sources[0].tables[0].name", "reserved"),
        (lambda db: minimal(db).replace("lake: ./lake\n", ""), "lake", "missing"),
        (lambda db: minimal(db).replace("kind: sqlite", "kind: sqlite\n    chunk: 5"), "sources[0].chunk",
         "unknown field"),
        (lambda db: minimal(db) + "    poll: {chunk_rows: many}\n", "sources[0].poll.chunk_rows",
         "valid integer"),
        (lambda db: minimal(db) + "merge: {memory_mb: 1}\n", "merge.memory_mb", "greater than or equal to 16"),
        (lambda db: minimal(db) + "merge: {in_driver_mib: -1}\n", "merge.in_driver_mib", "greater than or equal to 0"),
        (lambda db: minimal(db) + "merge: {in_driver_mib: 2.5}\n", "merge.in_driver_mib", "valid integer"),
        (lambda db: "lake: [unclosed", "databus.yaml", "not valid YAML"),
        (lambda db: minimal(db) + "lake: /\n", "databus.yaml",
         "key 'lake' is given twice in one mapping (lines 2 and 10)"),
        (lambda db: minimal(db).replace("kind: sqlite", "kind: sqlite\n    kind: mysql"), "databus.yaml",
         "key 'kind' is given twice"),
        (lambda db: minimal(db).replace("lake: ./lake", "lake: s3://bucket/lake\n"
                                                        "storage_options: {AWS_SECRET_ACCESS_KEY: hunter2}"),
         "storage_options", "AWS_SECRET_ACCESS_KEY holds a secret written into the config"),
        (lambda db: minimal(db).replace("lake: ./lake", "lake: s3://bucket/lake\nstorage_options: [a]"),
         "storage_options", "must be a mapping"),
        (lambda db: minimal(db).replace("lake: ./lake", "lake: ftp://host/lake"), "lake", "scheme 'ftp'"),
        (lambda db: "- just\n- a list\n", "(top level)", "mapping"),
        (lambda db: minimal(db) + "    verify: fix\n", "sources[0].verify.policy", "'repair', 'report' or 'off'"),
        (lambda db: minimal(db) + "    verify: {every_runs: 0}\n", "sources[0].verify.every_runs", "greater than"),
        (lambda db: minimal(db) + "    verify: {share: 2}\n", "sources[0].verify.share", "less than or equal to 1"),
        (lambda db: minimal(db) + "        verify: sometimes\n", "sources[0].tables[0].verify", "'repair'"),
    ],
)
def test_malformed_config_names_field_and_fix(tmp_path: Path, db: Path, case, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, case(db)))
    assert err.value.field.endswith(field), err.value.field
    assert words in str(err.value)
    assert "Fix:" in str(err.value)
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    ("table", "key", "field", "words"),
    [
        ("missing_table", "[id]", "sources.shop.tables[0].name", "does not exist"),
        ("orders", "[order_no]", "sources.shop.tables[0].primary_key", "has no column 'order_no'"),
        ("lines", "[order_id]", "sources.shop.tables[0].primary_key", "not the primary key"),
        ("loose", "[a]", "sources.shop.tables[0].primary_key", "not the primary key"),
    ],
)
def test_config_that_does_not_match_the_database_fails_before_writing(
    tmp_path: Path, db: Path, table: str, key: str, field: str, words: str
) -> None:
    config = load_config(write(tmp_path, minimal(db, table=table, key=key)))
    for step in (capture.install, capture.run):
        with pytest.raises(ConfigError) as err:
            step(config, "shop")
        assert err.value.field == field and words in str(err.value)
        assert "Fix:" in str(err.value)
    assert schema_objects(db) == []
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("kind", ["absent", "directory", "not_sqlite"])
def test_unreadable_database_file_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "shop.db"
    if kind == "directory":
        target.mkdir()
    elif kind == "not_sqlite":
        target.write_bytes(b"this is not a database" * 100)
    config = load_config(write(tmp_path, minimal(target)))
    with pytest.raises(ConfigError) as err:
        capture.install(config, "shop")
    assert err.value.field == "sources.shop.path"
    assert str(target) in str(err.value)
    assert not (tmp_path / "lake").exists()
    if kind == "absent":
        assert not target.exists(), "a missing database must not be created"
    if kind == "not_sqlite":
        assert target.read_bytes() == b"this is not a database" * 100


def test_missing_config_file_names_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABUS_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="DATABUS_CONFIG"):
        load_config()


def test_missing_config_file_named_by_the_caller_is_blamed_on_the_path(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABUS_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"nope\.yaml") as err:
        load_config(tmp_path / "nope.yaml")
    assert "DATABUS_CONFIG" not in str(err.value) and "--config" in err.value.fix


def test_default_config_is_the_embedded_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABUS_CONFIG", raising=False)
    config = load_config()
    assert [t.name for t in config.sources[0].tables] == ["customers", "orders", "order_items"]


CRONS = ["@daily", "@hourly", "*/5 * * * *", "0 0 * * MON", "0 0 1 JAN *", "0 0 * * 7", "61 * * * *", "0 0 L * *",
         "0 0 * * 1#2", "*/0 * * * *", "0 0 ? * *", "0 0 * * mon-fri", "0 0 * * * *", "1,2,3 * * * *", "5-1 * * * *",
         "*/5 * * *", "every 5 minutes", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8", "0-59/15 * * * *",
         "*/x * * * *", "0 0 15W * *", "0 0 * * 5L", "@reboot", "", "0 0 * * funday", "0 0 LW * *", "0 0 * * L",
         "0 0 1#2 * *", "0 0 * * 7#1", "0 0 * * mon#2", "0 0 * * 1-5/2", "0 0 * jan-mar/2 *", "0 0 1,L * *",
         "0 0 L-2 * *"]


@pytest.mark.parametrize("expression", CRONS)
def test_poll_cron_is_checked_as_dagster_checks_it(tmp_path: Path, db: Path, expression: str) -> None:
    from dagster._utils.schedules import is_valid_cron_string

    text = minimal(db) + f"    poll: {{cron: '{expression}'}}\n"
    if is_valid_cron_string(expression):
        assert load_config(write(tmp_path, text)).sources[0].poll.cron == expression
    else:
        with pytest.raises(ConfigError) as err:
            load_config(write(tmp_path, text))
        assert err.value.field.endswith("sources[0].poll.cron") and "Fix:" in str(err.value)
