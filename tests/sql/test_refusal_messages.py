"""Every refusal the SQL planner can still give names the construct and says why (or what
to write instead). Pure planning over a small catalog: no server, no JVM.

``CASES`` lists each remaining refusal with a statement that triggers it; the test also
reads every ``raise InvalidArgument(...)`` in server/sql and fails when one of them is hit
by no case, so a new refusal comes with its case here (and its wording is checked).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.planner import Planner

CATALOG = {"t": ("k", "v"), "u": ("k", "w", "s")}
SQL_DIR = Path(__file__).resolve().parents[2] / "server" / "sql"

# (statement, the construct it must name, why / what instead it must say)
CASES = [
    ("SELECT a.k FROM t a RIGHT JOIN u b ON a.k = b.k", "RIGHT JOIN", "use INNER or LEFT JOIN"),
    ("SELECT a.k FROM t a JOIN u b USING (k)", "USING", "write ON"),
    ("SELECT a.k FROM t a LEFT JOIN u b ON a.k > b.k", "LEFT JOIN", "NULL padding"),
    ("SELECT k, ROW_NUMBER() OVER (ORDER BY v) AS r FROM t", "window function",
     "other rows"),
    ("WITH x AS (SELECT k FROM t) SELECT k FROM x", "WITH", "define"),
    ("SELECT k, v FROM t ORDER BY v LIMIT 3 OFFSET 2", "OFFSET", "top"),
    ("SELECT k, v FROM t LIMIT 3", "LIMIT", "ORDER BY"),
    ("SELECT k, v FROM t ORDER BY v LIMIT -1", "LIMIT", "positive integer"),
    ("SELECT k, v FROM t WHERE k > ?", "parameter", "`column = ?`"),
    ("SELECT k FROM t WHERE k = ? UNION SELECT k FROM u", "parameters", "outermost SELECT"),
    ("SELECT k, v FROM t WHERE k = ? AND k = ?", "compared with ? twice", "once"),
    ("SELECT k, v FROM t GROUP BY k", "must appear in GROUP BY", "aggregate function"),
    ("SELECT k FROM t GROUP BY 3", "GROUP BY position 3", "out of range"),
    ("SELECT k FROM t ORDER BY 3", "ORDER BY position 3", "out of range"),
    ("SELECT k FROM t WHERE COUNT(*) > 1", "aggregate 'COUNT(*)'", "HAVING"),
    ("SELECT k FROM t WHERE v > (SELECT MAX(w) + RAND() FROM u)", "RAND()", "unsupported"),
    ("SELECT k, COUNT(DISTINCT v), COUNT(DISTINCT k) FROM t GROUP BY k",
     "DISTINCT over two different arguments", "a view per DISTINCT argument"),
    ("SELECT k, COUNT(DISTINCT v, k) FROM t GROUP BY k", "COUNT(DISTINCT ...)",
     "one argument"),
    ("SELECT k FROM t EXCEPT SELECT k, w FROM u", "EXCEPT", "different numbers"),
    ("SELECT k FROM t WHERE v IN (SELECT k, w FROM u)", "IN (SELECT", "one column"),
    ("SELECT k FROM t WHERE v NOT IN (SELECT k, w FROM u)", "IN (SELECT", "one column"),
    ("SELECT k FROM t WHERE (k, v) IN (SELECT k FROM u)", "several columns", "EXISTS"),
    ("SELECT k FROM t WHERE v > (SELECT k, w FROM u)", "scalar subquery", "one column"),
    ("SELECT k FROM t WHERE v IN (SELECT w FROM u WHERE u.k = t.k LIMIT 2)", "LIMIT",
     "order the view cannot keep"),
    ("SELECT k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k OR u.w IS NULL)",
     "names the outer query", "NULL outer value"),
    ("SELECT k FROM t WHERE v > (SELECT MAX(w) + t.v FROM u)",
     "names the outer query's 't.v' outside its WHERE", "only WHERE conditions"),
    ("SELECT k FROM t GROUP BY k HAVING COUNT(*) > (SELECT COUNT(*) FROM u WHERE u.w = t.v)",
     "not a GROUP BY column", "grouping columns only"),
    ("SELECT COUNT(*) AS n, (SELECT MAX(w) FROM u) AS m FROM t", "without GROUP BY",
     "compute the aggregate in a view"),
    ("SELECT k, COUNT(*) AS n FROM t GROUP BY k HAVING COUNT(*) > (SELECT w FROM u)",
     "may return more than one row", "MAX(...)"),
    ("SELECT k FROM t GROUP BY k ORDER BY (SELECT MAX(w) FROM u) LIMIT 2", "scalar subquery",
     "only in WHERE, the SELECT list and HAVING"),
    ("SELECT 1 AS one", "without FROM", "query()"),
    ("INSERT INTO t VALUES (1, 2)", "a query starts with SELECT", "INSERT"),
    ("SELEC k FROM t", "malformed SQL", "SELEC"),
    ("SELECT nope FROM t", "unknown column 'nope'", "columns are"),
    ("SELECT a.k FROM t a LEFT JOIN u b", "JOIN needs an ON condition", "equality"),
    ("SELECT k FROM (VALUES (1)) AS x(k)", "FROM item", "a table, a view or a subquery"),
    ("SELECT DISTINCT k FROM t ORDER BY v LIMIT 2", "ORDER BY with DISTINCT",
     "no one value"),
    ("(SELECT k FROM t ORDER BY k LIMIT 2) UNION SELECT k FROM u", "UNION branch",
     "a view over the union"),
    ("SELECT k FROM t EXCEPT (SELECT k FROM u ORDER BY k LIMIT 1)", "EXCEPT branch",
     "a view over it"),
    ("SELECT k FROM t UNION SELECT k, w FROM u", "UNION branches", "different numbers"),
    ("SELECT k FROM t UNION SELECT k FROM u ORDER BY v LIMIT 2", "ORDER BY of a UNION",
     "output column"),
    ("SELECT k FROM db.t", "qualified table names", "name the table alone"),
    ("SELECT k FROM pv", "view 'pv' has parameters", "a view without parameters"),
    ("SELECT k FROM gv", "view 'gv' has a scalar subquery that may return more than one row",
     "over the tables instead"),
    ("SELECT k FROM t, u", "ambiguous", "qualify it"),
]
# First attempts whose refusals the planner catches, trying markers.py's general plan.
FALLBACKS = {"scalars.py", "subqueries.py", "not_in.py"}
# Raises that are not refusals of a construct: passing another error on, or guards of
# shapes the steps before them already refuse (kept as a second line of defence).
NOT_REFUSALS = {
    "a view needs a FROM clause",  # FROM-less views are planned over a one-row relation
    "the subquery must be a SELECT",  # sqlglot parses a subquery as a SELECT or a set op
    "the subquery needs a FROM clause",  # a FROM-less subquery is given one first
    "a view must be a SELECT",  # parse_query refuses other statements first
    "subqueries in expressions are not supported",  # refusals.py names them first
    "a parameter (?) is only allowed",  # the WHERE scan refuses misplaced parameters first
    "a parameter must appear",  # the same, for a top-level AND
    "the subquery must be a SELECT of one column",  # NOT IN: markers refuses it first
    # Mixed DISTINCT aggregates are planned in two levels before this check is reached.
    "aggregates with DISTINCT are supported when",
    "must be computed from aggregates and constants",  # an inner column fails binding first
}


def _plan(sql: str) -> str:
    plan = Planner(CATALOG.get, lambda _v: None).plan
    views = {"pv": plan("SELECT k, v FROM t WHERE k = ?"),
             "gv": plan("SELECT k, (SELECT w FROM u WHERE u.k = t.k) AS w FROM t")}
    with pytest.raises((InvalidArgument, NotFound)) as err:
        Planner(CATALOG.get, views.get).plan(sql)
    return str(err.value)


@pytest.mark.parametrize("sql,construct,why", CASES, ids=[c[0][:60] for c in CASES])
def test_refusal_names_the_construct_and_why(sql, construct, why):
    message = _plan(sql)
    assert construct in message, message
    assert why in message, message


def _templates() -> dict[str, str]:
    """The text of each ``raise InvalidArgument(...)`` in server/sql (interpolations as
    NUL), by where it is; the files whose refusals the planner catches to try markers.py
    instead are left out."""
    out = {}
    for path in sorted(SQL_DIR.glob("*.py")):
        # oracle.py rewrites an accepted view's SQL for one key (the verifier's and the
        # tests' oracle): its errors are about a key's arity, not refusals of a view.
        if path.name in FALLBACKS or path.name == "oracle.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            if not (isinstance(func, ast.Name) and func.id == "InvalidArgument"):
                continue
            out[f"{path.name}:{node.lineno}"] = _text(node.exc.args[0]) if node.exc.args else ""
    return out


def _text(arg: ast.expr) -> str:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(_text(v) if isinstance(v, ast.Constant) else "\0" for v in arg.values)
    if isinstance(arg, ast.BinOp):
        return _text(arg.left) + _text(arg.right)
    return "\0"


def test_every_refusal_in_the_planner_has_a_case_here():
    messages = [_plan(sql) for sql, _, _ in CASES]
    missing = []
    for where, text in _templates().items():
        if any(n in text for n in NOT_REFUSALS):
            continue
        pieces = [p for p in text.split("\0") if len(p.strip()) >= 8]
        if not any(all(p in m for p in pieces) for m in messages):
            missing.append(f"{where}: {text!r}")
    assert not missing, "refusals without a case in CASES:\n" + "\n".join(missing)
