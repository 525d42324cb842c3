"""The kind check reads prose too: a comment, a docstring or a message outside a kind's own places that names a kind
or one of its labels is found (``tests.kinds.names_outside``), as a kind's name in code is."""

from __future__ import annotations

from pathlib import Path

from tests.support.kinds import kind_words, names_outside


def test_a_kind_named_in_a_comment_a_docstring_or_a_message_is_found(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "planted.py").write_text('"""Read as MariaDB does."""\n\nx = 1  # as PostgreSQL does\n'
                                                  'y = f"{x} rows, as SQLite counts them"\n')
    assert names_outside(tmp_path) == ["core/planted.py:1: the text naming 'MariaDB'",
                                       "core/planted.py:4: the text naming 'SQLite'",
                                       "core/planted.py:3: the comment naming 'PostgreSQL'"]


def test_a_kind_named_in_its_own_places_is_not_found(tmp_path: Path) -> None:
    (tmp_path / "sources" / "mysql").mkdir(parents=True)
    (tmp_path / "sources" / "mysql" / "planted.py").write_text("# MySQL's own\n")
    assert names_outside(tmp_path) == []


def test_the_labels_words_name_their_kinds() -> None:
    assert {"mariadb", "postgresql", "sqlite", "oracle", "mysql"} <= kind_words()
