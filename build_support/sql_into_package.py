"""Build step (``[tool.setuptools.cmdclass]`` in pyproject.toml): a wheel carries the repository's top-level
``sql/`` folder as ``dagster_databus/sql/``, where ``dagster_databus.sources.sqlfiles`` reads it with
``importlib.resources``. setuptools puts only package folders in a wheel, so the copy is made here. An editable
install reads the checkout's ``sql/`` itself and gets no copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py

SQL = Path(__file__).resolve().parents[1] / "sql"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not SQL.is_dir():
            raise FileNotFoundError(f"{SQL} is missing: build from a checkout or an sdist, which both hold sql/")
        target = Path(self.build_lib) / "dagster_databus" / "sql"
        shutil.copytree(SQL, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*~", ".*"))
