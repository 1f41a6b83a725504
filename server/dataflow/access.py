"""What an operator sees of the states while it computes (operators/base.py StateView).

``StateAccess`` reads a node's join sides and own grouped state as they are;
``CapturedAccess`` reads, for a held join delta being replayed, the other sides' rows as
they were when it was held (``capture``, fill.py ``HeldJoin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Row

if TYPE_CHECKING:
    from partialflow.server.dataflow.fill import Captured
    from partialflow.server.dataflow.graph import Node
    from partialflow.server.dataflow.state import Bucket


class StateAccess:
    """The read-only state an operator sees (operators/base.py StateView), for one node.

    ``own_bucket``: a grouped state being built in Python (a derivation), read instead of
    the node's own state."""

    __slots__ = ("node", "own_bucket")

    def __init__(self, node: Node, own_bucket: Bucket | None = None) -> None:
        self.node = node
        self.own_bucket = own_bucket

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        return self.node.sides[side].rows_at(key)

    def own(self, group: Row) -> Any | None:
        if self.own_bucket is not None:
            return self.own_bucket.get(group)
        st = self.node.own
        assert st is not None
        return st.entry(group)


def capture(node: Node, missed: int, key: Row) -> Captured:
    """The rows of the join's other sides at ``key`` now, for a delta held until side
    ``missed`` is filled (its replay must not see their later updates)."""
    out = {}
    for s, side in node.sides.items():
        if s != missed:
            rows = side.rows_at(key)
            if rows is not None:
                out[(s, key)] = rows
    return out


class CapturedAccess(StateAccess):
    """Join lookups for a replayed held delta: captured rows where there are some, the
    (now filled) index otherwise."""

    __slots__ = ("captured",)

    def __init__(self, node: Node, captured: Captured) -> None:
        super().__init__(node)
        self.captured = captured

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        rows = self.captured.get((side, key))
        return rows if rows is not None else self.node.sides[side].rows_at(key)
