"""Errors say whether running again may succeed, and retries act on it: Dagster retries a transient error
with backoff and never spends a ``RetryPolicy``'s attempts on a permanent one; the CLI exits 75
(EX_TEMPFAIL) for a transient error and 2 for a permanent one; a Spark task's error keeps its kind."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from dagster_databus import errors
from dagster_databus.cli import EXIT_TRANSIENT, main
from dagster_databus.defs import common
from dagster_databus.defs.common import MAX_RETRIES, clear_errors
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.errors import (
    ConcurrentRunError,
    ConfigError,
    DatabusError,
    SourceUnavailableError,
    SparkUnavailableError,
    StandbyBehindError,
    for_task,
    from_task,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.storage.durable import exclusive_lock


def _kinds() -> dict[str, type[DatabusError]]:
    return {name: kind for name, kind in vars(errors).items()
            if isinstance(kind, type) and issubclass(kind, DatabusError)}


def test_only_errors_that_running_again_may_cure_are_transient() -> None:
    kinds = _kinds()
    assert all(isinstance(kind.transient, bool) for kind in kinds.values())
    assert {name for name, kind in kinds.items() if kind.transient} == {
        "SourceUnavailableError", "ConcurrentRunError", "StandbyBehindError", "SparkUnavailableError"}
    # A raise site that knows better overrides its class, and the override survives a Spark task.
    diverged = StandbyBehindError("history diverged", "bootstrap", transient=False, source="db")
    assert not diverged.transient and StandbyBehindError("behind", "wait").transient
    for exc in (diverged, SourceUnavailableError("gone", "wait", source="db"), ConfigError("f", "bad", "fix")):
        back = from_task(RuntimeError(f"Python worker failed: {for_task(exc)}"))
        assert back is not None and back.transient == exc.transient and back.problem == exc.problem


def test_dagster_retries_a_transient_error_with_backoff_and_a_permanent_one_never() -> None:
    class Context:
        retry_number = 0

    context = Context()
    with pytest.raises(dg.RetryRequested) as retry, clear_errors(context):
        raise SparkUnavailableError("connect server gone", "start it")
    assert retry.value.max_retries == MAX_RETRIES and retry.value.seconds_to_wait == common.BASE_BACKOFF_S
    context.retry_number = MAX_RETRIES
    with pytest.raises(dg.Failure) as failed, clear_errors(context):
        raise ConcurrentRunError("locked", "wait")
    assert failed.value.allow_retries and "transient" in str(failed.value.metadata["retry"].value)
    context.retry_number = 0
    with pytest.raises(dg.Failure) as failed, clear_errors(context):
        raise StandbyBehindError("history diverged", "bootstrap", transient=False)
    assert not failed.value.allow_retries and "permanent" in str(failed.value.metadata["retry"].value)
    assert failed.value.metadata["error"].value == "StandbyBehindError"


def _attempts(monkeypatch: pytest.MonkeyPatch, exc: DatabusError) -> tuple[int, dg.ExecuteInProcessResult]:
    """Run a one-op job whose op raises ``exc`` every time, under a retry policy of its own; return how
    many times the op ran."""
    monkeypatch.setattr(common, "BASE_BACKOFF_S", 0)  # the backoff's length is not what is under test
    runs: list[int] = []

    @dg.op(retry_policy=dg.RetryPolicy(max_retries=5))
    def step(context) -> None:  # type: ignore[no-untyped-def]  # Dagster reads the bare name
        runs.append(context.retry_number)
        with clear_errors(context):
            raise exc

    @dg.job
    def job() -> None:
        step()

    result = job.execute_in_process(raise_on_error=False)
    assert not result.success
    return len(runs), result


def test_a_retry_policy_spends_no_attempt_on_a_permanent_error(monkeypatch: pytest.MonkeyPatch) -> None:
    ran, result = _attempts(monkeypatch, ConfigError("sources.shop.path", "no such file", "name the file"))
    assert ran == 1
    failure = result.failure_data_for_node("step")
    assert failure is not None and "no such file" in str(failure.error)
    ran, _ = _attempts(monkeypatch, SourceUnavailableError("server gone", "start it"))
    assert ran > MAX_RETRIES  # our own backoff retries, then the policy's


def test_the_cli_exits_75_on_a_transient_error_and_2_on_a_permanent_one(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db").run(5)
    config = tmp_path / "databus.yaml"
    config.write_text(json.dumps({"lake": "lake", "merge": {"engine": "local"}, "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "tables": [{"name": "orders", "primary_key": ["id"]}]}]}))
    assert main(["--config", str(config), "install"]) == 0
    log = ChangeLog(tmp_path / "lake", "shop")
    with exclusive_lock(log.root / ".lock", "a test's hold", "release it"):
        assert main(["--config", str(config), "bootstrap", "--source", "shop"]) == EXIT_TRANSIENT == 75
    assert "locked by another run" in capsys.readouterr().err
    assert main(["--config", str(config), "bootstrap", "--source", "nope"]) == 2
    assert main(["--config", str(config), "bootstrap", "--source", "shop"]) == 0
