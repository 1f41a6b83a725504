"""Materialization decisions: where state is partial, evict-on-miss or full, and why.

The graph builder walks a view's plan top-down carrying the reader's key (``req``: the
columns of the current node's output that the key above traces to, or None once a
state above is full). At each stateful node:

* **partial** on the key's trace when the reader's key columns are copied unchanged down
  to that node (``Operator.resolve``): a fill of key k above fills k here too, from the
  same snapshot, and evicting k here evicts k above (the trace links, ``link``);
* **miss** (evict-on-miss) for a join index whose key the downstream key does not trace
  to, but where every downstream key is computable from the other side's rows: a lookup
  that finds a hole drops the update and evicts exactly those downstream keys;
* **full** for both indexes of a cross product (a join on a constant key), whatever the
  key above;
* **full** otherwise — and then everything below is full too, so partial state never
  sits below full state.

Each decision carries its reason, which ``explain`` shows.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import GroupedOperator, Operator
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.server.dataflow.state import Mode, State

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Node

# The key columns a node's output is asked for by the state above, or None (full above).
Req = tuple[int, ...] | None


@dataclass(frozen=True)
class Decision:
    mode: Mode
    key: tuple[int, ...]  # partial (fill key) columns; () when full
    reason: str


CROSS_REASON = (
    "cross product (no equality joins the sides): every {side} row sits under one constant key "
    "and a change on either side meets every row of the other, so this index is full; it grows "
    "with the {side} side's rows, and the product (left rows x right rows) flows above it"
)


# -- per kind of state -----------------------------------------------------------------------
def reader_decision(key: tuple[int, ...]) -> Decision:
    why = (
        "keyed by the view's parameters; filled per key on read"
        if key
        else "no parameters: one key, filled on the first read"
    )
    return Decision("partial", tuple(key), why)


def grouped_decision(op: GroupedOperator, req: Req) -> Decision:
    """Partial when the key above is made of this operator's grouping columns."""
    if req is not None and set(req) <= set(op.group_columns()):
        return Decision(
            "partial",
            tuple(req),
            "the key above is copied from grouping columns here, so it is filled per key with it",
        )
    if req is None:
        return Decision("full", (), "a state above is full, so everything below it is full")
    return Decision(
        "full",
        (),
        "key column computed by an aggregate (not a grouping column), so no key can be pushed "
        "below it",
    )


def join_decisions(op: Join, req: Req) -> dict[int, Decision]:
    """Each side's index: partial when the key above traces to its join key, evict-on-miss
    when the key traces to the other side instead (inner joins), full otherwise."""
    idx = op.side_indexes()
    out = {}
    if getattr(op, "cross", False):
        for s in (0, 1):
            out[s] = Decision("full", (), CROSS_REASON.format(side="left" if s == 0 else "right"))
        return out
    for s in (0, 1):
        mine, other = trace(op, req, s), trace(op, req, 1 - s)
        if mine is not None and set(mine) <= set(idx[s]):
            out[s] = Decision(
                "partial",
                mine,
                "the key above is the join key, so this index is filled per key with it",
            )
        elif other is not None and op.join_kind == "inner" and req:
            out[s] = Decision(
                "miss",
                idx[s],
                "updates from the other side carry the key above, so a miss here evicts exactly "
                "the keys they affect",
            )
        elif req is None:
            out[s] = Decision("full", (), "a state above is full, so everything below it is full")
        else:
            out[s] = Decision(
                "full",
                (),
                "updates from the other side can't tell which keys above they affect, so their "
                "lookups must never miss",
            )
    return out


def unbounded(op: GroupedOperator) -> GroupedOperator:
    """A full state never becomes a hole, so MIN/MAX/top-k there keep every candidate."""
    if getattr(op, "candidates", None) is None:
        return op
    clone = copy.copy(op)
    clone.candidates = None  # type: ignore[attr-defined]
    return clone


# -- tracing keys through operators ----------------------------------------------------------
def trace(op: Operator, req: Req, parent: int) -> Req:
    """Map key columns of ``op``'s output to columns of parent ``parent``, or None if any
    key column is computed (or comes from another parent)."""
    if req is None:
        return None
    out = []
    for c in req:
        src = [pc for p, pc in op.resolve(c) if p == parent]
        if not src:
            return None
        out.append(src[0])
    return tuple(out)


def states_of(n: Node) -> list[State]:
    return ([n.own] if n.own is not None else []) + [n.sides[s] for s in sorted(n.sides)]


def states_below(node: Node, req: tuple[int, ...]) -> list[State]:
    """The nearest partial states at or below ``node`` whose fill key equals ``req``'s."""
    if node.own is not None and node.view is None:
        st = node.own
        return [st] if st.mode == "partial" else []
    if node.op is None:
        return []
    found: list[State] = []
    for i, p in enumerate(node.parents):
        side = node.sides.get(i)
        mapped = trace(node.op, req, i)
        if side is not None:
            if side.mode == "partial" and mapped is not None:
                found.append(side)
            continue
        if mapped is not None:
            found.extend(states_below(p, mapped))
    return found


def link(st: State, parent: Node, req: Any) -> None:
    """Trace links from ``st`` (keyed by ``req`` on ``parent``'s rows) to the nearest
    partial states below with the same fill key — a fill of ``st`` fills their key too,
    from the same snapshot, and evicting their key evicts ``st``'s — and the source ``st``
    can be derived from in Python."""
    if req is None:
        return
    below = states_below(parent, tuple(req))
    for b in below:
        st.below.append(b)
        b.dependents.append(st)
    # Derive st from a grouped state through filter/project only (no Spark, no
    # float drift between the two copies).
    chain: list[Node] = []
    n = parent
    while n.op is not None and isinstance(n.op, (Filter, Project)) and n.view is None:
        chain.append(n)
        n = n.parents[0]
    if (
        n.own is not None
        and n.own.kind == "grouped"
        and n.own in below
        and st.kind in ("rows", "grouped")
    ):
        st.source = (n.own, list(reversed(chain)))
