"""Scalar subqueries in WHERE and in the SELECT list, as a left join with an aggregate.

A scalar subquery here computes one aggregate call, so it has at most one row per outer
row:

* correlated by equalities, ``(SELECT AGG(e) FROM r WHERE r.y = outer.x AND p)`` is the
  value of the grouped view ``SELECT r.y, AGG(e) FROM r WHERE p GROUP BY r.y`` at
  ``y = x``: a left join of the outer rows with it (an outer row without a group gets
  NULL, the aggregate of no rows; COUNT gets 0 instead, through COALESCE);
* uncorrelated, ``(SELECT AGG(e) FROM r WHERE p)`` is a global aggregate, always one row,
  joined to every outer row on a constant (π adds the same literal to both sides). Every
  outer row then sits under that one join key: a change of the value re-filters all of
  them, which is what the SQL asks for.

The joined value becomes a hidden column of the relation (qualifier ``SYNTHETIC``, not
expanded by ``*``), and the subquery in the expression is replaced by a reference to it,
so the rest of planning sees a plain column. The decorrelated pieces are ordinary
operators (γ, ⟕, π), each with its usual partial state and Spark plan; ``explain`` shows
them. Any other form (an expression over aggregates, correlation by other comparisons)
goes to ``markers.py`` (``join_scalars``' fallback), which refuses what it cannot plan
naming the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.join import Join
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.binding import _AGG_FUNCS, SYNTHETIC, Scope
from partialflow.server.sql.plan import (
    PlanNode,
    ViewPlan,
    cross_join,
    select_columns,
    visible_only,
)
from partialflow.server.sql.subqueries import Relation, clip, split_correlation, where_of

# Plans a subquery this module does not: (subquery, node, scope) -> (node, scope, value).
Fallback = Callable[[exp.Expression, PlanNode, Scope], tuple[PlanNode, Scope, exp.Expression]]


def is_scalar(node: exp.Expression) -> bool:
    """Whether ``node`` is a subquery used as a value (not in FROM, IN or EXISTS)."""
    if not isinstance(node, exp.Subquery) or node.parent is None:
        return False
    if isinstance(node.parent, exp.In):  # a value of an IN list, not IN's own subquery
        return node.arg_key == "expressions"
    return not isinstance(node.parent, (exp.From, exp.Join, exp.SetOperation, exp.Exists))


def allowed_place(node: exp.Expression) -> bool:
    """Whether a subquery sits in its SELECT's WHERE, SELECT list or HAVING (where it is
    planned as a join), not in GROUP BY, ORDER BY or a join condition."""
    child: exp.Expr = node
    up = node.parent
    while up is not None and not isinstance(up, exp.Select):
        child, up = up, up.parent
    return up is not None and child.arg_key in ("where", "expressions", "having")


def join_scalars(
    exprs: list[exp.Expression],
    node: PlanNode,
    scope: Scope,
    relation: Relation,
    plan_query: Callable[[exp.Expression], ViewPlan],
    fallback: Fallback | None = None,
) -> tuple[list[exp.Expression], PlanNode, Scope]:
    """``exprs`` with their scalar subqueries replaced by columns of ``node`` joined in;
    a subquery of another form than this module's goes to ``fallback`` (markers.py), if
    given."""
    out = []
    joined: dict[str, exp.Expression] = {}  # one join per distinct subquery text
    for e in exprs:
        if not any(is_scalar(n) for n in e.find_all(exp.Subquery)):
            out.append(e)
            continue
        # A copy under a parenthesis, so that an item that is itself a subquery still has
        # a parent (is_scalar looks at it).
        holder = exp.Paren(this=e.copy())
        # Only this level's subqueries: nested ones are planned with their own SELECT.
        tops = [n for n in holder.find_all(exp.Subquery)
                if is_scalar(n) and n.find_ancestor(exp.Select) is None]
        for sq in tops:
            text = sq.sql()
            if text not in joined:
                try:
                    node, scope, joined[text] = _join_one(sq, node, scope, relation, plan_query)
                except InvalidArgument:
                    if fallback is None:
                        raise
                    node, scope, joined[text] = fallback(sq, node, scope)
            sq.replace(joined[text].copy())
        out.append(holder.this)
    return out, node, scope


def _join_one(
    sq: exp.Subquery,
    node: PlanNode,
    scope: Scope,
    relation: Relation,
    plan_query: Callable[[exp.Expression], ViewPlan],
) -> tuple[PlanNode, Scope, exp.Expression]:
    sub = sq.this
    shown = "scalar subquery " + clip(f"({sub.sql()})")
    if not isinstance(sub, exp.Select):
        raise InvalidArgument(f"{shown}: the subquery must be a SELECT")
    for arg, what in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"),
                      ("offset", "OFFSET"), ("distinct", "DISTINCT")):
        if sub.args.get(arg) is not None:
            raise InvalidArgument(f"{shown}: {what} in a scalar subquery is not supported")
    items = sub.expressions
    first = items[0] if len(items) == 1 else None
    call = first.this if isinstance(first, exp.Alias) else first
    if not isinstance(call, tuple(_AGG_FUNCS)) or not isinstance(call, exp.Expression):
        raise InvalidArgument(
            f"{shown}: a scalar subquery must select one aggregate call (COUNT, SUM, AVG, MIN "
            "or MAX), so that it has one value per outer row"
        )
    links, rest = split_correlation(sub, scope, relation, shown)
    inner = sub.copy()
    inner.set("expressions", [c.copy() for _, c in links] + [call.copy()])
    inner.set("where", where_of(rest))
    inner.set("order", None)
    if links:
        inner.set("group", exp.Group(expressions=[c.copy() for _, c in links]))
    try:
        plan = plan_query(inner)
    except (InvalidArgument, NotFound) as err:
        raise type(err)(f"{shown}: {err}") from None
    right = visible_only(plan)
    width = len(node.columns)
    n = sum(1 for q, _ in scope.cols if q == SYNTHETIC)
    name = f"_sq{n}"
    if links:
        xs = tuple(scope.find(o) for o, _ in links)
        ys = tuple(range(len(links)))
        cols = node.columns + right.columns
        joined = PlanNode(cols, Join(cols, xs, ys, "left", left_width=width), [node, right])
        value = width + len(links)
    else:  # one row: joined to every outer row, a cross product with a one-row side
        joined = cross_join(node, right, "left")
        value = width
    node = select_columns(joined, list(range(width)) + [value], node.columns + (name,))
    scope = Scope(scope.cols + [(SYNTHETIC, name)])
    ref: exp.Expression = exp.column(name, table=SYNTHETIC)
    if isinstance(call, exp.Count):  # COUNT of no rows is 0, not the left join's NULL
        ref = exp.Coalesce(this=ref, expressions=[exp.Literal.number(0)])
    return node, scope, ref
