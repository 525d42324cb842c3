"""Loads the package's SQL files and renders templates.

The SQL lives in the repository's top-level ``sql/`` folder; a build copies it into the package as
``dagster_databus/sql/`` (``build_support/sql_into_package.py``), so an installed wheel, and the zip shipped to a
Spark Connect server, carry it and read it with ``importlib.resources``. A checkout (or an editable install)
reads the top-level folder itself.

Templates use ``{name}`` placeholders. Values must already be quoted identifiers or
literals built from validated names; rendering refuses anything containing a quote
character it did not expect, as a last guard against pasting raw config into SQL.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from dagster_databus.errors import InstallationError

CHECKOUT_SQL = Path(__file__).resolve().parents[2] / "sql"


@cache
def sql_root() -> Traversable:
    """The folder holding the SQL files: the package's own ``sql/`` where the build put one (a wheel, the shipped
    zip), else the checkout's top-level ``sql/``."""
    packaged = files("dagster_databus") / "sql"
    return packaged if packaged.is_dir() else CHECKOUT_SQL


@cache
def load(dialect: str, name: str) -> str:
    root = sql_root()
    path = root.joinpath(dialect, *name.split("/"))
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise InstallationError(
            f"SQL file {dialect}/{name} is missing from {root}: this installation of dagster-databus is incomplete",
            "install a wheel or sdist built from the repository (pip wheel ., or python -m build: the build copies "
            "sql/ into the package), or install the checkout itself with pip install -e .") from None


def render(dialect: str, name: str, **values: str) -> str:
    for key, value in values.items():
        if ";" in value or "--" in value:
            raise ValueError(f"refusing to render {name}: placeholder {key} contains SQL punctuation")
    return load(dialect, name).format_map(values)
