"""ρ: each input row ``(values..., m)`` as ``m`` copies of ``(values...)``.

The multiset set operations (INTERSECT ALL, EXCEPT ALL) keep a row as many times as a
function of its counts on each side says (``min(a, b)``, ``max(a - b, 0)``). An aggregate
keeps the counts and a projection computes that multiplicity as a column; this operator
turns it back into rows. It is stateless: a retraction of ``(row, m)`` retracts ``m``
copies, so a group whose multiplicity moves from m to m' (a retraction and an insertion
from the aggregate) nets out to m' - m copies.
"""

from __future__ import annotations

from collections.abc import Hashable

from partialflow.operators.base import Delta, Operator, Output, StateView


class Replicate(Operator):
    """Input rows are the output columns plus a last column, the multiplicity (an int;
    NULL or below 1 makes no copy)."""

    symbol = "ρ"

    def __init__(self, columns: tuple[str, ...]) -> None:
        super().__init__(columns, 1)
        self._n = len(self.columns)

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(0, col)]

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        n = self._n
        out: list[Delta] = []
        for row, sign in deltas:
            m = row[n]
            if m is not None and m > 0:
                d = (row[:n], sign)
                out.extend([d] * int(m))
        return Output(out)

    def signature(self) -> Hashable:
        return ("replicate", self._n)

    def description(self) -> str:
        return f"ρ[{', '.join(self.columns)} × multiplicity]"
