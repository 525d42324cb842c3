"""The package ships as a zip to Spark Connect servers (``spark.session.package_zip``), and zipimport finds
only regular packages: every folder of ``dagster_databus`` needs its ``__init__.py``."""

from __future__ import annotations

from pathlib import Path

import dagster_databus


def test_every_folder_of_the_package_is_a_regular_package() -> None:
    root = Path(dagster_databus.__file__).resolve().parent
    folders = [p for p in [root, *root.rglob("*")] if p.is_dir() and p.name != "__pycache__"]
    assert [str(p.relative_to(root)) for p in folders if not (p / "__init__.py").exists()] == []
