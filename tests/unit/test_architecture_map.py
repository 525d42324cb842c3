"""docs/architecture.md's module map names every package and module of ``dagster_databus`` and nothing else:
a module added, moved or removed fails here with the lines to add to or remove from the map. Pure: reads files.

The map is the fenced block opened by ```` ```module-map ````: one entry a line, its first word the path
relative to ``dagster_databus/`` (a package ends in ``/`` and stands for its ``__init__.py``), then what it is
for; an indented line continues the entry above it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
PACKAGE = ROOT / "dagster_databus"
DOC = ROOT / "docs" / "architecture.md"
FENCE = "```module-map"


def named_in_map(text: str) -> list[str]:
    """The paths the map's entries name, in the order written (empty: the doc has no map)."""
    lines = text.splitlines()
    if FENCE not in (line.strip() for line in lines):
        return []
    start = [line.strip() for line in lines].index(FENCE) + 1
    paths = []
    for line in lines[start:]:
        if line.strip() == "```":
            break
        if line.strip() and not line[0].isspace():
            paths.append(line.split()[0])
    return paths


def in_tree(package: Path) -> set[str]:
    """Every package (``path/``) and module (``path.py``) under ``package``, relative to it; the package itself
    and ``__init__.py`` files are their packages' entries."""
    found = set()
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package)
        if path.name == "__init__.py":
            if rel.parent != Path("."):
                found.add(rel.parent.as_posix() + "/")
        else:
            found.add(rel.as_posix())
    return found


def mismatch(named: list[str], tree: set[str]) -> str | None:
    """What the map must change to match the tree, as the lines to act on; None when it matches."""
    problems = []
    missing = sorted(tree - set(named))
    extra = sorted(set(named) - tree)
    twice = sorted(p for p, n in Counter(named).items() if n > 1)
    if missing:
        problems.append("add to the map (one line each: path, then what it is for):\n"
                        + "\n".join(f"    {p}" for p in missing))
    if extra:
        problems.append("remove from the map (no such package or module under dagster_databus/):\n"
                        + "\n".join(f"    {p}" for p in extra))
    if twice:
        problems.append("named more than once in the map:\n" + "\n".join(f"    {p}" for p in twice))
    if not problems:
        return None
    return f"docs/architecture.md's {FENCE} block does not match dagster_databus/:\n" + "\n".join(problems)


def test_the_module_map_names_every_package_and_module_and_nothing_else() -> None:
    named = named_in_map(DOC.read_text(encoding="utf-8"))
    assert named, f"docs/architecture.md has no {FENCE} block"
    problem = mismatch(named, in_tree(PACKAGE))
    assert problem is None, problem


def test_a_module_missing_from_the_map_or_a_stale_entry_is_named(tmp_path: Path) -> None:
    # The check can fail: a tree with a module the map lacks, and a map naming a module the tree lacks.
    package = tmp_path / "pkg"
    (package / "engines").mkdir(parents=True)
    for name in ("__init__.py", "errors.py", "engines/__init__.py", "engines/local.py"):
        (package / name).write_text('"""x"""\n')
    doc = f"# A\n\n{FENCE}\nerrors.py        typed errors\nengines/         the engines\n" \
          "   continued\nengines/gone.py  moved away\nerrors.py  again\n```\n\nengines/local.py after the block\n"
    assert in_tree(package) == {"errors.py", "engines/", "engines/local.py"}
    problem = mismatch(named_in_map(doc), in_tree(package))
    assert problem is not None
    assert "add to the map" in problem and "    engines/local.py" in problem
    assert "remove from the map" in problem and "    engines/gone.py" in problem
    assert "more than once" in problem and "    errors.py" in problem
    assert mismatch(["errors.py", "engines/", "engines/local.py"], in_tree(package)) is None
