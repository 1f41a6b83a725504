"""Aggregate functions: only their arithmetic, shared by the one grouped operator.

As in Noria's ``grouped/``, each function turns an input row into a diff (``to_diff``)
and folds a group's diffs into its state (``apply``); ``Aggregate`` does the grouping,
state handling and output. States are immutable values (or copied before changing), so
the entry the executor holds is never modified behind its back.

Each function also says how its state is loaded from Spark: ``width`` accumulator
columns follow the group's row count in a state row (see ``server/upquery/operator_plans.py``):

    COUNT_STAR  0 columns        (the group's row count)
    COUNT       1: non-null count
    SUM, AVG    2: non-null count, sum (NULL when no values)
    MIN, MAX    2: non-null count, array of (value, multiplicity) of the best distinct
                   values (all of them when candidates is None)
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from partialflow.operators.base import Row
from partialflow.operators.candidates import Candidates, ascending, descending
from partialflow.operators.grouped import Exhausted
from partialflow.operators.sizes import value_size
from partialflow.operators.values import INT64_MAX, INT64_MIN, wrap

Diff = tuple[Any, int]


class AggFunc:
    """Base: a function of input column ``col`` (None for COUNT(*))."""

    name: ClassVar[str] = "?"
    width: ClassVar[int] = 1

    def __init__(self, col: int | None) -> None:
        self.col = col

    def to_diff(self, row: Row, sign: int) -> Diff | None:
        """The diff one input delta contributes; None when it doesn't count (NULL)."""
        v = row[self.col]  # type: ignore[index]
        return None if v is None else (v, sign)

    def initial(self) -> Any:
        """State of a group with no values."""
        raise NotImplementedError

    def apply(self, state: Any, diffs: list[Diff], candidates: int | None) -> Any:
        """State after the diffs (raises Exhausted when it can't be known)."""
        raise NotImplementedError

    def result(self, state: Any) -> Any:
        """The aggregate's value for a state."""
        raise NotImplementedError

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> Any:
        """State from the accumulator columns of a Spark state row."""
        raise NotImplementedError

    def size(self, state: Any) -> int:
        """Approximate bytes held by a state."""
        return value_size(state)


class CountStar(AggFunc):
    name = "COUNT_STAR"
    width = 0

    def to_diff(self, row: Row, sign: int) -> Diff | None:
        return (None, sign)

    def initial(self) -> int:
        return 0

    def apply(self, state: int, diffs: list[Diff], candidates: int | None) -> int:
        return state + sum(s for _, s in diffs)

    def result(self, state: int) -> int:
        return state

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> int:
        return int(row_count)


class Count(CountStar):
    name = "COUNT"
    width = 1
    to_diff = AggFunc.to_diff

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> int:
        return int(acc[0])


class Sum(AggFunc):
    """State (non-null count, running sum). NULL when no values, like SQL."""

    name = "SUM"
    width = 2

    def initial(self) -> tuple[int, Any]:
        return (0, 0)

    def apply(self, state: tuple[int, Any], diffs: list[Diff], candidates: int | None
              ) -> tuple[int, Any]:
        n, total = state
        for v, sign in diffs:
            n += sign
            total = total + v if sign > 0 else total - v
            if not n:  # no values left: drop float residue (+x -x can leave 1e-17)
                total = 0
        return (n, total)

    def result(self, state: tuple[int, Any]) -> Any:
        n, total = state
        if not n:
            return None
        if total.__class__ is int and not INT64_MIN <= total <= INT64_MAX:
            return wrap(total, 64)  # Spark's non-ANSI BIGINT sum wraps around
        return total

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None
             ) -> tuple[int, Any]:
        n = int(acc[0])
        return (n, acc[1]) if n else (0, 0)

    def size(self, state: tuple[int, Any]) -> int:
        return 56 + value_size(state[0]) + value_size(state[1])


class Avg(Sum):
    name = "AVG"

    def result(self, state: tuple[int, Any]) -> float | None:
        n, total = state
        return None if not n else float(total) / n


class Extremum(AggFunc):
    """MIN / MAX over bounded candidates (the best distinct values with multiplicities)."""

    width = 2

    def __init__(self, col: int | None, largest: bool) -> None:
        super().__init__(col)
        self.largest = largest
        self.name = "MAX" if largest else "MIN"  # type: ignore[misc]
        self.key = descending if largest else ascending

    def initial(self) -> Candidates:
        return Candidates()

    def apply(self, state: Candidates, diffs: list[Diff], candidates: int | None
              ) -> Candidates:
        state = state.copy()
        key = self.key
        for v, sign in diffs:
            if sign > 0:
                state.insert(v, key, candidates)
            else:
                state.delete(v, key)
                if not state.kept and state.total > 0:
                    raise Exhausted(self.name)
        return state

    def result(self, state: Candidates) -> Any:
        return state.items[0] if state.items else None

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> Candidates:
        pairs = [(p[0], p[1]) for p in acc[1] or []]
        return Candidates.loaded(pairs, int(acc[0]), self.key)

    def size(self, state: Candidates) -> int:
        return state.size()


def make(func: str, col: int | None) -> AggFunc:
    """The function object for an AggSpec."""
    if func == "MIN" or func == "MAX":
        return Extremum(col, func == "MAX")
    cls = _FUNCS.get(func)
    if cls is None:
        raise ValueError(f"unknown aggregate {func!r}; known: {', '.join(FUNC_NAMES)}")
    return cls(col)


_FUNCS: dict[str, type[AggFunc]] = {
    "COUNT_STAR": CountStar, "COUNT": Count, "SUM": Sum, "AVG": Avg,
}
FUNC_NAMES = ("COUNT_STAR", "COUNT", "SUM", "AVG", "MIN", "MAX")
