"""Loads SQL from the repository's ``sql/`` folder and renders templates.

Templates use ``{name}`` placeholders. Values must already be quoted identifiers or
literals built from validated names; rendering refuses anything containing a quote
character it did not expect, as a last guard against pasting raw config into SQL.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

SQL_ROOT = Path(__file__).resolve().parents[2] / "sql"


@cache
def load(dialect: str, name: str) -> str:
    path = SQL_ROOT / dialect / name
    try:
        return path.read_text()
    except OSError as exc:
        shipped = _from_archive(f"sql/{dialect}/{name}")
        if shipped is not None:
            return shipped
        raise FileNotFoundError(
            f"SQL file {path} is missing: the sql/ folder must sit beside the dagster_databus package "
            f"(install the project with 'pip install -e .')"
        ) from exc


def _from_archive(member: str) -> str | None:
    """``member`` of the zip this package was imported from, when it was (shipped to a Spark Connect server:
    ``spark.ship_package``, whose zip holds ``sql/`` beside the package); else None."""
    import zipimport

    loader = globals().get("__loader__")
    if not isinstance(loader, zipimport.zipimporter):
        return None
    try:
        return loader.get_data(member).decode()
    except OSError:
        return None


def render(dialect: str, name: str, **values: str) -> str:
    for key, value in values.items():
        if ";" in value or "--" in value:
            raise ValueError(f"refusing to render {name}: placeholder {key} contains SQL punctuation")
    return load(dialect, name).format_map(values)
