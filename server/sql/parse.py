"""Parse SQL with sqlglot and turn its errors into messages in the user's terms.

sqlglot's messages name its own classes and tokens ("Required keyword: 'this' missing
for <class 'sqlglot.expressions.query.Where'>", "<Token token_type: TokenType.SENTINEL
...>"); a user asking what is wrong with a statement needs the clause, the word and the
position instead.
"""

from __future__ import annotations

import re
from typing import Any, cast

import sqlglot
import sqlglot.errors
from sqlglot import exp

from partialflow.server.errors import InvalidArgument

# Statements the server knows, for "unknown statement" hints.
STATEMENTS = ("SELECT", "WITH", "CREATE", "DROP", "INSERT", "EXPLAIN", "VALUES", "(")

# sqlglot expression class -> how a user would name it in a message.
_CLAUSES = {
    "Where": "WHERE needs a condition",
    "Having": "HAVING needs a condition",
    "Group": "GROUP BY needs at least one column",
    "Order": "ORDER BY needs at least one column",
    "Limit": "LIMIT needs a number",
    "Join": "JOIN needs a table",
    "From": "FROM needs a table",
    "Alias": "AS needs a name",
    "EQ": "'=' needs a value on both sides",
    "NEQ": "'<>' needs a value on both sides",
    "GT": "'>' needs a value on both sides",
    "GTE": "'>=' needs a value on both sides",
    "LT": "'<' needs a value on both sides",
    "LTE": "'<=' needs a value on both sides",
    "And": "AND needs a condition on both sides",
    "Or": "OR needs a condition on both sides",
    "Not": "NOT needs a condition",
    "Add": "'+' needs a value on both sides",
    "Sub": "'-' needs a value on both sides",
    "Mul": "'*' needs a value on both sides",
    "Div": "'/' needs a value on both sides",
    "In": "IN needs a list of values",
    "Between": "BETWEEN needs two bounds",
    "Cast": "CAST needs a value and a type",
    "Case": "CASE needs WHEN ... THEN",
}
_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")
_EXPECTED_GOT = re.compile(
    r"Expected (.+?) but got <Token token_type: TokenType\.(\w+), text: (.*?), line"
)
_EXPECTING = re.compile(r"Expecting (.+)")


def _describe(description: str, highlight: str | None) -> str:
    """One sqlglot error description in the user's terms."""
    if m := _MISSING.search(description):
        name = m.group(1)
        return _CLAUSES.get(name, f"incomplete {name.upper()} expression")
    if m := _EXPECTED_GOT.search(description):
        wanted, kind, text = m.groups()
        got = "the end of the statement" if kind == "SENTINEL" else repr(text)
        return f"expected {wanted}, got {got}"
    if m := _EXPECTING.match(description):
        return f"expected {m.group(1).strip()!r}"
    if description.startswith("Invalid expression / Unexpected token"):
        return f"unexpected {highlight!r}" if highlight else "unexpected text"
    # Other parser messages are already plain; keep only their first line.
    return description.splitlines()[0]


def _where(first: dict[str, Any]) -> str:
    line, col = first.get("line"), first.get("col")
    return f" at line {line}, column {col}" if line and col else ""


def _first_word(sql: str) -> str:
    words = sql.strip().split(None, 1)
    return words[0].upper() if words else ""


def parse_error(
    err: sqlglot.errors.SqlglotError, sql: str, what: str = "malformed SQL"
) -> InvalidArgument:
    """An InvalidArgument for a parse failure of ``sql``: the problem, where, near what."""
    word = _first_word(sql)
    if word and not word.startswith(STATEMENTS):
        return InvalidArgument(
            f"{what}: unknown statement {word.split('(')[0]!r}; expected "
            "SELECT, CREATE, DROP, INSERT or EXPLAIN"
        )
    if isinstance(err, sqlglot.errors.ParseError):
        first = err.errors[0] if err.errors else {}
        highlight = first.get("highlight") or None
        problem = _describe(str(first.get("description") or err), highlight)
        near = f" near {highlight!r}" if highlight and highlight not in problem else ""
        return InvalidArgument(f"{what}: {problem}{_where(first)}{near}")
    if isinstance(err, sqlglot.errors.TokenError):
        # The tokenizer gives up on an unclosed quote or comment; its message repeats
        # the whole text read so far.
        quotes = {q: sql.count(q) % 2 for q in ("'", '"', "`")}
        open_quote = next((q for q, odd in quotes.items() if odd), None)
        hint = f" (an unclosed {open_quote})" if open_quote else ""
        return InvalidArgument(f"{what}: cannot read the statement{hint}")
    return InvalidArgument(f"{what}: {str(err).splitlines()[0]}")


def parse_tree(sql: str) -> exp.Expression:
    """``sqlglot.parse_one``, typed as the ``Expression`` it returns: recent sqlglot annotates
    its ``Expr`` base class, which lacks ``Expression``'s tree API in the stubs."""
    return cast(exp.Expression, sqlglot.parse_one(sql))


def parse_statements(sql: str, dialect: str | None = None) -> list[exp.Expression]:
    """Every statement in ``sql``; malformed SQL raises InvalidArgument in plain words."""
    try:
        trees = sqlglot.parse(sql, dialect=dialect)
        return [cast(exp.Expression, s) for s in trees if s is not None]
    except sqlglot.errors.SqlglotError as err:
        raise parse_error(err, sql) from None


def parse_query(sql: str, what: str = "malformed SQL") -> exp.Expression:
    """One query (a view's SELECT); malformed SQL raises InvalidArgument."""
    word = _first_word(sql)
    if word and not word.startswith(("SELECT", "WITH", "(", "VALUES")):
        raise InvalidArgument(f"{what}: a query starts with SELECT, got {word.split('(')[0]!r}")
    try:
        return parse_tree(sql)
    except sqlglot.errors.SqlglotError as err:
        raise parse_error(err, sql, what) from None
