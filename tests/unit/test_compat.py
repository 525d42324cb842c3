"""The lake's older on-disk forms are listed in one place (``log.compat``): every reader the list names exists,
and each form a version 0 lake holds is read, then moved on by the next write."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from dagster_databus.core.scn import Scn
from dagster_databus.log.compat import OLD_FORMS, ddl_records_v0
from dagster_databus.log.ddl import DdlLog
from dagster_databus.sources.sqlite.setup import OLD_FORMS as SQLITE_OLD_FORMS
from dagster_databus.storage.lake import Lake
from tests.support.paths import REPO

# The lake's forms, and each kind's older installs (listed beside the install that converts them).
EVERY_OLD_FORM = (*OLD_FORMS, *SQLITE_OLD_FORMS)


def test_every_old_form_names_a_reader_that_exists_and_when_it_can_go() -> None:
    for form in EVERY_OLD_FORM:
        module, _, attribute = form.reader.partition(":")
        assert hasattr(importlib.import_module(module), attribute), form.reader
        assert form.remove_when and form.version and form.what


def test_architecture_lists_every_old_form() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = [form.version for form in EVERY_OLD_FORM if form.version not in text]
    assert not missing, f"docs/architecture.md's Compatibility section lacks: {missing}"


def test_a_ddl_json_of_an_earlier_version_is_read_beside_the_records(tmp_path: Path) -> None:
    lake = Lake.parse(str(tmp_path / "lake"))
    prefix = "log/shop/ddl/"
    old = [{"scn": "5", "table": "orders", "statement": "ALTER TABLE orders ADD x INT"}]
    lake.objects.write(prefix.rstrip("/") + ".json", json.dumps(old).encode())
    assert ddl_records_v0(lake.objects, prefix)[0]["table"] == "orders"
    log = DdlLog(lake, prefix)
    log.record([(Scn(7), "orders", "ALTER TABLE orders DROP x")])
    assert [(r.scn.value, r.statement) for r in log.records()] == [
        (5, "ALTER TABLE orders ADD x INT"), (7, "ALTER TABLE orders DROP x")]
