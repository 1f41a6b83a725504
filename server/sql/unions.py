"""Planning a UNION [ALL] (and handing EXCEPT / INTERSECT to setops.py), with its ORDER BY
and LIMIT: a ``Union`` over the branches' visible columns, a ``Distinct`` for UNION, a
``TopK`` for the LIMIT."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.distinct import Distinct
from partialflow.operators.topk import TopK
from partialflow.operators.union import Union
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import _limit, _output_position
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, visible_only
from partialflow.server.sql.setops import plan_except_intersect

# A branch (a SELECT or a nested set operation) planned as a view without parameters.
PlanBranch = Callable[[exp.Expression], ViewPlan]
PlanQuery = Callable[[exp.Expression], ViewPlan]


def plan_union(u: exp.SetOperation, branch: PlanBranch, query: PlanQuery,
               minmax_candidates: int, topk_slack: int) -> ViewPlan:
    """A UNION [ALL], or an EXCEPT / INTERSECT [ALL] (setops.py), with its ORDER BY and
    LIMIT. ``branch`` plans one branch; ``query`` any query (for setops.py)."""
    branches: list[PlanNode] = []
    names: list[str] | None = None

    def collect(e: exp.Expression, distinct_parent: bool | None) -> None:
        nonlocal names
        if (
            isinstance(e, exp.Union)
            and not e.args.get("order")
            and not e.args.get("limit")
            and bool(e.args.get("distinct")) == distinct_parent
        ):
            collect(e.this, distinct_parent)
            collect(e.expression, distinct_parent)
            return
        if isinstance(e, exp.Subquery):
            e = e.this
        sub = branch(e)
        if sub.limit is not None or sub.key:
            raise InvalidArgument("a UNION branch cannot have parameters or LIMIT; put "
                                  "them on a view over the union")
        if names is not None and len(sub.columns) != len(names):
            raise InvalidArgument(
                f"UNION branches have different numbers of columns ({len(names)} and "
                f"{len(sub.columns)})"
            )
        names = names or sub.columns
        branches.append(visible_only(sub))

    if isinstance(u, exp.Union):
        distinct = bool(u.args.get("distinct"))
        collect(u.this, distinct)
        collect(u.expression, distinct)
        assert names is not None
        root = PlanNode(tuple(names), Union(tuple(names), len(branches)), branches)
        if distinct:
            root = op_node(Distinct(root.columns), root)
    else:
        root = plan_except_intersect(u, query, minmax_candidates)
        names = list(root.columns)
    order = []
    order_by = u.args.get("order")
    for o in order_by.expressions if order_by else []:
        pos = _output_position(o.this, [exp.column(n) for n in names], names)
        if pos is None:
            raise InvalidArgument(
                f"ORDER BY of a {u.key.upper()} must name an output column, got "
                f"{o.this.sql()!r}"
            )
        order.append((pos, bool(o.args.get("desc"))))
    limit = _limit(u)
    if limit is not None:
        if not order:
            raise InvalidArgument(
                "LIMIT needs an ORDER BY (top-k is kept per key in that order)"
            )
        topk = TopK(root.columns, (), order, limit, candidates=limit + topk_slack)
        root = op_node(topk, root)
    return ViewPlan(root, list(names), tuple(range(len(names))), (), order, limit, None)
