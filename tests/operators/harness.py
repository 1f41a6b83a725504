"""The one harness every operator test uses (Noria's mock graph, in miniature).

``FakeState`` is an in-memory StateView: parent indexes (with holes) and the operator's
own entries. ``Harness`` seeds them, feeds one delta batch through ``on_input`` and then,
like the executor, applies the operator's writes and the batch to the parent's index;
it also keeps the operator's materialized output as a multiset and fails if a delta
retracts a row that isn't there. This is the one place a fake is allowed: operators are
pure, so their logic is tested without the executor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from partialflow.operators.base import Delta, GroupedOperator, Operator, Output, Row


class FakeState:
    """StateView over dicts: ``indexes[side][key] -> rows``, ``holes[side]``, ``entries``."""

    def __init__(self, op: Operator) -> None:
        self.key_cols = op.side_indexes()
        self.indexes: dict[int, dict[Row, list[Row]]] = {s: {} for s in self.key_cols}
        self.holes: dict[int, set[Row]] = {s: set() for s in self.key_cols}
        self.entries: dict[Row, Any] = {}
        self.lookups: list[tuple[int, Row]] = []

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        self.lookups.append((side, key))
        if key in self.holes[side]:
            return None
        return list(self.indexes[side].get(key, []))

    def own(self, group: Row) -> Any | None:
        return self.entries.get(group)

    def index_key(self, side: int, row: Row) -> Row:
        return tuple(row[c] for c in self.key_cols[side])


class Harness:
    """An operator with fake state around it; ``output`` is what it has emitted so far."""

    def __init__(self, op: Operator) -> None:
        self.op = op
        self.state = FakeState(op)
        self.output: Counter = Counter()

    # -- seeding ---------------------------------------------------------------------
    def seed(self, side: int, rows: Iterable[Row]) -> Harness:
        """Put rows into parent ``side``'s index (state before the next batch)."""
        for row in rows:
            self.state.indexes[side].setdefault(self.state.index_key(side, row), []).append(row)
        return self

    def hole(self, side: int, key: Row) -> Harness:
        """Make ``key`` a hole in parent ``side``'s index."""
        self.state.holes[side].add(key)
        self.state.indexes[side].pop(key, None)
        return self

    def fill(self, entries: dict[Row, Any]) -> Harness:
        """Own entries as an upquery would load them; their rows count as emitted."""
        assert isinstance(self.op, GroupedOperator)
        for group, entry in entries.items():
            self.state.entries[group] = entry
            self.output.update(self.op.output_rows(group, entry))
        return self

    def assume_output(self, *rows: Row) -> Harness:
        """Rows the operator emitted before (e.g. for seeded parent rows)."""
        self.output.update(rows)
        return self

    # -- feeding ---------------------------------------------------------------------
    def feed(self, parent: int, deltas: list[Delta]) -> Output:
        """One batch through on_input; then apply it as the executor would."""
        self.state.lookups.clear()
        out = self.op.on_input(parent, list(deltas), self.state)
        for group, entry in out.writes.items():
            if entry is None:
                self.state.entries.pop(group, None)
            else:
                self.state.entries[group] = entry
        for group in out.exhausted:
            self.state.entries.pop(group, None)
        self._apply_to_index(parent, deltas)
        for row, sign in out.deltas:
            self.output[row] += sign
            assert self.output[row] >= 0, f"retracted {row} which was not in the output"
            if not self.output[row]:
                del self.output[row]
        return out

    def insert(self, parent: int, *rows: Row) -> Output:
        return self.feed(parent, [(r, 1) for r in rows])

    def delete(self, parent: int, *rows: Row) -> Output:
        return self.feed(parent, [(r, -1) for r in rows])

    def _apply_to_index(self, side: int, deltas: list[Delta]) -> None:
        if side not in self.state.indexes:
            return
        for row, sign in deltas:
            key = self.state.index_key(side, row)
            if key in self.state.holes[side]:
                continue  # an update for a hole is dropped there
            bag = self.state.indexes[side].setdefault(key, [])
            if sign > 0:
                bag.append(row)
            else:
                bag.remove(row)

    # -- checking --------------------------------------------------------------------
    def rows(self) -> Counter:
        """The operator's current output as a multiset."""
        return Counter(+self.output)

    def entry_rows(self) -> Counter:
        """Output rows implied by the own entries (must equal ``rows()``)."""
        assert isinstance(self.op, GroupedOperator)
        return Counter(r for g, e in self.state.entries.items()
                       for r in self.op.output_rows(g, e))


def as_counter(deltas: list[Delta]) -> Counter:
    """Deltas as a signed multiset, for order-insensitive comparisons."""
    c: Counter = Counter()
    for row, sign in deltas:
        c[row] += sign
    return Counter({r: n for r, n in c.items() if n})
