"""``col IN (SELECT ...)`` as a semi-join.

In a top-level AND of WHERE, ``x IN (SELECT y ...)`` keeps a row exactly when some y equals
x: an inner join of the row with the *distinct* values of y on x = y (δ makes each row
match at most once; a NULL x or y matches nothing, and a row for which IN is NULL is
dropped by WHERE like one for which it is false). The subquery is planned on its own, so a
correlated one (naming the outer query's columns) is refused. NOT IN, EXISTS and scalar
subqueries are refused before planning (``refusals.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.distinct import Distinct
from partialflow.operators.join import Join
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.binding import Scope
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, select_columns, visible_only


def is_semi_join(node: exp.Expression) -> bool:
    """Whether ``node`` is ``column IN (SELECT ...)`` in a top-level AND of a WHERE."""
    if not isinstance(node, exp.In) or node.args.get("query") is None:
        return False
    if not isinstance(node.this, exp.Column):
        return False
    up = node.parent
    while isinstance(up, (exp.And, exp.Paren)):
        up = up.parent
    return isinstance(up, exp.Where)


def semi_join(
    node: PlanNode,
    scope: Scope,
    conj: exp.Expression,
    plan_query: Callable[[exp.Expression], ViewPlan],
) -> PlanNode:
    """``node`` restricted to rows whose ``conj.this`` is among the subquery's values."""
    query = conj.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    shown = f"IN ({inner.sql()})"
    try:
        sub = plan_query(inner)
    except (InvalidArgument, NotFound) as err:
        raise type(err)(
            f"{shown}: {err} (the subquery is planned on its own: correlated subqueries, "
            "naming the outer query's columns, are not supported)"
        ) from None
    if len(sub.columns) != 1:
        n = len(sub.columns)
        raise InvalidArgument(f"{shown}: the subquery must select one column, not {n}")
    values = visible_only(sub)
    right = op_node(Distinct(values.columns), values)
    x = scope.find(conj.this)
    cols = node.columns + right.columns
    join = Join(cols, (x,), (0,), "inner", left_width=len(node.columns))
    joined = PlanNode(cols, join, [node, right])
    return select_columns(joined, list(range(len(node.columns))), node.columns)
