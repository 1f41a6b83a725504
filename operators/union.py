"""⋃: UNION ALL of several parents with the same number of columns."""

from __future__ import annotations

from collections.abc import Hashable

from partialflow.operators.base import Delta, Operator, Output, StateView


class Union(Operator):
    """Bag union: every parent's deltas pass through unchanged (UNION = this + δ)."""

    symbol = "⋃"

    def __init__(self, columns: tuple[str, ...], n_parents: int) -> None:
        super().__init__(columns, n_parents)

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(p, col) for p in range(self.n_parents)]

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        return Output(list(deltas))

    def signature(self) -> Hashable:
        return ("union", self.n_parents, len(self.columns))

    def description(self) -> str:
        return f"⋃[{self.n_parents} inputs]"
