"""δ: SELECT DISTINCT — each distinct row once, however many times it occurs."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from partialflow.operators.base import Delta, GroupedOperator, Output, Row, StateView
from partialflow.operators.grouped import by_group
from partialflow.operators.sizes import value_size


class Distinct(GroupedOperator):
    """Counts each row (its entry is the count); emits a row on 0 -> 1, retracts on 1 -> 0.

    NULLs are equal to each other here, as in SQL's DISTINCT (Python's None == None).
    """

    symbol = "δ"

    def __init__(self, columns: tuple[str, ...]) -> None:
        super().__init__(columns, 1)

    def group_columns(self) -> tuple[int, ...]:
        return tuple(range(len(self.columns)))

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(0, col)]

    def input_group(self, parent: int, row: Row) -> Row:
        return row

    def split(self, parent: int, deltas: list[Delta]) -> dict[Row, list[Delta]]:
        return by_group(deltas, _identity)

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        return self.on_groups(parent, by_group(deltas, _identity), state)

    def on_groups(self, parent: int, groups: dict[Row, list[Delta]], state: StateView) -> Output:
        out = Output()
        for row, batch in groups.items():
            before = state.own(row) or 0
            after = before + sum(sign for _, sign in batch)
            out.writes[row] = after if after > 0 else None
            if before <= 0 < after:
                out.deltas.append((row, 1))
            elif after <= 0 < before:
                out.deltas.append((row, -1))
        return out

    def output_rows(self, group: Row, entry: int) -> list[Row]:
        return [group] if entry > 0 else []

    def load_entries(self, state_rows: list[Row]) -> dict[Row, Any]:
        """Rows ``(row..., count)``."""
        n = len(self.columns)
        return {tuple(r[:n]): int(r[n]) for r in state_rows}

    def entry_size(self, entry: int) -> int:
        # The key row itself is counted by the state (it is the group key).
        return value_size(entry)

    def signature(self) -> Hashable:
        return ("distinct", len(self.columns))

    def description(self) -> str:
        return f"δ[{', '.join(self.columns)}]"


def _identity(row: Row) -> Row:
    return row
