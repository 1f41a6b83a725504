"""Aggregate functions: only their arithmetic, shared by the one grouped operator.

As in Noria's ``grouped/``, each function turns an input row into a diff (``to_diff``)
and folds a group's diffs into its state (``apply``); ``Aggregate`` does the grouping,
state handling and output. States are immutable values (or copied before changing), so
the entry the executor holds is never modified behind its back.

Each function also says how its state is loaded from Spark: ``width`` accumulator
columns follow the group's row count in a state row (see ``server/upquery/operator_plans.py``):

    COUNT_STAR  0 columns        (the group's row count)
    COUNT       1: non-null count
    SUM, AVG    3: non-null count, sum of the finite values, [NaN, +inf, -inf counts]
    MIN, MAX    2: non-null count, array of (value, multiplicity) of the best distinct
                   values (all of them when candidates is None)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from operator import neg
from typing import Any, ClassVar

from partialflow.operators.base import Row
from partialflow.operators.candidates import Candidates, ascending, descending
from partialflow.operators.grouped import Exhausted
from partialflow.operators.sizes import value_size
from partialflow.operators.values import INT64_MAX, INT64_MIN, NAN, wrap

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

    def fold(self, state: Any, batch: list[tuple[Row, int]], candidates: int | None) -> Any:
        """State after a group's input deltas: ``apply`` of their diffs."""
        col = self.col
        diffs = [(row[col], sign) for row, sign in batch if row[col] is not None]  # type: ignore[index]
        return self.apply(state, diffs, candidates) if diffs else state

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

    def fold(self, state: int, batch: list[tuple[Row, int]], candidates: int | None) -> int:
        return state + sum([sign for _, sign in batch])

    def result(self, state: int) -> int:
        return state

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> int:
        return int(row_count)


class Count(CountStar):
    name = "COUNT"
    width = 1
    to_diff = AggFunc.to_diff
    fold = AggFunc.fold

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> int:
        return int(acc[0])


_INF = float("inf")


def special_kind(v: Any) -> int:
    """0 for a finite value, else which IEEE special it is: 1 NaN, 2 +inf, 3 -inf."""
    if v.__class__ is not float or (v == v and v not in (_INF, -_INF)):
        return 0
    return 1 if v != v else (2 if v > 0 else 3)


class Sum(AggFunc):
    """State (non-null count, sum of the finite values, NaN count, +inf count, -inf count).
    NULL when no values, like SQL.

    A running float sum is not invertible once it meets a special value: inf + -inf is
    NaN, and NaN - x stays NaN, so deleting the values that made it NaN would never bring
    the sum back. The specials are counted instead, and the result is what a fresh sum
    gives: NaN if there is a NaN or both infinities, else the infinity, else the sum.
    """

    name = "SUM"
    width = 3  # count, finite sum, [NaN count, +inf count, -inf count]

    def initial(self) -> tuple[int, Any, int, int, int]:
        return (0, 0, 0, 0, 0)

    def apply(self, state: tuple[int, Any, int, int, int], diffs: list[Diff],
              candidates: int | None) -> tuple[int, Any, int, int, int]:
        n, total, nan, pinf, ninf = state
        for v, sign in diffs:
            n += sign
            # Inline fast test for a finite value (special_kind 0): not a float, or a
            # float whose v - v is 0.0 (NaN and the infinities give NaN there).
            if v.__class__ is not float or v - v == 0.0:
                total = total + v if sign > 0 else total - v
                if not n:
                    total = 0
                continue
            kind = special_kind(v)
            if kind == 1:
                nan += sign
            elif kind == 2:
                pinf += sign
            else:
                ninf += sign
            if not n:  # no values left: drop float residue (+x -x can leave 1e-17)
                total = 0
        return (n, total, nan, pinf, ninf)

    @staticmethod
    def _special_result(nan: int, pinf: int, ninf: int) -> float | None:
        if nan or (pinf and ninf):
            return NAN  # the one NaN object, so the retraction matches the row emitted
        if pinf:
            return _INF
        return -_INF if ninf else None

    def result(self, state: tuple[int, Any, int, int, int]) -> Any:
        n, total, nan, pinf, ninf = state
        if not n:
            return None
        special = self._special_result(nan, pinf, ninf)
        if special is not None:
            return special
        if total.__class__ is int and not INT64_MIN <= total <= INT64_MAX:
            return wrap(total, 64)  # Spark's non-ANSI BIGINT sum wraps around
        return total

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None
             ) -> tuple[int, Any, int, int, int]:
        n = int(acc[0])
        if not n:
            return (0, 0, 0, 0, 0)
        nan, pinf, ninf = (int(c or 0) for c in (acc[2] or (0, 0, 0)))
        # An all-special group sums no finite value: Spark's SUM over none is NULL.
        return (n, 0 if acc[1] is None else acc[1], nan, pinf, ninf)

    def size(self, state: tuple[int, Any, int, int, int]) -> int:
        return 88 + value_size(state[0]) + value_size(state[1])


class Avg(Sum):
    name = "AVG"

    def result(self, state: tuple[int, Any, int, int, int]) -> float | None:
        n, total, nan, pinf, ninf = state
        if not n:
            return None
        special = self._special_result(nan, pinf, ninf)
        return special if special is not None else float(total) / n


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

    def fold(self, state: Candidates, batch: list[tuple[Row, int]], candidates: int | None
             ) -> Candidates:
        """As ``apply`` of the batch's diffs, merged in one pass when the batch only
        inserts (appends: the common case of a large write) and is not small."""
        col = self.col
        if len(batch) >= _MERGE_MIN:
            vals = [row[col] for row, sign in batch if sign > 0]  # type: ignore[index]
            if len(vals) == len(batch):
                vals = [v for v in vals if v is not None]
                if not vals:
                    return state
                seen = Counter(vals)
                if any(v != v for v in seen):  # NaN: keep the one-at-a-time order semantics
                    return self.apply(state, [(v, 1) for v in vals], candidates)
                return _merge_inserts(state, seen, len(vals), self.key, candidates)
        # ``apply`` of the non-NULL diffs, in one pass. The state is copied on the first
        # diff that changes its items: an insert strictly worse than every kept item of
        # a list with no room (most inserts into a long-lived group: a MAX of 1,000
        # values keeps 8) only counts in ``total``, and so does not copy.
        key: Callable[[Any], Any] = self.key
        new = None
        unseen = 0  # such inserts before the copy
        keyed = False
        for row, sign in batch:
            v = row[col]  # type: ignore[index]
            if v is None:
                continue
            if not keyed:
                keyed = True
                if self.largest and v.__class__ in _NUMBERS:
                    # A column's values are all numbers or none are; for numbers the
                    # descending key is negation, and operator.neg runs it in C.
                    key = neg
            if new is None:
                if sign > 0 and state.beneath(v, key, candidates):
                    unseen += 1
                    continue
                new = state.copy()
                new.total += unseen
            if sign > 0:
                new.insert(v, key, candidates)
            else:
                new.delete(v, key)
                if not new.kept and new.total > 0:
                    raise Exhausted(self.name)
        if new is None:
            return state.counted(unseen) if unseen else state
        return new

    def result(self, state: Candidates) -> Any:
        return state.items[0] if state.items else None

    def load(self, row_count: int, acc: Sequence[Any], candidates: int | None) -> Candidates:
        pairs = [(p[0], p[1]) for p in acc[1] or []]
        return Candidates.loaded(pairs, int(acc[0]), self.key)

    def size(self, state: Candidates) -> int:
        return state.size()


_NUMBERS = (int, float, bool)

# Insert-only batches of at least this many values are merged (``Extremum.fold``);
# smaller ones are cheaper one insert at a time.
_MERGE_MIN = 8


def _merge_inserts(state: Candidates, seen: Counter[Any], n: int, key: Callable[[Any], Any],
                   cap: int | None) -> Candidates:
    """The candidates after inserting ``n`` values (``seen``: their distinct values and
    counts), equal to ``n`` calls of ``Candidates.insert``: with no deletion the worst kept
    value only improves, so a value is kept at the end iff it is among the best ``cap`` of
    the old kept values and the eligible new ones, with all of its occurrences counted.
    Once items are truncated, only values at least as good as the worst kept one are
    eligible (unseen items may be better than the others)."""
    merged = dict(zip(state.items, state.counts, strict=True))
    if state.truncated:
        if not state.items:
            return Candidates([], [], state.total + n)
        worst = key(state.items[-1])
        for v, c in seen.items():
            if not worst < key(v):  # at least as good (keys define only <)
                merged[v] = merged.get(v, 0) + c
    else:
        for v, c in seen.items():
            merged[v] = merged.get(v, 0) + c
    ordered = sorted(merged.items(), key=lambda p: key(p[0]))
    if cap is not None:
        del ordered[cap:]
    return Candidates([p[0] for p in ordered], [p[1] for p in ordered], state.total + n)


def make(func: str, col: int | None) -> AggFunc:
    """The function object for an AggSpec."""
    if func in ("MIN", "MAX"):
        return Extremum(col, func == "MAX")
    cls = _FUNCS.get(func)
    if cls is None:
        raise ValueError(f"unknown aggregate {func!r}; known: {', '.join(FUNC_NAMES)}")
    return cls(col)


_FUNCS: dict[str, type[AggFunc]] = {
    "COUNT_STAR": CountStar, "COUNT": Count, "SUM": Sum, "AVG": Avg,
}
FUNC_NAMES = ("COUNT_STAR", "COUNT", "SUM", "AVG", "MIN", "MAX")
