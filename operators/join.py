"""⋈ / ⟕: equi-join of two parents (inner or left outer).

Output rows are the left row followed by the right row; a left join pads left rows
without a match with NULLs. Each delta looks up the other parent's index (``side``) on its
key. A hole there means the delta can't be computed: it becomes a ``Miss`` and produces
nothing. NULL key values never match (SQL equality), so they are never looked up.

A left join also looks up the right index on right deltas: a left row's NULL-padded row
must be retracted when it gains its first match and re-emitted when it loses its last.
The index reflects the state before the batch (the executor applies the batch after
``on_input``), so the batch's own earlier deltas are counted on top of it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from partialflow.operators.base import Delta, Miss, Operator, Output, Row, StateView
from partialflow.operators.grouped import column_getter

KINDS = ("inner", "left")


class Join(Operator):
    """Join on ``left[left_key[i]] = right[right_key[i]]``; ``left_width`` is the number of
    left columns (the rest of ``columns`` are the right parent's)."""

    symbol = "⋈"

    def __init__(self, columns: tuple[str, ...], left_key: tuple[int, ...],
                 right_key: tuple[int, ...], kind: str = "inner", *, left_width: int,
                 cross: bool = False) -> None:
        super().__init__(columns, 2)
        if kind not in KINDS:
            raise ValueError(f"unknown join kind {kind!r}; kinds are {', '.join(KINDS)}")
        if len(left_key) != len(right_key):
            raise ValueError(f"join keys differ in length: {left_key} vs {right_key}")
        if not 0 < left_width < len(self.columns):
            raise ValueError(
                f"left_width {left_width} out of range for {len(self.columns)} columns"
            )
        right_width = len(self.columns) - left_width
        if any(not 0 <= c < left_width for c in left_key) or any(
                not 0 <= c < right_width for c in right_key):
            raise ValueError(f"join key out of range: {left_key} / {right_key}")
        self.left_key = tuple(left_key)
        self.right_key = tuple(right_key)
        self.join_kind = kind
        self.left_width = left_width
        # A cross product: the keys are the same constant on both sides (the planner adds
        # it), so every row of each side sits under one key. Computed like any join; the
        # flag tells materialization (both indexes full) and explain.
        self.cross = cross
        self.symbol = "⟕" if kind == "left" else "⋈"  # type: ignore[misc]
        self._nulls: Row = (None,) * right_width
        self._left_key_of = column_getter(self.left_key)
        self._right_key_of = column_getter(self.right_key)

    def side_indexes(self) -> dict[int, tuple[int, ...]]:
        return {0: self.left_key, 1: self.right_key}

    def resolve(self, col: int) -> list[tuple[int, int]]:
        inner = self.join_kind == "inner"
        if col < self.left_width:
            out = [(0, col)]
            if inner and col in self.left_key:  # equal to the right key column it joins
                out.append((1, self.right_key[self.left_key.index(col)]))
            return out
        j = col - self.left_width
        out = [(1, j)]
        if inner and j in self.right_key:
            out.append((0, self.left_key[self.right_key.index(j)]))
        return out

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        out = Output()
        if parent == 0:
            self._from_left(deltas, state, out)
        elif self.join_kind == "inner":
            self._from_right_inner(deltas, state, out)
        else:
            self._from_right_outer(deltas, state, out)
        return out

    def _from_left(self, deltas: list[Delta], state: StateView, out: Output) -> None:
        key_of, nulls = self._left_key_of, self._nulls
        outer = self.join_kind == "left"
        # One index lookup per key per batch (the index doesn't change within a batch).
        seen: dict[Row, list[Row] | None] = {}
        lookup = state.lookup
        emit = out.deltas.append
        for delta in deltas:
            row, sign = delta
            key = key_of(row)
            if None in key:
                if outer:
                    emit((row + nulls, sign))
                continue
            matches = seen.get(key, _UNSEEN)
            if matches is _UNSEEN:
                matches = seen[key] = lookup(1, key)
            if matches is None:
                out.misses.append(Miss(1, key, delta))
            elif len(matches) == 1:  # the common case: a key index, one row
                emit((row + matches[0], sign))
            elif matches:
                out.deltas.extend([(row + r, sign) for r in matches])
            elif outer:
                emit((row + nulls, sign))

    def _from_right_inner(self, deltas: list[Delta], state: StateView, out: Output) -> None:
        key_of = self._right_key_of
        seen: dict[Row, list[Row] | None] = {}
        lookup = state.lookup
        emit = out.deltas.append
        for delta in deltas:
            row, sign = delta
            key = key_of(row)
            if None in key:
                continue
            matches = seen.get(key, _UNSEEN)
            if matches is _UNSEEN:
                matches = seen[key] = lookup(0, key)
            if matches is None:
                out.misses.append(Miss(0, key, delta))
            elif len(matches) == 1:
                emit((matches[0] + row, sign))
            elif matches:
                out.deltas.extend([(left + row, sign) for left in matches])

    def _from_right_outer(self, deltas: list[Delta], state: StateView, out: Output) -> None:
        key_of, nulls = self._right_key_of, self._nulls
        lefts, rights = _Lookups(state, 0), _Lookups(state, 1)
        # Right rows per key as of the delta being processed: index + this batch so far.
        counts: dict[Row, int] = {}
        for delta in deltas:
            row, sign = delta
            key = key_of(row)
            if None in key:
                continue
            matches = lefts.get(key)
            if matches is None:
                out.misses.append(Miss(0, key, delta))
                continue
            if not matches:  # no left rows: nothing to join, now or later in this batch
                continue
            before = counts.get(key)
            if before is None:
                existing = rights.get(key)
                if existing is None:
                    out.misses.append(Miss(1, key, delta))
                    continue
                before = len(existing)
            counts[key] = after = before + sign
            if before == 0 and after > 0:  # first match: the padded rows go away
                out.deltas.extend([(left + nulls, -1) for left in matches])
            out.deltas.extend([(left + row, sign) for left in matches])
            if before > 0 and after == 0:  # last match gone: padded rows come back
                out.deltas.extend([(left + nulls, 1) for left in matches])

    def signature(self) -> Hashable:
        return ("join", self.join_kind, self.left_key, self.right_key, self.left_width,
                self.cross)

    def description(self) -> str:
        if self.cross:
            return f"{self.symbol}[cross product]"
        names = self.columns
        on = ", ".join(f"{names[a]} = {names[self.left_width + b]}"
                       for a, b in zip(self.left_key, self.right_key, strict=True))
        return f"{self.symbol}[{on}]"


# A lookup not made yet (None means a hole).
_UNSEEN: Any = object()


class _Lookups:
    """One index lookup per key per batch (the index doesn't change within a batch)."""

    __slots__ = ("state", "side", "seen")

    def __init__(self, state: StateView, side: int) -> None:
        self.state, self.side = state, side
        self.seen: dict[Row, Any] = {}

    def get(self, key: Row) -> list[Row] | None:
        try:
            return self.seen[key]
        except KeyError:
            rows = self.seen[key] = self.state.lookup(self.side, key)
            return rows
