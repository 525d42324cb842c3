"""Ctrl-C ends the ``databus`` command with one line and status 130, even where a library turns the interrupt
into an error of its own (pydantic-core does, when it lands while a model's serializer is built)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dagster_databus import cli
from dagster_databus.cli import commands


def test_an_interrupt_a_library_wraps_still_ends_quietly(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    def building(argv: list[str] | None) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise RuntimeError("Error building `literal` serializer:\n  KeyboardInterrupt:") from None
        return 0

    monkeypatch.setattr(commands, "main", building)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.main([]) == cli.EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == "interrupted\n"


def test_an_error_without_an_interrupt_is_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(argv: list[str] | None) -> int:
        raise RuntimeError("a real failure")

    monkeypatch.setattr(commands, "main", failing)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(RuntimeError, match="a real failure"):
            cli.main([])
    finally:
        signal.signal(signal.SIGINT, previous)
