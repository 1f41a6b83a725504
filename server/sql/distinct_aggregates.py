"""Aggregates over DISTINCT (``COUNT(DISTINCT v)``, ``SUM(DISTINCT v)``, ...) as a
distinct-then-aggregate plan: project the grouping columns and the one DISTINCT argument,
keep each (group, value) once (δ), then aggregate as usual. Exact with the existing
operators, since δ keeps a count per row and retracts a value with its last copy.

That plan has one argument per group, so it serves when every aggregate of the SELECT is
over it: COUNT/SUM/AVG with DISTINCT, MIN/MAX with or without (they ignore duplicates).

Beside other aggregates (``COUNT(DISTINCT v), COUNT(*), AVG(w)``) the plan has two levels
instead (``two_levels``): γ1 groups by (groups, v) and computes the other aggregates'
parts per (group, v) — COUNT(*), COUNT(w), SUM(w), MIN(w), MAX(w), AVG as SUM and COUNT —
then γ2 groups by the groups: the DISTINCT aggregates over v, each (group, v) once; the
others by combining the parts (COUNT = SUM of counts, AVG = SUM of sums / SUM of counts,
MIN of minima, ...). Exact, with the existing operators. Two different DISTINCT arguments
are still refused.
"""

from __future__ import annotations

from sqlglot import exp

from partialflow.operators.aggregate import Aggregate, AggSpec
from partialflow.operators.distinct import Distinct
from partialflow.operators.project import Project
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import col, compile_expr
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


def mixed(calls: list[Call], distinct: set[int]) -> bool:
    """Whether an aggregate beside the DISTINCT one is over anything else (two levels)."""
    arg = calls[min(distinct)][1]
    return any(a != arg or (i not in distinct and f not in ("MIN", "MAX"))
               for i, (f, a) in enumerate(calls))


def two_levels(
    node: PlanNode,
    groups: list[exp.Expression],
    calls: list[Call],
    distinct: set[int],
    shown: list[str],
    candidates: int,
) -> PlanNode:
    """Groups then one value per call, as one γ over ``node`` would give (see the module
    docstring)."""
    arg = calls[min(distinct)][1]
    assert arg is not None
    n = len(groups)
    over_v = {i for i, (f, a) in enumerate(calls)
              if i in distinct or (a == arg and f in ("MIN", "MAX"))}
    for i in distinct:
        if calls[i][1] != arg:
            raise InvalidArgument(
                f"{shown[i]} cannot be computed beside {shown[min(distinct)]}: aggregates with "
                "DISTINCT over two different arguments are not supported; define a view per "
                "DISTINCT argument and join them instead"
            )
    others = [i for i in range(len(calls)) if i not in over_v]
    inputs = [*groups, arg] + [a for i in others if (a := calls[i][1]) is not None]
    names = tuple(f"g{i}" for i in range(n)) + ("v",) + tuple(
        f"a{j}" for j in range(len(inputs) - n - 1))
    pre = op_node(Project(names, [compile_expr(e) for e in inputs]), node)
    # Level 1: per (group, v), the parts of the other aggregates.
    parts: list[AggSpec] = []
    where: dict[int, list[int]] = {}  # call -> its parts' positions in level 1's output
    j = n + 1
    for i in others:
        f = calls[i][0]
        c = None if calls[i][1] is None else j
        j += calls[i][1] is not None
        specs = [AggSpec("SUM", c), AggSpec("COUNT", c)] if f == "AVG" else [AggSpec(f, c)]
        where[i] = list(range(n + 1 + len(parts), n + 1 + len(parts) + len(specs)))
        parts += specs
    l1_names = names[: n + 1] + tuple(f"p{k}" for k in range(len(parts)))
    level1 = op_node(Aggregate(l1_names, tuple(range(n + 1)), parts, candidates=candidates),
                     pre)
    # Level 2: per group, DISTINCT aggregates over v and the parts combined.
    combine = {"COUNT_STAR": "SUM", "COUNT": "SUM", "SUM": "SUM", "MIN": "MIN", "MAX": "MAX"}
    finals: list[AggSpec] = []
    at: dict[int, list[int]] = {}
    for i, (f, _) in enumerate(calls):
        if i in over_v:
            specs = [AggSpec(f, n)]
        elif f == "AVG":
            specs = [AggSpec("SUM", p) for p in where[i]]
        else:
            specs = [AggSpec(combine[f], where[i][0])]
        at[i] = list(range(n + len(finals), n + len(finals) + len(specs)))
        finals += specs
    l2_names = names[:n] + tuple(f"q{k}" for k in range(len(finals)))
    level2 = op_node(Aggregate(l2_names, tuple(range(n)), finals, candidates=candidates),
                     level1)
    out: list[exp.Expression] = [col(g) for g in range(n)]
    for i, (f, _) in enumerate(calls):
        if i in over_v:
            out.append(col(at[i][0]))
        elif f == "AVG":
            out.append(exp.Div(this=col(at[i][0]), expression=col(at[i][1])))
        elif f in ("COUNT", "COUNT_STAR"):  # a sum of counts over no rows is NULL, COUNT 0
            out.append(exp.Coalesce(this=col(at[i][0]), expressions=[exp.Literal.number(0)]))
        else:
            out.append(col(at[i][0]))
    out_names = names[:n] + tuple(f"{f.lower()}{i}" for i, (f, _) in enumerate(calls))
    return op_node(Project(out_names, [compile_expr(e) for e in out]), level2)
