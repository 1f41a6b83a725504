"""EXCEPT and INTERSECT, with and without ALL, from operators that exist already.

Each row's count on either side decides how often it is in the result:

    INTERSECT       once if a > 0 and b > 0      EXCEPT       once if a > 0 and b = 0
    INTERSECT ALL   min(a, b) times              EXCEPT ALL   max(a - b, 0) times

(``a``: occurrences of the row in the left input, ``b``: in the right.) So both sides are
tagged (π adds ``1, 0`` to a left row and ``0, 1`` to a right one), unioned (⋃) and counted
per distinct row by a γ grouped on every column with SUM of each tag. The distinct forms
are a σ over the counts; the ALL forms compute the multiplicity with a π and turn it into
rows with ρ (``operators/replicate.py``). Grouping treats NULLs as equal, as SQL's set
operations do. Every piece keeps its usual partial state and Spark plan, so a view over
this one can be keyed on any of its columns (the key traces through γ's group columns
down both branches).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.aggregate import Aggregate, AggSpec
from partialflow.operators.filter import Filter
from partialflow.operators.project import Project
from partialflow.operators.replicate import Replicate
from partialflow.operators.union import Union
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import col, compile_expr
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, select_columns, visible_only

Branch = Callable[[exp.Expression], ViewPlan]


def word_of(node: exp.SetOperation) -> str:
    word = type(node).__name__.upper()
    return word if node.args.get("distinct") else f"{word} ALL"


def plan_except_intersect(
    node: exp.SetOperation, branch: Branch, minmax_candidates: int | None
) -> PlanNode:
    """The rows of an EXCEPT or INTERSECT [ALL] of the two planned branches (ORDER BY and
    LIMIT of the whole are the caller's)."""
    word = word_of(node)
    sides = []
    names: list[str] | None = None
    for side in (node.this, node.expression):
        e = side.this if isinstance(side, exp.Subquery) else side
        sub = branch(e)
        if sub.limit is not None or sub.key:
            raise InvalidArgument(f"an {word} branch cannot have parameters or LIMIT; put "
                                  "them on a view over it")
        if names is not None and len(sub.columns) != len(names):
            raise InvalidArgument(
                f"{word} branches have different numbers of columns ({len(names)} and "
                f"{len(sub.columns)})"
            )
        names = names or list(sub.columns)
        sides.append(visible_only(sub))
    assert names is not None
    n = len(names)
    tags = ("_left", "_right")
    tagged = []
    for i, side in enumerate(sides):
        cols = tuple(names) + tags
        ones = [exp.Literal.number(1 if j == i else 0) for j in range(2)]
        exprs = [compile_expr(col(c)) for c in range(n)] + [compile_expr(x) for x in ones]
        tagged.append(op_node(Project(cols, exprs), side))
    cols = tuple(names) + tags
    both = PlanNode(cols, Union(cols, 2), tagged)
    counts = ("_a", "_b")
    agg = Aggregate(
        tuple(names) + counts,
        tuple(range(n)),
        [AggSpec("SUM", n), AggSpec("SUM", n + 1)],
        candidates=minmax_candidates,
    )
    counted = op_node(agg, both)
    a, b = col(n), col(n + 1)
    if node.args.get("distinct"):
        other: exp.Expression = exp.GT(this=b, expression=exp.Literal.number(0))
        if isinstance(node, exp.Except):
            other = exp.EQ(this=b, expression=exp.Literal.number(0))
        pred = exp.And(this=exp.GT(this=a, expression=exp.Literal.number(0)), expression=other)
        kept = op_node(Filter(counted.columns, compile_expr(pred)), counted)
        return select_columns(kept, list(range(n)), tuple(names))
    if isinstance(node, exp.Except):
        times: exp.Expression = exp.Sub(this=a, expression=b)
    else:  # INTERSECT ALL: the smaller count
        times = exp.Case(
            ifs=[exp.If(this=exp.LT(this=a, expression=b), true=a.copy())], default=b.copy()
        )
    mcols = tuple(names) + ("_times",)
    exprs = [compile_expr(col(c)) for c in range(n)] + [compile_expr(times)]
    multiplicity = op_node(Project(mcols, exprs), counted)
    positive = exp.GT(this=col(n), expression=exp.Literal.number(0))
    kept = op_node(Filter(mcols, compile_expr(positive)), multiplicity)
    return op_node(Replicate(tuple(names)), kept)
