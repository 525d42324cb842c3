"""Every source kind on every layer: the checks ``unit/test_kinds.py`` runs, here so that a copy of the package with
a kind's entry removed from one layer can be checked in a process of its own (``python -m tests.support.kinds``).

- ``names_outside``: no module outside a kind's own places names a kind (a string that is a kind's name, an
  identifier or an import holding one, or prose: a comment, docstring or message naming a kind or one of its labels);
  the registry (``sources/registry.py``) is where the others ask.
- ``registration_problems``: each kind the config accepts is registered whole (adapter, range reader, filter
  dialect, descriptions), and the Dagster definitions, the CLI's ``validate`` and ``status`` take a config with a
  source of every kind at once. No server is needed: nothing here connects.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Any

# The places that may name a kind: its own package, the config models, the registry, and the demo's own SQLite
# setup. Paths inside the package.
KIND_PLACES = ("config/", "demo/", "sources/registry.py")
# A minimal source of each kind, as a config's sources[] entry: what the checks load. A new kind needs one here
# (and a harness in tests/support/harness.py for the suite that runs it).
EXAMPLES: dict[str, dict[str, Any]] = {
    "sqlite": {"path": "shop.db"},
    "mysql": {"host": "127.0.0.1", "port": 1, "database": "shop", "user": "databus", "connect_timeout_s": 1},
    "postgres": {"host": "127.0.0.1", "port": 1, "database": "shop", "user": "databus", "connect_timeout_s": 1},
    "oracle": {"dsn": "127.0.0.1:1/NOPE", "user": "databus", "connect_timeout_s": 1},
}


def package_root() -> Path:
    import dagster_databus

    return Path(dagster_databus.__file__).resolve().parent


def kind_names() -> list[str]:
    from dagster_databus.config import SUPPORTED_KINDS

    return list(SUPPORTED_KINDS)


def names_outside(root: Path | None = None) -> list[str]:
    """Each place in the package, outside a kind's own places, that names a kind: ``module:line: what``. Code (a
    kind's name as a string, an identifier or an import holding one) and prose (a comment, a docstring or a message
    naming a kind or one of its labels, such as "MariaDB"): a module elsewhere speaks of capabilities, not kinds."""
    root = root or package_root()
    kinds = kind_names()
    places = KIND_PLACES + tuple(f"sources/{kind}/" for kind in kinds)
    words = re.compile("|".join(sorted({*kinds, *kind_words()}, key=len, reverse=True)), re.IGNORECASE)
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module.startswith(places):
            continue
        text = path.read_text()
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            for what in _named(node, kinds) or _prose(node, words):
                found.append(f"{module}:{getattr(node, 'lineno', '?')}: {what}")
        with path.open("rb") as stream:
            for token in tokenize.tokenize(stream.readline):
                if token.type == tokenize.COMMENT and (match := words.search(token.string)):
                    found.append(f"{module}:{token.start[0]}: the comment naming {match.group(0)!r}")
    return found


def kind_words() -> set[str]:
    """The words that name a kind besides its name: each part of its label ("MySQL/MariaDB")."""
    from dagster_databus.sources.registry import KINDS

    return {word.lower() for kind in KINDS.values() for word in re.split(r"[/ ]+", kind.label) if word}


def _prose(node: ast.AST, words: re.Pattern[str]) -> list[str]:
    """A string (a docstring, a message) that names a kind or one of its labels in its text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and (match := words.search(node.value)):
        return [f"the text naming {match.group(0)!r}"]
    return []


def _named(node: ast.AST, kinds: list[str]) -> list[str]:
    def holds(name: str) -> bool:
        return any(kind in name.lower() for kind in kinds)

    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip().lower() in kinds:
        return [f"the string {node.value!r}"]
    names: list[str] = []
    if isinstance(node, ast.Name):
        names = [node.id]
    elif isinstance(node, ast.Attribute):
        names = [node.attr]
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names = [node.name]
    elif isinstance(node, ast.arg):
        names = [node.arg]
    elif isinstance(node, ast.alias):
        names = [node.name, node.asname or ""]
    elif isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    return [f"the name {name!r}" for name in names if name and holds(name)]


def example_config(folder: Path) -> dict[str, Any]:
    """A config document with one source of every kind the config accepts (``EXAMPLES``), in ``folder``."""
    import sqlite3

    with sqlite3.connect(folder / "shop.db") as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total REAL)")
    return {"lake": str(folder / "lake"), "merge": {"engine": "local"}, "sources": [
        {"name": f"{kind}_src", "kind": kind, "tables": [{"name": "orders", "primary_key": ["id"]}],
         **EXAMPLES.get(kind, {})} for kind in kind_names()]}


def registration_problems() -> list[str]:
    """What is missing or wrong for some kind on some layer, each naming the kind and the layer."""
    from dagster_databus.config import parse_config
    from dagster_databus.sources.base import Alerting, Failover, Retaining, Uninstallable
    from dagster_databus.sources.registry import KINDS

    accepted = kind_names()
    problems = [f"{kind}: the config accepts it but sources/registry.py has no entry (KINDS)"
                for kind in accepted if kind not in KINDS]
    problems += [f"{kind}: tests/support/kinds.py has no EXAMPLES entry (a minimal source of the kind)"
                 for kind in accepted if kind not in EXAMPLES]
    problems += [f"{name}: registered, but the config's kind union (config/sources.py) has no model for it"
                 for name in KINDS if name not in accepted]
    if problems:
        return problems
    with tempfile.TemporaryDirectory() as folder:
        document = example_config(Path(folder))
        config = parse_config(document, base=Path(folder))
        for source in config.sources:
            kind = KINDS[source.kind]
            try:
                kind.open(source)  # refused unless the adapter implements sources.base.Source
                for capability in (Failover, Retaining, Alerting, Uninstallable):
                    kind.supports(capability)
                dialect = kind.filter_dialect()
            except Exception as exc:  # a module or attribute the entry names is missing, or not what it should be
                problems.append(f"{source.kind}: its registry entry names code that does not load: {exc!r}")
                continue
            if "{name}" not in kind.installs or not kind.label or not kind.positions or not dialect.functions:
                problems.append(f"{source.kind}: its registry entry lacks a description, a label, its positions' "
                                "unit or its filter functions")
        if problems:
            return problems
        problems += _dagster_problems(config, Path(folder), document)
        problems += _cli_problems(Path(folder), document)
    return problems


def _dagster_problems(config: Any, folder: Path, document: dict[str, Any]) -> list[str]:
    """The definitions of a config holding every kind build, with each source's graph, jobs and schedule, the
    capture asset described as its kind's registration says, and an alert sensor exactly where the kind alerts."""
    import dagster as dg

    from dagster_databus.defs.factory import build_definitions
    from dagster_databus.defs.resources import DatabusResource
    from dagster_databus.sources.base import Alerting
    from dagster_databus.sources.registry import source_kind

    path = folder / "databus.json"
    path.write_text(json.dumps(document))
    try:
        defs = build_definitions(config, DatabusResource.for_file(path))
        repository = defs.get_repository_def()
    except Exception as exc:
        return [f"the Dagster definitions of a config with every kind do not load: {exc!r}"]
    problems = []
    for source in config.sources:
        kind = source_kind(source.kind)
        spec = repository.asset_graph.get(dg.AssetKey([source.name, "capture"]))
        if spec.description != kind.installs.format(name=source.name):
            problems.append(f"{source.kind}: the capture asset's description is not its registration's")
        for job in (f"{source.name}_sync", f"{source.name}_bootstrap", f"{source.name}_refresh"):
            if not repository.has_job(job):
                problems.append(f"{source.kind}: no job {job}")
        sensor = f"{source.name}_alerts"
        if repository.has_sensor_def(sensor) != kind.supports(Alerting):
            problems.append(f"{source.kind}: an alert sensor where the kind does not alert, or none where it does")
    return problems


def _cli_problems(folder: Path, document: dict[str, Any]) -> list[str]:
    """``databus validate`` names every source with its kind and a problem (no server answers) and its fix;
    ``databus status`` lists every source."""
    from dagster_databus.cli import main

    path = folder / "databus.json"
    path.write_text(json.dumps(document))
    problems = []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        validated = main(["validate", "--config", str(path)])
        listed = main(["status", "--config", str(path)])
    lines = (out.getvalue() + err.getvalue()).splitlines()
    if validated != 2 or listed != 0:
        problems.append(f"validate exited {validated} (2 expected: servers down), status {listed}")
    for source in document["sources"]:
        name, kind = source["name"], source["kind"]
        told = [line for line in lines if line.startswith(f"{name}: ")]
        if kind != "sqlite" and not any("Fix:" in line for line in told):
            problems.append(f"{kind}: validate names no problem with its fix for source {name} (no server runs)")
        if not any(re.match(rf"{re.escape(name)}\s", line) for line in lines):
            problems.append(f"{kind}: status has no row for source {name}")
    return problems


def main() -> int:
    found = [f"names a kind: {where}" for where in names_outside()] + registration_problems()
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
