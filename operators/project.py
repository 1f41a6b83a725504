"""π: computes each output column from an expression over the input row."""

from __future__ import annotations

from collections.abc import Hashable

from partialflow.operators.base import Delta, Operator, Output, StateView
from partialflow.operators.expressions import CompiledExpr
from partialflow.operators.grouped import column_getter


class Project(Operator):
    """SELECT list: output column i is ``exprs[i]`` evaluated on the input row."""

    symbol = "π"

    def __init__(self, columns: tuple[str, ...], exprs: list[CompiledExpr]) -> None:
        super().__init__(columns, 1)
        if len(exprs) != len(self.columns):
            raise ValueError(f"{len(exprs)} expressions for {len(self.columns)} columns")
        self.exprs = list(exprs)
        self._fns = tuple(e.eval for e in self.exprs)
        # Pure column shuffles (the common case) skip expression evaluation entirely.
        picks = [e.column for e in self.exprs]
        self._picks: tuple[int, ...] | None = (
            tuple(picks) if all(p is not None for p in picks) else None)  # type: ignore[arg-type]
        self._pick = column_getter(self._picks or ())

    def resolve(self, col: int) -> list[tuple[int, int]]:
        source = self.exprs[col].column
        return [] if source is None else [(0, source)]

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        if self._picks is not None:
            pick = self._pick
            return Output([(pick(row), sign) for row, sign in deltas])
        fns = self._fns
        return Output([(tuple([f(row) for f in fns]), sign) for row, sign in deltas])

    def signature(self) -> Hashable:
        return ("project", tuple(e.sql for e in self.exprs))

    def description(self) -> str:
        return "π[" + ", ".join(
            e.sql if e.sql == name else f"{e.sql} AS {name}"
            for e, name in zip(self.exprs, self.columns, strict=True)) + "]"
