"""``x NOT IN (SELECT y ...)`` with SQL's NULL rules, as an anti-join plus two counts.

``x NOT IN (y1, ..., yn)`` is ``x <> y1 AND ... AND x <> yn``: TRUE for every row when
the subquery has no rows (even a NULL x); otherwise NULL — so the row is dropped — as soon
as x is NULL or one y is NULL without a match, and FALSE on a match. So a row is kept
exactly when

    total = 0  OR  (total = non_null AND x IS NOT NULL AND no y equals x)

with ``total`` the subquery's row count and ``non_null`` its count of non-NULL values.
The match is a left join (⟕) with the distinct values (δ), as for NOT EXISTS; the two
counts are uncorrelated scalar subqueries (``scalars.py``: global aggregates joined on a
constant), and the condition is a σ. Like IN, the subquery must not name the outer query.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.filter import Filter
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.binding import SYNTHETIC, Scope, _bind, compile_expr
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, select_columns
from partialflow.server.sql.scalars import join_scalars
from partialflow.server.sql.subqueries import Relation, clip, in_where_and, join_distinct


def is_not_in(node: exp.Expression) -> bool:
    """Whether ``node`` is ``column NOT IN (SELECT ...)`` in a top-level AND of a WHERE."""
    if not isinstance(node, exp.Not) or not isinstance(node.this, exp.In):
        return False
    inn = node.this
    if inn.args.get("query") is None or not isinstance(inn.this, exp.Column):
        return False
    return in_where_and(node)


def not_in_join(
    node: PlanNode,
    scope: Scope,
    conj: exp.Not,
    relation: Relation,
    plan_query: Callable[[exp.Expression], ViewPlan],
) -> PlanNode:
    """``node`` restricted by ``conj``, a NOT IN conjunct of its WHERE."""
    inn = conj.this
    query = inn.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    shown = clip(f"NOT IN ({inner.sql()})")
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
        raise InvalidArgument(f"{shown}: the subquery must be a SELECT of one column")
    item = inner.expressions[0]
    value = item.this if isinstance(item, exp.Alias) else item
    named = inner.copy()
    named.set("expressions", [exp.alias_(value.copy(), "_niv")])
    try:
        sub = plan_query(named)
    except (InvalidArgument, NotFound) as err:
        raise type(err)(
            f"{shown}: {err} (the subquery is planned on its own: correlated subqueries, "
            "naming the outer query's columns, are not supported)"
        ) from None
    width = len(node.columns)
    joined = join_distinct(node, (scope.find(inn.this),), sub, "left")
    n = sum(1 for q, _ in scope.cols if q == SYNTHETIC)
    match = f"_nim{n}"
    wide = Scope(scope.cols + [(SYNTHETIC, match)])

    def count(arg: exp.Expression) -> exp.Subquery:
        derived = exp.Subquery(this=named.copy(), alias=exp.TableAlias(this=exp.to_identifier(
            "_nis")))
        sel = exp.Select(expressions=[exp.Count(this=arg)]).from_(derived)
        return exp.Subquery(this=sel)

    total = count(exp.Star())
    non_null = count(exp.column("_niv", table="_nis"))
    unmatched = exp.Is(this=exp.column(match, table=SYNTHETIC), expression=exp.Null())
    present = exp.Not(this=exp.Is(this=inn.this.copy(), expression=exp.Null()))
    zero = exp.Literal.number(0)
    keep = exp.Or(
        this=exp.EQ(this=total, expression=zero),
        expression=exp.Paren(this=exp.and_(
            exp.EQ(this=total.copy(), expression=non_null), present, unmatched)),
    )
    (pred,), wider, wide = join_scalars([keep], joined, wide, relation, plan_query)
    kept = op_node(Filter(wider.columns, compile_expr(_bind(pred, wide))), wider)
    return select_columns(kept, list(range(width)), node.columns)
