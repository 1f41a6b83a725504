"""σ: keeps the rows whose predicate is TRUE (NULL and FALSE both drop the row)."""

from __future__ import annotations

from collections.abc import Hashable

from partialflow.operators.base import Delta, Operator, Output, StateView
from partialflow.operators.expressions import CompiledExpr


class Filter(Operator):
    """WHERE / HAVING: passes a delta through when ``predicate`` is TRUE on its row."""

    symbol = "σ"

    def __init__(self, columns: tuple[str, ...], predicate: CompiledExpr) -> None:
        super().__init__(columns, 1)
        self.predicate = predicate

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(0, col)]

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        keep = self.predicate.eval
        # `is True`: SQL's WHERE keeps TRUE only; NULL (unknown) is dropped like FALSE.
        return Output([d for d in deltas if keep(d[0]) is True])

    def signature(self) -> Hashable:
        return ("filter", self.predicate.sql)

    def description(self) -> str:
        return f"σ[{self.predicate.sql}]"
