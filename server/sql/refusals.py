"""Constructs no view can have, refused before planning, by name and position.

Planning a statement that holds such a construct would fail later on a symptom instead
(an aggregate in a scalar subquery reads as "column X must appear in GROUP BY"). So the
whole tree is searched first and the construct that comes first in the text is named,
with its line and column in ``sql``, the text the tree was parsed from.

sqlglot records positions only on leaves (identifiers, literals, function names); a
construct is located by its keyword token next to the leaves it contains.
"""

from __future__ import annotations

from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import WHY_WINDOW
from partialflow.server.sql.scalars import allowed_place, is_scalar
from partialflow.server.sql.subqueries import clip


def refuse_constructs(tree: exp.Expr, sql: str) -> None:
    """Raise InvalidArgument naming the first unsupported construct in ``tree``."""
    found: list[tuple[int, str]] = []
    tokens: list[Token] | None = None
    for walked in tree.walk():
        node = cast(exp.Expression, walked)
        what = _unsupported(node)
        if what is None:
            continue
        if tokens is None:
            try:
                tokens = sqlglot.tokenize(sql)
            except sqlglot.errors.SqlglotError:
                tokens = []
        found.append((_offset(node, tokens), what))
    if not found:
        return
    offset, what = min(found, key=lambda f: (f[0] < 0, f[0]))
    raise InvalidArgument(what + _position(sql, offset))


def _unsupported(node: exp.Expression) -> str | None:
    is_sub = isinstance(node, exp.Exists) or is_scalar(node) or (
        isinstance(node, exp.In) and node.args.get("query") is not None)
    if is_sub and not allowed_place(node):
        word = "EXISTS " if isinstance(node, exp.Exists) else "IN " if isinstance(
            node, exp.In) else "scalar subquery "
        shown = _shown(node.args["query"] if isinstance(node, exp.In) else node.this
                       if isinstance(node, exp.Exists) else node)
        return (
            f"subqueries in expressions are not supported in this clause: {word}{shown} "
            "(only in WHERE, the SELECT list and HAVING)"
        )
    if isinstance(node, exp.Window):
        return f"window functions are not supported: {_shown(node)} {WHY_WINDOW}"
    return None


def _shown(node: exp.Expression) -> str:
    text = node.sql()
    if isinstance(node, exp.Query) and not text.startswith("("):
        text = f"({text})"
    return clip(text)


def _leaf_offsets(node: exp.Expression) -> list[tuple[int, int]]:
    return [(n.meta["start"], n.meta["end"]) for n in node.walk() if "start" in n.meta]


def _offset(node: exp.Expression, tokens: list[Token]) -> int:
    """Where ``node``'s keyword starts in the text (-1 if unknown)."""
    leaves = _leaf_offsets(node)
    if not leaves:
        return -1
    first = min(s for s, _ in leaves)
    if isinstance(node, exp.Window):
        return first
    # A subquery: its SELECT, or the IN / EXISTS that introduces it.
    keywords: dict[type, TokenType] = {exp.Exists: TokenType.EXISTS, exp.In: TokenType.IN}
    kind = keywords.get(type(node), TokenType.SELECT)
    if isinstance(node, exp.In):
        first = min(s for s, _ in _leaf_offsets(node.args["query"]))
    starts = [t.start for t in tokens if t.start < first and t.token_type == kind]
    return starts[-1] if starts else first


def _position(sql: str, offset: int) -> str:
    if offset < 0:
        return ""
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return f" (at line {line}, column {col})"
