"""MySQL / MariaDB DDL from the binlog: which tables a statement changes, and names compared as the server does.

A query event holds a statement as the client sent it, comments, quoting and all. It is read with sqlglot's MySQL
tokenizer (comments dropped, backquoted names unquoted, strings kept whole), then by the grammar of the statements
that change a table without row events: ``ALTER TABLE`` (with ``ONLINE``/``IGNORE``, ``IF EXISTS``, and the tables
its ``RENAME TO`` and ``EXCHANGE PARTITION ... WITH TABLE`` name), ``RENAME TABLE`` (each pair, ``IF EXISTS``),
``DROP TABLE`` (each table), ``TRUNCATE``, and ``CREATE TABLE`` (``OR REPLACE``, ``IF NOT EXISTS``). A
temporary table's statements name no captured table: a session's temporary table shadows, never changes, the
table of its name.

``lower_case_table_names`` (1 or 2) makes the server compare database and table names without case, so a binlog
names ``shop.orders`` what the config calls ``Shop.Orders``: ``ServerNames`` compares them the server's way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlglot import Token, TokenType
from sqlglot.dialects.mysql import MySQL

QualifiedName = tuple[str | None, str]  # (database, as the statement gives it; table)

_PUNCTUATION = {TokenType.COMMA, TokenType.DOT, TokenType.L_PAREN, TokenType.R_PAREN, TokenType.SEMICOLON,
                TokenType.STRING, TokenType.NUMBER}
_VERBS = {"ALTER", "RENAME", "DROP", "TRUNCATE", "CREATE"}


@dataclass(frozen=True, slots=True)
class TableDdl:
    """A statement that changes tables: its verb and every table it names (renamed from or to, dropped, ...)."""

    verb: str
    tables: tuple[QualifiedName, ...]


@dataclass(frozen=True, slots=True)
class ServerNames:
    """Database and table names compared as a server with ``lower_case_table_names`` compares them."""

    lower_case_table_names: int = 0

    def key(self, name: str) -> str:
        return name.lower() if self.lower_case_table_names else name

    def same(self, a: str, b: str) -> bool:
        return self.key(a) == self.key(b)

    def index(self, names: Iterable[str]) -> Mapping[str, str]:
        """The server's form of each name → the name as given (the config's)."""
        return {self.key(n): n for n in names}


def table_ddl(query: str) -> TableDdl | None:
    """The tables ``query`` changes, or None when it is no table DDL (or names only a temporary table)."""
    tokens = _tokens(query)
    if not tokens or tokens[0].text.upper() not in _VERBS:
        return None
    verb, words = tokens[0].text.upper(), _Words(tokens[1:])
    if verb == "ALTER":
        words.skip("ONLINE", "OFFLINE", "IGNORE")
        if not words.take("TABLE"):
            return None
        words.skip_sequence("IF", "EXISTS")
        tables = [words.name()]
        while not words.done():
            if words.take("RENAME") and not words.peek("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
                words.skip("TO", "AS")
                tables.append(words.name())
            elif words.take("WITH") and words.take("TABLE"):  # EXCHANGE PARTITION p WITH TABLE other
                tables.append(words.name())
            else:
                words.next()
    elif verb == "RENAME":
        if not (words.take("TABLE") or words.take("TABLES")):
            return None
        words.skip_sequence("IF", "EXISTS")
        tables = []
        while not words.done():
            tables.append(words.name())
            words.skip_until("TO")
            tables.append(words.name())
            words.skip_until(",")
    elif verb == "DROP":
        if words.take("TEMPORARY") or not (words.take("TABLE") or words.take("TABLES")):
            return None
        words.skip_sequence("IF", "EXISTS")
        tables = [words.name()]
        while words.take(","):
            tables.append(words.name())
    elif verb == "TRUNCATE":
        words.skip("TABLE")
        tables = [words.name()]
    else:
        words.skip_sequence("OR", "REPLACE")
        if words.take("TEMPORARY") or not words.take("TABLE"):
            return None
        words.skip_sequence("IF", "NOT", "EXISTS")
        tables = [words.name()]
    found = tuple(t for t in tables if t is not None)
    return TableDdl(verb, found) if found else None


def _tokens(query: str) -> list[Token]:
    """The statement's tokens. sqlglot hands the rest of a statement it does not parse (``RENAME ...``) over as one
    string token after the verb: that rest is read again."""
    try:
        tokens = MySQL().tokenize(query)
    except Exception:  # not SQL sqlglot can read: no statement this module knows
        return []
    if len(tokens) == 2 and tokens[1].token_type == TokenType.STRING and tokens[1].text.strip() != "":
        rest = query[query.upper().find(tokens[0].text.upper()) + len(tokens[0].text):]
        if rest.strip().upper().startswith(tokens[1].text.split()[0].upper()):
            return [tokens[0], *_tokens_of(rest)]
    return tokens


def _tokens_of(text: str) -> list[Token]:
    try:
        return MySQL().tokenize(text)
    except Exception:
        return []


class _Words:
    """A cursor over tokens, keywords compared without case."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens, self.at = tokens, 0

    def done(self) -> bool:
        return self.at >= len(self.tokens)

    def next(self) -> None:
        self.at += 1

    def peek(self, *words: str) -> bool:
        return not self.done() and self.tokens[self.at].text.upper() in words

    def take(self, word: str) -> bool:
        if self.peek(word) and (word != "," or self.tokens[self.at].token_type == TokenType.COMMA):
            self.at += 1
            return True
        return False

    def skip(self, *words: str) -> None:
        while self.peek(*words):
            self.at += 1

    def skip_sequence(self, *words: str) -> None:
        end = self.at + len(words)
        if [t.text.upper() for t in self.tokens[self.at:end]] == list(words):
            self.at = end

    def skip_until(self, word: str) -> None:
        while not self.done() and not self.take(word):
            self.at += 1

    def name(self) -> QualifiedName | None:
        """``name`` or ``database.name`` (each part quoted or not)."""
        first = self._part()
        if first is None:
            return None
        if not self.done() and self.tokens[self.at].token_type == TokenType.DOT:
            self.at += 1
            second = self._part()
            return (first, second) if second is not None else None
        return None, first

    def _part(self) -> str | None:
        if self.done() or self.tokens[self.at].token_type in _PUNCTUATION:
            return None
        self.at += 1
        return self.tokens[self.at - 1].text
