"""γ: GROUP BY with COUNT(*), COUNT, SUM, AVG, MIN, MAX.

One generic grouped operator; the functions in ``aggfuncs`` supply only arithmetic.
Output row = the group's values (in ``group_by`` order) + one value per aggregate, so the
group columns are output columns 0..g-1. The entry per group is ``AggEntry``: the
group's row count and one state per aggregate.

A group whose row count drops to 0 disappears (only its old row is retracted). A global
aggregate (no GROUP BY) always has exactly one row, as in SQL: over no input it is COUNT
0 and NULL for the rest. Its group ``()`` is therefore never removed, and an absent entry
counts as that empty-input row.

MIN/MAX keep ``candidates`` distinct values per group (None = all of them, for full
state); when deletions exhaust them the group is reported in ``Output.exhausted`` and
nothing is emitted for it (see ``candidates.py``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

from partialflow.operators import aggfuncs
from partialflow.operators.base import Delta, GroupedOperator, Output, Row, StateView
from partialflow.operators.grouped import Exhausted, by_group, column_getter


@dataclass(frozen=True)
class AggSpec:
    """One aggregate call: ``func`` in COUNT_STAR|COUNT|SUM|AVG|MIN|MAX over input
    column ``col`` (None for COUNT_STAR)."""

    func: str
    col: int | None = None


class AggEntry(NamedTuple):
    """A group's state: its input row count and one state per aggregate."""

    rows: int
    states: tuple[Any, ...]


# AggEntry(rows, states) without the Python-level __new__ NamedTuple adds (hot path).
_new_entry = tuple.__new__


class Aggregate(GroupedOperator):
    """γ over input columns ``group_by`` computing ``aggs``."""

    symbol = "γ"

    def __init__(self, columns: tuple[str, ...], group_by: tuple[int, ...],
                 aggs: list[AggSpec], candidates: int | None = None) -> None:
        super().__init__(columns, 1)
        if len(self.columns) != len(group_by) + len(aggs):
            raise ValueError(f"{len(self.columns)} columns for {len(group_by)} groups "
                             f"+ {len(aggs)} aggregates")
        for a in aggs:
            if (a.col is None) != (a.func == "COUNT_STAR"):
                raise ValueError(f"{a.func} needs {'no' if a.func == 'COUNT_STAR' else 'a'} column")
        if candidates is not None and candidates < 1:
            raise ValueError(f"candidates must be at least 1, got {candidates}")
        self.group_by = tuple(group_by)
        self.aggs = list(aggs)
        # Read at call time: the graph turns a bounded operator into an unbounded copy
        # (for full state) by setting this attribute.
        self.candidates = candidates
        self.funcs = [aggfuncs.make(a.func, a.col) for a in self.aggs]
        self._group_of = column_getter(self.group_by)
        # Per-delta hot path: the functions' bound methods, looked up once.
        self._star = [f.__class__ is aggfuncs.CountStar for f in self.funcs]
        self._results = [f.result for f in self.funcs]
        self._sizes = [f.size for f in self.funcs]

    # -- wiring ------------------------------------------------------------------------
    def group_columns(self) -> tuple[int, ...]:
        return tuple(range(len(self.group_by)))

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(0, self.group_by[col])] if col < len(self.group_by) else []

    def input_group(self, parent: int, row: Row) -> Row:
        return self._group_of(row)

    # -- computation -------------------------------------------------------------------
    def split(self, parent: int, deltas: list[Delta]) -> dict[Row, list[Delta]]:
        return by_group(deltas, self._group_of)

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        return self.on_groups(parent, by_group(deltas, self._group_of), state)

    def on_groups(self, parent: int, groups: dict[Row, list[Delta]], state: StateView) -> Output:
        out = Output()
        if len(self.funcs) == 1 and self.group_by:
            self._on_groups_one(groups, state, out)
        else:
            self._on_groups_any(groups, state, out)
        return out

    def _on_groups_any(self, groups: dict[Row, list[Delta]], state: StateView, out: Output
                       ) -> None:
        own, fold, emit = state.own, self._fold, self._emit
        for group, batch in groups.items():
            old = own(group)
            try:
                new = fold(old if old is not None else self._initial(), batch)
            except Exhausted:
                out.exhausted.append(group)
                continue
            emit(group, old, new, out)

    def _on_groups_one(self, groups: dict[Row, list[Delta]], state: StateView, out: Output
                       ) -> None:
        """``_on_groups_any`` for one aggregate with GROUP BY (most views), with ``_fold``
        and ``_emit`` inlined: they run for every group a write changes. The same output,
        delta for delta (test_aggregate.py checks the two paths against each other)."""
        f, star, result, cap = self.funcs[0], self._star[0], self._results[0], self.candidates
        own, initial = state.own, self._initial
        writes, emit = out.writes, out.deltas.append
        for group, batch in groups.items():
            old = own(group)
            rows, (st,) = old if old is not None else initial()
            n = batch[0][1] if len(batch) == 1 else sum([d[1] for d in batch])
            if star:
                new_st = st + n
            else:
                try:
                    new_st = f.fold(st, batch, cap)
                except Exhausted:
                    out.exhausted.append(group)
                    continue
            if rows + n <= 0:  # the group is gone (a group without rows has no row)
                writes[group] = None
                if rows > 0:
                    emit((group + (result(st),), -1))
                continue
            writes[group] = _new_entry(AggEntry, (rows + n, (new_st,)))
            new_val = result(new_st)
            if rows <= 0:
                emit((group + (new_val,), 1))
                continue
            old_val = result(st)
            if not (old_val is new_val or old_val == new_val):  # as tuples compare
                emit((group + (old_val,), -1))
                emit((group + (new_val,), 1))

    def initial_entry(self) -> AggEntry:
        """The entry of a group over no rows (a global aggregate's state on empty input)."""
        return self._initial()

    def _initial(self) -> AggEntry:
        return AggEntry(0, tuple([f.initial() for f in self.funcs]))

    def _fold(self, entry: AggEntry, batch: list[Delta]) -> AggEntry:
        cap = self.candidates
        n = sum([d[1] for d in batch])
        # COUNT(*)'s state is the group's row count: add the batch's once, not per call.
        states = tuple([st + n if star else f.fold(st, batch, cap)
                        for f, star, st in zip(self.funcs, self._star, entry.states, strict=True)])
        return _new_entry(AggEntry, (entry.rows + n, states))

    def _emit(self, group: Row, old: AggEntry | None, new: AggEntry, out: Output) -> None:
        # Rows are built only when the aggregate values changed (a MAX that a batch did
        # not beat emits nothing and builds nothing). An absent group is the empty-input
        # entry: no row when grouped, the global aggregate's row of COUNT 0 and NULLs.
        old_vals = self._values(old if old is not None else self._initial())
        if new.rows <= 0 and self.group_by:
            out.writes[group] = None
            if old_vals is not None:
                out.deltas.append((group + old_vals, -1))
            return
        out.writes[group] = new
        new_vals = self._values(new)
        if old_vals != new_vals:
            if old_vals is not None:
                out.deltas.append((group + old_vals, -1))
            if new_vals is not None:
                out.deltas.append((group + new_vals, 1))

    def _values(self, entry: AggEntry) -> Row | None:
        """The aggregate values of an entry's one output row, or None (a grouped entry
        without rows has no row)."""
        if entry.rows <= 0 and self.group_by:
            return None
        results = self._results
        if len(results) == 1:  # the common case: one aggregate
            return (results[0](entry.states[0]),)
        return tuple([r(s) for r, s in zip(results, entry.states, strict=True)])

    # -- state -------------------------------------------------------------------------
    def output_rows(self, group: Row, entry: AggEntry) -> list[Row]:
        vals = self._values(entry)
        return [] if vals is None else [group + vals]

    def load_entries(self, state_rows: list[Row]) -> dict[Row, Any]:
        """Rows ``(group values..., row count, accumulators per aggregate...)``; the
        accumulator columns of each function are listed in ``aggfuncs``."""
        g = len(self.group_by)
        entries: dict[Row, Any] = {}
        for row in state_rows:
            row_count = int(row[g] or 0)
            states, i = [], g + 1
            for f in self.funcs:
                states.append(f.load(row_count, row[i:i + f.width], self.candidates))
                i += f.width
            entries[tuple(row[:g])] = AggEntry(row_count, tuple(states))
        return entries

    def entry_size(self, entry: AggEntry) -> int:
        sizes = self._sizes
        if len(sizes) == 1:
            return 72 + sizes[0](entry.states[0])
        return 72 + sum([size(s) for size, s in zip(sizes, entry.states, strict=True)])

    # -- identity ----------------------------------------------------------------------
    def signature(self) -> Hashable:
        return ("aggregate", self.group_by, tuple((a.func, a.col) for a in self.aggs),
                self.candidates)

    def description(self) -> str:
        calls = ", ".join("COUNT(*)" if a.col is None else f"{a.func}(#{a.col})"
                          for a in self.aggs)
        by = ", ".join(f"#{c}" for c in self.group_by)
        return f"γ[{by or '()'}: {calls}]"
