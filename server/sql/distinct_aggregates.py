"""Aggregates over DISTINCT (``COUNT(DISTINCT v)``, ``SUM(DISTINCT v)``, ...) as a
distinct-then-aggregate plan: project the grouping columns and the one DISTINCT argument,
keep each (group, value) once (δ), then aggregate as usual. Exact with the existing
operators, since δ keeps a count per row and retracts a value with its last copy.

That plan has one argument per group, so every aggregate of the SELECT must be over it:
COUNT/SUM/AVG with DISTINCT, MIN/MAX with or without (they ignore duplicates anyway).
COUNT(*) or an aggregate over another column would see the deduplicated rows instead of all
of them, so such a mix is refused.
"""

from __future__ import annotations

from sqlglot import exp

from partialflow.operators.distinct import Distinct
from partialflow.operators.project import Project
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import compile_expr
from partialflow.server.sql.plan import PlanNode, op_node

# One aggregate call: its function name and its bound argument (None for COUNT(*)).
Call = tuple[str, exp.Expression | None]


def distinct_input(
    node: PlanNode,
    groups: list[exp.Expression],
    calls: list[Call],
    distinct: set[int],
    shown: list[str],
) -> PlanNode:
    """δ(π[groups, argument](node)); ``shown`` are the calls as the user wrote them."""
    arg = calls[min(distinct)][1]
    assert arg is not None
    for i, (func, a) in enumerate(calls):
        if a != arg or (i not in distinct and func not in ("MIN", "MAX")):
            raise InvalidArgument(
                f"{shown[i]} cannot be computed beside {shown[min(distinct)]}: aggregates with "
                "DISTINCT are supported when every aggregate of the SELECT is over that one "
                "DISTINCT argument (MIN/MAX may omit DISTINCT); define a view per aggregate "
                "and join them instead"
            )
    names = tuple(f"g{i}" for i in range(len(groups))) + ("a0",)
    projected = op_node(Project(names, [compile_expr(e) for e in [*groups, arg]]), node)
    return op_node(Distinct(names), projected)
