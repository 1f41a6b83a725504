"""The planner's output: ``PlanNode`` trees of operators over base tables, and ``ViewPlan``.

Kept apart from ``planner.py`` so the pieces of SQL planning (FROM/JOIN in
``from_clause.py``, SELECT in ``planner.py``) share these types without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from partialflow.operators.base import Operator
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.server.sql.binding import col, compile_expr


@dataclass(eq=False)
class PlanNode:
    """An operator over its parents, or (``op is None``) a base table."""

    columns: tuple[str, ...]
    op: Operator | None = None
    parents: list[PlanNode] = field(default_factory=list)
    table: str | None = None

    def describe(self, indent: int = 0) -> str:
        head = f"table {self.table}" if self.op is None else self.op.description()
        lines = ["  " * indent + head]
        lines += [p.describe(indent + 1) for p in self.parents]
        return "\n".join(lines)


@dataclass
class ViewPlan:
    """A planned view: the operator tree and how its reader presents rows."""

    root: PlanNode
    columns: list[str]  # visible output names
    visible: tuple[int, ...]  # root columns returned to the reader's caller
    key: tuple[int, ...]  # root columns the reader is keyed by (the `?` parameters)
    order: list[tuple[int, bool]]  # root columns (and DESC?) to sort results by
    limit: int | None
    empty_row: tuple | None  # a global aggregate's answer for a key with no rows
    # Hidden root columns that fail a read when set, with the subquery each one checks
    # (a scalar subquery with several rows, guards.py).
    guards: tuple[tuple[int, str], ...] = ()


def op_node(op: Operator, parent: PlanNode) -> PlanNode:
    """``op`` over one parent."""
    return PlanNode(op.columns, op, [parent])


def select_columns(node: PlanNode, positions: list[int], names: tuple[str, ...]) -> PlanNode:
    """A projection of ``node`` onto ``positions`` (itself when that is every column in order)."""
    if positions == list(range(len(node.columns))):
        return node
    return op_node(Project(names, [compile_expr(col(i)) for i in positions]), node)


def visible_only(plan: ViewPlan) -> PlanNode:
    """A view used as a relation: its root without hidden columns (and unsorted)."""
    return select_columns(plan.root, list(plan.visible), tuple(plan.columns))


def with_constant(node: PlanNode, name: str = "_one") -> PlanNode:
    """``node`` with one more column, the literal 1 (a cross product's join key)."""
    width = len(node.columns)
    exprs = [compile_expr(col(i)) for i in range(width)] + [compile_expr(exp.Literal.number(1))]
    return op_node(Project(node.columns + (name,), exprs), node)


def cross_join(left: PlanNode, right: PlanNode, kind: str = "inner") -> PlanNode:
    """Every row of ``left`` with every row of ``right`` (``kind`` left: a left row with no
    right row at all is kept, NULL-padded), the left columns then the right ones.

    A join on a constant: each side gets the column 1 and they join on it, so every row of
    each side sits under that one key. Both indexes hold their whole side (materialization
    makes them full: a change on either side meets every row of the other), and deletes on
    either side retract exactly the pairs they made, as in any join."""
    lw, rw = len(left.columns), len(right.columns)
    lc, rc = with_constant(left), with_constant(right)
    cols = lc.columns + rc.columns
    op = Join(cols, (lw,), (rw,), kind, left_width=lw + 1, cross=True)
    joined = PlanNode(cols, op, [lc, rc])
    keep = list(range(lw)) + [lw + 1 + j for j in range(rw)]
    return select_columns(joined, keep, left.columns + right.columns)
