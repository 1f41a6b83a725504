"""Malformed SQL is refused in the user's terms: the problem, the position, no parser
internals. Pure parsing: no server, no JVM."""

from __future__ import annotations

import pytest

from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.parse import parse_query, parse_statements

CASES = [
    ("CREATE VIEW v AS SELEC a FROM t", "", "starts with SELECT, got 'SELEC'"),
    ("CREATE VIEW v AS SELECT a FROM t WHERE", "", "WHERE needs a condition at line 1"),
    ("SELECT a FROM t WHERE a = = 1", "", "'=' needs a value on both sides at line 1, column 27"),
    ("CREATE TABLE t (a BIGINT", "", "expected ')' at line 1"),
    ("SELEC 1", "", "unknown statement 'SELEC'"),
    ("CREATE VEIW v AS SELECT 1", "", "CREATE must be followed by TABLE or VIEW, got 'VEIW'"),
    ("DROP VIEW", "", "got the end of the statement"),
    ("SELECT 'abc FROM t", "", "an unclosed '"),
    ("SELECT a FROM t WHERE b = 1)", "", "unexpected ')'"),
]
INTERNALS = ("sqlglot", "<class", "Token", "SENTINEL", "Required keyword")


@pytest.mark.parametrize("sql, _, expected", CASES, ids=[c[0] for c in CASES])
def test_statement_errors_name_the_problem(sql, _, expected):
    from partialflow.server.statements import parse  # the engine's entry point

    with pytest.raises(InvalidArgument) as info:
        parse(sql)
    message = str(info.value)
    assert expected in message, message
    assert not any(word in message for word in INTERNALS), message


def test_snapshot_query_errors_never_escape_as_internal_errors():
    # The tokenizer's error (unclosed quote) is not a ParseError; it used to escape
    # storage's query() as an unexpected exception (INTERNAL).
    with pytest.raises(InvalidArgument, match="unclosed"):
        parse_statements("SELECT 'x FROM t", dialect="spark")


def test_view_query_errors_say_where():
    with pytest.raises(InvalidArgument, match="view's query: unexpected"):
        parse_query("SELECT a FROM t WHERE b = ?)", "malformed SQL in the view's query")
