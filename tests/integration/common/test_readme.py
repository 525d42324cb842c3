"""The README and docs say what the program does: their commands run here and print what they show."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _block_after(text: str, marker: str) -> str:
    """The first fenced block after ``marker``."""
    rest = text[text.index(marker):]
    return re.search(r"```[a-z]*\n(.*?)```", rest, re.DOTALL).group(1)  # type: ignore[union-attr]


@pytest.mark.spark  # started in the test
def test_the_demo_prints_the_table_the_readme_shows(tmp_path: Path) -> None:
    # The demo's own config, in a folder of its own: its relative paths put the lake under tmp_path.
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "demo.yaml"
    config.write_text((REPO / "config" / "demo.yaml").read_text())
    run = subprocess.run([sys.executable, "-m", "dagster_databus.demo"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "DATABUS_CONFIG": str(config)}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    shown = _block_after((REPO / "README.md").read_text(), "`make demo` ends with")
    assert shown.strip() in run.stdout, run.stdout[-2000:]
    # Every command the demo prints can be pasted into a shell as it is.
    commands = [line[2:] for line in run.stdout.splitlines() if line.startswith("$ ")]
    assert len(commands) == 3 and all(" && DATABUS_CONFIG=" in c and c.endswith(" dg launch --assets '*'")
                                      for c in commands), commands


def test_docs_tail_command_is_accepted_as_written(tmp_path: Path) -> None:
    """docs/consumers.md's `databus tail --config ...` parses as written (its optional [parts] left out):
    the missing config file is the only complaint, on one line, with exit 2."""
    block = _block_after((REPO / "docs" / "consumers.md").read_text(), "## Command line")
    command = re.sub(r"\[[^\]]*\]", "", block.replace("\\\n", " "))
    args = shlex.split(command)
    assert args[:2] == ["databus", "tail"]
    args = [str(tmp_path / "missing.yaml") if a.endswith(".yaml") else a for a in args[1:]]
    run = subprocess.run([str(Path(sys.executable).parent / "databus"), *args], capture_output=True, text=True,
                         timeout=60)
    assert "unrecognized arguments" not in run.stderr and "usage:" not in run.stderr, run.stderr
    assert run.returncode == 2 and "missing.yaml" in run.stderr and run.stderr.count("\n") == 1
