"""A folder's marker, set by the folder's own conftest.py: the tree says what each test costs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def folder_marks(conftest: str, *marks: str, refuse: tuple[str, ...] = ()) -> Callable[[list[pytest.Item]], None]:
    """A ``pytest_collection_modifyitems`` hook for the folder of ``conftest`` (its ``__file__``) that adds ``marks``
    to each test under it, and fails the collection of one that carries a marker of ``refuse`` (set from its
    fixtures and parameters by tests/conftest.py, whose hook runs first): a test that needs more than its folder
    promises belongs in another folder. It runs before the ``-m`` selection, so ``-m`` sees the folder's marker."""
    folder = Path(conftest).resolve().parent

    def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
        wrong = []
        for item in items:
            if folder not in Path(str(item.path)).parents:
                continue
            for mark in marks:
                item.add_marker(mark)
            needs = sorted({m.name for m in item.iter_markers()} & set(refuse))
            if needs:
                wrong.append(f"{item.nodeid} needs {', '.join(needs)}")
        if wrong:
            raise pytest.UsageError(f"tests under {folder} must not need {', '.join(refuse)}; move them: "
                                    + "; ".join(wrong))

    return pytest_collection_modifyitems
