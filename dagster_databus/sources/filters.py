"""Refresh filters (``databus snapshot --where``, the refresh job's ``where``): parsed, checked and rendered.

A filter comes from whoever can reach the CLI or the Dagster UI, and ends up in a query run with the source's
credentials, so it is never pasted into SQL. It is parsed with sqlglot in the source's dialect (a
``FilterDialect``, which each kind's package defines), every node of the tree is checked against an allow-list,
and the condition that runs is rendered back from that tree by this module:

- columns of the table being read, quoted by the project's own quoting (never the user's quotes);
- string literals as bound parameters (never as text, so no escape rules or server mode can change them);
- numbers, NULL, TRUE/FALSE; comparison, arithmetic, AND/OR/NOT, IN lists of literals, BETWEEN, LIKE
  [ESCAPE], IS [NOT] NULL and CASE, each operator in parentheses, so the database groups what was checked;
- calls of an allow-list of cheap scalar functions per dialect (``FilterDialect.functions``), with their arities;
- where the dialect has them: ILIKE, null-safe equality (IS [NOT] DISTINCT FROM, <=>, IS), || and DIV.

Anything else is refused with a ``ConfigError`` on ``snapshot.where`` naming what and why: subqueries, other
tables, comments, ';', UNION, other functions, parameters and variables, identifiers that are not the table's
columns, empty filters; where the dialect allows them, also casts (::), E'...', U&'...' and $$...$$ strings. Where
the driver formats parameters with Python's % (``placeholder`` %s), the rendered text holds no '%' but its ``%s``
placeholders. docs/operations.md ("Refresh filters") lists the same for users.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import KeyRange
from dagster_databus.sources.keys import key_clause

MAX_LENGTH = 20_000  # characters of filter text
MAX_DEPTH = 64  # nesting of the parsed tree
MAX_NODES = 5_000  # nodes of the parsed tree (an IN list of a few thousand literals fits)


@dataclass(frozen=True, eq=False)
class FilterDialect:
    """What a kind's SQL lets a refresh filter hold and how the rendered condition is written: each kind's own,
    in its package (``sources/<kind>/dialect.py``); this module knows no kind."""

    label: str  # what messages call the dialect (its kind's label)
    sqlglot: type[Dialect]  # the dialect sqlglot parses the filter's text in
    # Cheap scalar functions a filter may call: name -> (fewest, most) arguments. Date and time functions only
    # with an argument (a call of none is a value of the clock, not of the row).
    functions: Mapping[str, tuple[int, int]]
    # How a string literal's bound parameter is marked: "?", "%s" (the driver fills parameters in with Python's %
    # formatting, so no other '%' may reach the text), or ":name" (:w0, :w1, ... in order).
    placeholder: Literal["?", "%s", ":name"]
    operator_functions: frozenset[str] = frozenset()  # functions the database calls for an operator (LIKE's like)
    booleans: bool = True  # TRUE and FALSE are literals
    modulo: Literal["%", "mod"] = "mod"  # a % b as an operator, or as mod(a, b)
    integer_division: bool = False  # a DIV b
    concatenation: bool = True  # a || b joins text
    null_safe_equal: Literal["IS", "IS DISTINCT FROM", "<=>"] | None = None  # how <=> is written, where it is
    ilike: bool = False  # ILIKE, case-insensitive LIKE
    double_quotes_are_text: bool = False  # "..." is text (or a column under a server mode): refused as ambiguous
    # String literal tokens with escape rules of their own, refused by token before parsing (what each is).
    refused_strings: Mapping[TokenType, str] = field(default_factory=dict)
    text_holds_nul: bool = True  # a literal may hold a NUL character
    casts: tuple[str, str] | None = None  # (what a cast is called, the fix): casts refused with words of their own
    # Calls rendered as function_schema.name(...), the built-in whatever the search path holds; grammar_functions
    # are the parser's own nodes (no function of that name exists there), rendered unqualified.
    function_schema: str | None = None
    grammar_functions: frozenset[str] = frozenset()

    @property
    def percent_format(self) -> bool:
        return self.placeholder == "%s"


_PLAIN_LITERAL = "write text as a plain 'quoted' literal: '' for a quote inside it, and a backslash is itself"
_FLATTER = "write a flatter condition: IN (...) for many values of one column"
_MARK = "\x00"  # around a string literal's number in the text being rendered (no rendered part holds it)
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
}
_ARITHMETIC: dict[type[exp.Expression], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
# What some refused nodes are, in the words of the refusal.
_REFUSED: list[tuple[tuple[type[exp.Expression], ...], str]] = [
    ((exp.Select, exp.Subquery, exp.Exists), "a subquery (SELECT ...): a filter reads only the table's own row"),
    ((exp.Union, exp.Intersect, exp.Except), "UNION/INTERSECT/EXCEPT: a filter is one condition, not a query"),
    ((exp.Attach, exp.Detach), "ATTACH/DETACH: a filter reads only the table being refreshed"),
    ((exp.Pragma,), "PRAGMA: a filter is a condition, not a statement"),
    ((exp.Command, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Alter),
     "a statement (or a call the parser reads as one): a filter is one condition"),
    ((exp.PropertyEQ,), "an assignment (:=)"),
    ((exp.Placeholder, exp.Parameter, exp.SessionParameter),
     "a parameter or variable: a filter holds its values as literals"),
    ((exp.HexString, exp.BitString, exp.National, exp.ByteString, exp.UnicodeString, exp.Introducer),
     "a hex, bit, escape or national string literal: write text as a plain 'quoted' literal"),
    ((exp.Cast, exp.TryCast), "CAST: compare with a literal of the column's kind, or use an allowed function"),
    ((exp.Collate,), "COLLATE"),
    ((exp.Tuple,), "a row value (a, b)"),
    ((exp.Star,), "*"),
    ((exp.Dot,), "a qualified name or call (schema.function)"),
    ((exp.Window,), "a window function"),
    ((exp.Interval,), "INTERVAL"),
    ((exp.RegexpLike, exp.RegexpILike, exp.SimilarTo),
     "a regular-expression match (~, ~*, REGEXP, SIMILAR TO), whose cost depends on the pattern: use LIKE"),
]


@dataclass(frozen=True)
class Filter:
    """A refresh filter as it runs: ``sql`` rendered from the checked tree, with its string literals as
    ``params`` (marked as its dialect's ``placeholder`` says, in order).
    Run ``sql`` with parameters (a sequence, even an empty one) where they are ``%s``: its text holds no other
    '%', so the driver's formatting leaves it as it is."""

    text: str  # what the user typed
    dialect: FilterDialect
    sql: str
    params: tuple[Any, ...]
    functions: frozenset[str]  # the functions the filter may call (an authorizer may allow only these)

    @property
    def binds(self) -> dict[str, Any]:
        """The named binds for ``sql`` (``placeholder`` :name)."""
        return {f"w{i}": value for i, value in enumerate(self.params)}


def check_filter(text: str, dialect: FilterDialect, table: str, columns: Mapping[str, str]) -> Filter:
    """``text`` checked and rendered for ``dialect``; ``columns`` maps each column of ``table`` a filter may name
    to its quoted SQL (matched case-insensitively). Raises ``ConfigError`` on ``snapshot.where`` naming what
    is refused, why, and what to write instead."""
    renderer = _Renderer(text, dialect, table, columns)
    return Filter(text, dialect, renderer.render(), tuple(renderer.params),
                  frozenset(dialect.functions) | dialect.operator_functions)


def filter_for(where: str | None, dialect: FilterDialect, table: str, columns: Mapping[str, str]
               ) -> Filter | None:
    """``check_filter`` of a selection's ``where``; None when it has none."""
    return None if where is None else check_filter(where, dialect, table, columns)


def select_clause(cols: str, marks: str, keys: KeyRange, where: Filter | None) -> tuple[str, list[Any]]:
    """``keys.key_clause`` for ``keys`` and a checked filter: "WHERE ... " (or "") and all its parameters in
    order (the key bounds', then the filter's literals)."""
    clause, params = key_clause(cols, marks, keys, where.sql if where is not None else None)
    return clause, [*params, *(where.params if where is not None else ())]


def allowed_summary(dialect: FilterDialect) -> str:
    """The functions ``dialect`` allows, for a refusal's fix."""
    return ", ".join(sorted(dialect.functions))


@cache
def _plain(base: type[Dialect]) -> Dialect:
    """The dialect with every function call parsed as a plain call (name and arguments, as typed): no call is
    rewritten into another function's node, so the allow-list sees and renders exactly what was written."""

    # The parser's base is chosen at run time, so it is made as a class statement would make it (its
    # metaclass builds the parser's tables from these).
    empty: dict[str, Any] = {"FUNCTIONS": {}, "FUNCTION_PARSERS": {}, "NO_PAREN_FUNCTIONS": {}}
    parser = types.new_class("Parser", (base.parser_class,), exec_body=lambda namespace: namespace.update(empty))
    plain = type(f"DatabusFilter{base.__name__}", (base,), {"Parser": parser})
    made: Dialect = plain()
    return made


class _Renderer:
    """One filter's check and rendering (``check_filter``)."""

    def __init__(self, text: str, dialect: FilterDialect, table: str, columns: Mapping[str, str]) -> None:
        self.text, self.dialect, self.table = text, dialect, table
        lowered: dict[str, list[str]] = {}
        for name, quoted in columns.items():
            lowered.setdefault(name.lower(), []).append(quoted)
        self.columns = lowered
        self.names = list(columns)
        self.functions = dialect.functions
        self.literals: list[str] = []  # string literals by their mark's number
        self.params: list[str] = []  # the same in the order their placeholders appear in the rendered text

    # -- refusals ----------------------------------------------------------------------

    def refuse(self, problem: str, fix: str | None = None) -> ConfigError:
        what = self.dialect.label
        general = (f"write one condition on the columns of {self.table!r} ({', '.join(self.names)}) with literals, "
                   "comparisons, arithmetic, AND/OR/NOT, IN (literals), BETWEEN, LIKE, IS [NOT] NULL, CASE and "
                   f"the functions {what} filters allow ({allowed_summary(self.dialect)}); docs/operations.md, "
                   "\"Refresh filters\"")
        return ConfigError("snapshot.where", f"the refresh filter {self.text!r} cannot select rows of "
                           f"{self.table!r}: it {problem}", f"{fix}; {general}" if fix else general)

    # -- parsing -----------------------------------------------------------------------

    def render(self) -> str:
        text = self.text
        if not text.strip():
            raise self.refuse("is empty: an empty filter would read every row instead of the ones meant",
                              "give a condition, or leave the filter out to read every row of the key range")
        if len(text) > MAX_LENGTH:
            raise self.refuse(f"is {len(text):,} characters long (at most {MAX_LENGTH:,})",
                              "select the rows with a shorter condition, or with a key range")
        dialect = _plain(self.dialect.sqlglot)
        try:
            tokens = dialect.tokenize(text)
        except TokenError:
            raise self.refuse(f"cannot be read as {self.dialect.label} SQL: {self._open_quote(text)}",
                              "close every quote") from None
        self._check_tokens(text, tokens)
        try:
            trees = dialect.parser().parse(tokens, text)
        except ParseError as exc:
            first = exc.errors[0] if exc.errors else {}
            where = f" (at column {first['col']})" if "col" in first else ""
            raise self.refuse(f"is not a condition {self.dialect.label} SQL parses: "
                              f"{first.get('description', 'syntax error')}{where}", "correct the syntax") from None
        except RecursionError:
            raise self.refuse(f"nests deeper than {MAX_DEPTH} levels", _FLATTER) from None
        if len(trees) != 1 or trees[0] is None:
            raise self.refuse("is not one condition", "give one condition")
        tree = trees[0]
        if not isinstance(tree, exp.Expression):
            raise self.refuse(f"uses {type(tree).__name__}, which a refresh filter may not hold")
        nodes = sum(1 for _ in tree.walk())
        if nodes > MAX_NODES:
            raise self.refuse(f"has {nodes:,} parts (at most {MAX_NODES:,})", "use a key range for many rows")
        sql = self._placeholders(self.node(tree, 0))
        # What the renderer writes holds no comment, no statement separator and no quote but identifiers'.
        if any(bad in sql for bad in ("--", "/*", "#", ";", "'", _MARK)) or (
                self.dialect.percent_format and "%" in sql.replace("%s", "")):
            raise RuntimeError(f"a refresh filter rendered to {sql!r}, which it must not: a bug in sources.filters")
        return sql

    def _placeholders(self, marked: str) -> str:
        """The rendered text with each literal's mark made the dialect's placeholder, and ``params`` in the order
        of the placeholders (whatever order the renderer met the literals in)."""
        def place(match: re.Match[str]) -> str:
            self.params.append(self.literals[int(match.group(1))])
            mark = self.dialect.placeholder
            return f":w{len(self.params) - 1}" if mark == ":name" else mark

        return re.sub(f"{_MARK}(\\d+){_MARK}", place, marked)

    def _open_quote(self, text: str) -> str:
        quotes = [q for q in "'\"`" if text.count(q) % 2]
        return f"it leaves a {quotes[0]} quote open" if quotes else "it holds text that is not SQL"

    def _check_tokens(self, text: str, tokens: Sequence[Token]) -> None:
        depth = 0
        for token in tokens:
            if token.comments:
                raise self.refuse("holds a comment (--, /* */ or #): a comment can hide part of the condition, "
                                  "and some databases run a comment's text (/*! */)", "remove the comment")
            if token.token_type == TokenType.SEMICOLON:
                raise self.refuse("holds a ';' (one condition, not statements)", "remove the ';' and what follows")
            if token.token_type == TokenType.L_PAREN:
                depth += 1
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth < 0:
                    raise self.refuse("closes a parenthesis it did not open", "balance the parentheses")
            elif (self.dialect.double_quotes_are_text and token.token_type == TokenType.STRING
                  and text[token.start:token.start + 1] == '"'):
                raise self.refuse(f"quotes {token.text!r} in double quotes, which {self.dialect.label} reads as text, "
                                  "or as a column under ANSI_QUOTES", "write text in single quotes ('new') and "
                                  "columns plain or in backticks (`status`)")
            elif token.token_type in self.dialect.refused_strings:
                raise self.refuse(f"uses {self.dialect.refused_strings[token.token_type]}", _PLAIN_LITERAL)
        if not tokens:
            raise self.refuse("is empty", "give a condition")
        if depth:
            raise self.refuse("leaves a parenthesis open", "balance the parentheses")

    # -- rendering ---------------------------------------------------------------------

    def node(self, node: exp.Expression, depth: int) -> str:
        """``node`` rendered, after checking it is allowed with no arguments but the ones rendered."""
        render = self._renderer(node)
        if render is None:
            casts = self.dialect.casts
            cast = casts is not None and isinstance(node, exp.Cast | exp.TryCast)
            raise self.refuse(f"uses {self._describe(node)}", casts[1] if casts is not None and cast else None)
        allowed, draw = render
        self._no_extra(node, allowed, depth)
        return draw(depth + 1)

    def _no_extra(self, node: exp.Expression, allowed: frozenset[str] | set[str], depth: int) -> None:
        """Refuse ``node`` if it carries arguments its rendering would drop (a checked tree renders whole)."""
        if depth > MAX_DEPTH:
            raise self.refuse(f"nests deeper than {MAX_DEPTH} levels", _FLATTER)
        extra = [k for k, v in node.args.items() if k not in allowed and v not in (None, False, [], "")]
        if extra:
            raise self.refuse(f"uses {self._describe(node)} with {', '.join(extra)}")

    def _renderer(self, node: exp.Expression) -> tuple[frozenset[str], Callable[[int], str]] | None:
        n, d = self.node, self.dialect
        two = frozenset({"this", "expression"})
        if isinstance(node, exp.Column):
            return frozenset({"this", "table", "db", "catalog"}), lambda _: self._column(node)
        if isinstance(node, exp.Literal | exp.RawString):
            return frozenset({"this", "is_string"}), lambda _: self._literal(node)
        if isinstance(node, exp.Null):
            return frozenset(), lambda _: "NULL"
        if isinstance(node, exp.Boolean) and d.booleans:
            return frozenset({"this"}), lambda _: "TRUE" if node.this else "FALSE"
        if isinstance(node, exp.Paren):
            return frozenset({"this"}), lambda k: n(node.this, k)  # every operator is in parentheses anyway
        if isinstance(node, exp.Not):
            return frozenset({"this"}), lambda k: f"(NOT {n(node.this, k)})"
        if isinstance(node, exp.Neg):
            return frozenset({"this"}), lambda k: f"(-{n(node.this, k)})"
        if isinstance(node, exp.And | exp.Or):
            word = "AND" if isinstance(node, exp.And) else "OR"
            return two, lambda k: f"({n(node.this, k)} {word} {n(node.expression, k)})"
        symbol = _COMPARISONS.get(type(node)) or _ARITHMETIC.get(type(node))
        if symbol is not None:
            return two | {"typed", "safe"}, lambda k: f"({n(node.this, k)} {symbol} {n(node.expression, k)})"
        if isinstance(node, exp.Mod):
            # A call elsewhere: MOD is the other dialects' spelling, and % is the formatting mark of the drivers
            # whose placeholder is %s.
            return two, lambda k: (f"({n(node.this, k)} % {n(node.expression, k)})" if d.modulo == "%"
                                   else f"{self._function('mod')}({n(node.this, k)}, {n(node.expression, k)})")
        if isinstance(node, exp.IntDiv) and d.integer_division:
            return two, lambda k: f"({n(node.this, k)} DIV {n(node.expression, k)})"
        if isinstance(node, exp.DPipe) and d.concatenation:
            return two | {"safe"}, lambda k: f"({n(node.this, k)} || {n(node.expression, k)})"
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ) and d.null_safe_equal is not None:
            eq = isinstance(node, exp.NullSafeEQ)
            if d.null_safe_equal == "IS DISTINCT FROM":
                return two, lambda k: (f"({n(node.this, k)} IS {'NOT ' if eq else ''}DISTINCT FROM "
                                       f"{n(node.expression, k)})")
            if d.null_safe_equal == "IS":
                return two, lambda k: f"({n(node.this, k)} IS {'' if eq else 'NOT '}{n(node.expression, k)})"
            return two, lambda k: (f"({n(node.this, k)} <=> {n(node.expression, k)})" if eq
                                   else f"(NOT ({n(node.this, k)} <=> {n(node.expression, k)}))")
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null | exp.Boolean):
            return two | {"negate"}, lambda k: (f"({n(node.this, k)} IS {'NOT ' if node.args.get('negate') else ''}"
                                                f"{n(node.expression, k)})")
        if isinstance(node, exp.In):
            return frozenset({"this", "expressions", "query"}), lambda k: self._in(node, k)
        if isinstance(node, exp.Between):
            return frozenset({"this", "low", "high"}), lambda k: (
                f"({n(node.this, k)} BETWEEN {n(node.args['low'], k)} AND {n(node.args['high'], k)})")
        like = exp.Like | exp.ILike if d.ilike else exp.Like
        if isinstance(node, like):
            return two | {"negate"}, lambda k: self._like(node, None, k)
        if isinstance(node, exp.Escape) and isinstance(node.this, like):
            return two, lambda k: self._like(node.this, node.expression, k)
        if isinstance(node, exp.Case):
            return frozenset({"this", "ifs", "default"}), lambda k: self._case(node, k)
        if isinstance(node, exp.Anonymous):
            return frozenset({"this", "expressions"}), lambda k: self._call(node, k)
        return None

    def _column(self, node: exp.Column) -> str:
        if not isinstance(node.this, exp.Identifier):
            raise self.refuse(f"uses {self._describe(node.this)}")
        name = node.name
        qualifier = node.args.get("table")
        if node.args.get("db") is not None or node.args.get("catalog") is not None:
            raise self.refuse(f"names {node.sql()}, a column qualified by a database or schema: a filter names "
                              f"columns of {self.table!r} alone",
                              f"name columns of {self.table!r}: {', '.join(self.names)}")
        if qualifier is not None and qualifier.name.lower() != self.table.lower():
            raise self.refuse(f"names {qualifier.name}.{name}, a column of another table: a filter reads only "
                              f"{self.table!r}", f"name columns of {self.table!r} alone: {', '.join(self.names)}")
        found = self.columns.get(name.lower(), [])
        if len(found) != 1:
            why = "two columns of the table differ only in case" if found else f"no column of {self.table!r} is"
            raise self.refuse(f"names {name!r}, and {why} called that (a filter may name only the table's columns)",
                              f"name a column of {self.table!r}: {', '.join(self.names)}")
        if self.dialect.percent_format and "%" in found[0]:
            raise self.refuse(f"names the column {name!r}, whose name holds a '%', which the {self.dialect.label} "
                              "driver would read as a parameter mark",
                              "select these rows with a key range (--after/--through), or filter on other columns")
        return found[0]

    def _literal(self, node: exp.Literal | exp.RawString) -> str:
        if isinstance(node, exp.Literal) and not node.is_string:
            if not _NUMBER.fullmatch(node.this):
                raise self.refuse(f"uses the number {node.this!r}, which is not a plain decimal number",
                                  "write numbers in decimal, as 12, 1.5 or 2e3")
            return str(node.this)
        value = str(node.this)
        if not self.dialect.text_holds_nul and "\x00" in value:
            raise self.refuse(f"holds a NUL character in a literal, which {self.dialect.label} text cannot hold",
                              "remove the NUL character")
        self.literals.append(value)
        return f"{_MARK}{len(self.literals) - 1}{_MARK}"

    def _like(self, node: exp.Expression, escape: exp.Expression | None, depth: int) -> str:
        self._no_extra(node, {"this", "expression", "negate"}, depth)
        negate = "NOT " if node.args.get("negate") else ""
        word = "ILIKE" if isinstance(node, exp.ILike) else "LIKE"
        tail = f" ESCAPE {self.node(escape, depth)}" if escape is not None else ""
        return f"({self.node(node.this, depth)} {negate}{word} {self.node(node.expression, depth)}{tail})"

    def _in(self, node: exp.In, depth: int) -> str:
        if node.args.get("query") is not None:
            raise self.refuse("uses a subquery (SELECT ...) in IN (...), which may list only literals",
                              "list literal values: status IN ('new', 'paid')")
        items = node.expressions
        if not items:
            raise self.refuse("lists nothing in IN ()", "list at least one value")
        for item in items:
            value = item.this if isinstance(item, exp.Neg) else item
            if not isinstance(value, exp.Literal | exp.RawString | exp.Null):
                raise self.refuse(f"lists {self._describe(item)} in IN (...), which may list only literals",
                                  "list literal values: status IN ('new', 'paid')")
        listed = ", ".join(self.node(item, depth) for item in items)
        return f"({self.node(node.this, depth)} IN ({listed}))"

    def _case(self, node: exp.Case, depth: int) -> str:
        parts = ["CASE"]
        if node.this is not None:
            parts.append(self.node(node.this, depth))
        for branch in node.args.get("ifs") or []:
            if not isinstance(branch, exp.If) or branch.args.get("false") is not None:
                raise self.refuse(f"uses {self._describe(branch)} in CASE")
            parts += ["WHEN", self.node(branch.this, depth), "THEN", self.node(branch.args["true"], depth)]
        if node.args.get("default") is not None:
            parts += ["ELSE", self.node(node.args["default"], depth)]
        return f"({' '.join(parts)} END)"

    def _call(self, node: exp.Anonymous, depth: int) -> str:
        name = str(node.this).lower()
        arity = self.functions.get(name)
        if not isinstance(node.this, str):
            # A quoted name would be rendered as the allow-list's, which is not what the user wrote.
            raise self.refuse(f"calls {node.name}() by a quoted name", f"write {node.name.lower()}() unquoted")
        casts = self.dialect.casts
        if casts is not None and name in ("cast", "try_cast"):  # CAST(x AS t), parsed plain as a call
            raise self.refuse(f"uses {casts[0]}", casts[1])
        if arity is None:
            raise self.refuse(f"calls {node.name}(), which is not a function a {self.dialect.label} filter may call "
                              "(only cheap scalar functions on the row are allowed)",
                              f"use one of {allowed_summary(self.dialect)}")
        args = node.expressions
        if not arity[0] <= len(args) <= arity[1]:
            takes = f"{arity[0]}" if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
            raise self.refuse(f"calls {name}() with {len(args)} argument(s); it takes {takes} here",
                              f"call {name}() with {takes} argument(s)")
        return f"{self._function(name)}({', '.join(self.node(a, depth) for a in args)})"

    def _function(self, name: str) -> str:
        """How an allowed function ``name`` is written in the rendered text."""
        schema = self.dialect.function_schema
        if schema is not None and name not in self.dialect.grammar_functions:
            return f"{schema}.{name}"  # the built-in, whatever the search path holds
        return name.upper()

    def _describe(self, node: exp.Expression) -> str:
        if self.dialect.casts is not None and isinstance(node, exp.Cast | exp.TryCast):
            return self.dialect.casts[0]
        for kinds, words in _REFUSED:
            if isinstance(node, kinds):
                return words
        if isinstance(node, exp.Is):
            return "IS with something other than NULL (write IS NULL, IS NOT NULL, or =)"
        if isinstance(node, exp.Boolean):
            return f"TRUE/FALSE, which {self.dialect.label} SQL has no literal for (write a comparison)"
        sql = node.sql()
        shown = sql if len(sql) <= 40 else sql[:37] + "..."
        return f"{type(node).__name__} ({shown}), which a refresh filter may not hold"
