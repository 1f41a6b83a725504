"""Which downstream keys a join delta could affect, computed from the delta's own row.

Used when a join delta cannot be computed yet (its lookup missed an evict-on-miss index):
the keys it would reach are gated on the index fill that fetches the missed key, or, where
that is not possible, evicted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Row
from partialflow.operators.join import Join

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Node
    from partialflow.server.dataflow.state import State


def downstream_keys(node: Node, pidx: int, row: Row) -> list[tuple[State, Row | None]]:
    """The nearest states above ``node`` that a delta of ``row`` from parent ``pidx``
    reaches, each with the fill key it would touch (None when not computable)."""
    out: list[tuple[State, Row | None]] = []
    _walk_known(node, pidx, {pc: row[pc] for pc in range(len(row))}, out, through=True)
    return out


def _walk_known(
    node: Node, pidx: int, known: dict[int, Any], out: list, through: bool = False
) -> None:
    st = node.own
    if st is not None and not through:
        out.append((st, _key_from_known(st, node, pidx, known)))
        return
    if not through and pidx in node.sides and node.sides[pidx].mode != "full":
        side = node.sides[pidx]
        out.append((side, _key_from_known(side, None, pidx, known)))
    mapped = {}
    for c in range(len(node.columns)):
        for p, pc in _sources(node, c, pidx):
            if p == pidx and pc in known:
                mapped[c] = known[pc]
                break
    for child, cidx in node.children:
        _walk_known(child, cidx, mapped, out)


def _sources(node: Node, c: int, pidx: int) -> list[tuple[int, int]]:
    """Where output column ``c`` of ``node`` comes from, for the rows a delta from parent
    ``pidx`` produces. Beyond ``resolve``: every row a right delta of a LEFT JOIN
    produces or retracts (matched or NULL-padded) has the left join key equal to the
    delta's right key, though in general a left join's left key column is not the right
    one (padded rows). Without this, a dropped right delta could not name the keys it
    affects, and every key above would be evicted."""
    op = node.op
    assert op is not None
    found = op.resolve(c)
    if isinstance(op, Join) and pidx == 1 and c < op.left_width and c in op.left_key:
        found = found + [(1, op.right_key[op.left_key.index(c)])]
    return found


def _key_from_known(st: State, node: Node | None, pidx: int, known: dict[int, Any]) -> Row | None:
    fk = []
    for c in st.partial_cols:
        col: int | None = c
        if node is not None and node.view is None:
            srcs = [pc for p, pc in node.op.resolve(c) if p == pidx]  # type: ignore[union-attr]
            col = srcs[0] if srcs else None
        if col is None or col not in known:
            return None
        fk.append(known[col])
    return tuple(fk)
