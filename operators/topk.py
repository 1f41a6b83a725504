"""↑: the first k rows per group in a given order (ORDER BY ... LIMIT k per key).

Output columns are the input columns; the group columns are output columns too. Order:
the ``order`` keys with Spark's default NULL placement (NULLS FIRST ascending, NULLS LAST
descending), then every column ascending (NULLS FIRST) so that ties are broken the same
way every time, here and in the Spark plan. Rows equal in every column are interchangeable.

Each group keeps a bounded candidate list (``candidates`` distinct rows with
multiplicities, None = all) and its total row count; when deletions leave fewer than
min(k, total) rows kept while some are unseen, the group is exhausted (see
``candidates.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from partialflow.operators.base import Delta, GroupedOperator, Output, Row, StateView
from partialflow.operators.candidates import Candidates, descending
from partialflow.operators.grouped import by_group, column_getter
from partialflow.operators.sizes import row_size


class TopK(GroupedOperator):
    """Top ``k`` rows per ``group_by`` group by ``order`` = [(column, descending), ...]."""

    symbol = "↑"

    def __init__(self, columns: tuple[str, ...], group_by: tuple[int, ...],
                 order: list[tuple[int, bool]], k: int, candidates: int | None = None) -> None:
        super().__init__(columns, 1)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if candidates is not None and candidates < k:
            raise ValueError(f"candidates ({candidates}) must be at least k ({k})")
        self.group_by = tuple(group_by)
        self.order = [(int(c), bool(d)) for c, d in order]
        self.k = k
        self.candidates = candidates  # read at call time (see Aggregate)
        self._group_of = column_getter(self.group_by)
        self.sort_key = _sort_key(self.order, len(self.columns))

    def group_columns(self) -> tuple[int, ...]:
        return self.group_by

    def resolve(self, col: int) -> list[tuple[int, int]]:
        return [(0, col)]

    def input_group(self, parent: int, row: Row) -> Row:
        return self._group_of(row)

    def split(self, parent: int, deltas: list[Delta]) -> dict[Row, list[Delta]]:
        return by_group(deltas, self._group_of)

    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        return self.on_groups(parent, by_group(deltas, self._group_of), state)

    def on_groups(self, parent: int, groups: dict[Row, list[Delta]], state: StateView) -> Output:
        out = Output()
        key, k, cap = self.sort_key, self.k, self.candidates
        for group, batch in groups.items():
            old = state.own(group)
            cand = old.copy() if old is not None else Candidates()
            before = cand.best(k)
            for row, sign in batch:
                if sign > 0:
                    cand.insert(row, key, cap)
                else:
                    cand.delete(row, key)
            if cand.kept < min(k, cand.total):
                out.exhausted.append(group)
                continue
            out.writes[group] = cand if cand.total > 0 else None
            gone, came = Counter(before), Counter(cand.best(k))
            gone.subtract(came)
            for row, n in gone.items():
                out.deltas.extend([(row, -1 if n > 0 else 1)] * abs(n))
        return out

    def output_rows(self, group: Row, entry: Candidates) -> list[Row]:
        return entry.best(self.k)

    def load_entries(self, state_rows: list[Row]) -> dict[Row, Any]:
        """Rows ``(group values..., row..., multiplicity, group total)``: the group's best
        ``candidates`` distinct rows, each with its count, and the group's row count."""
        g, n = len(self.group_by), len(self.columns)
        pairs: dict[Row, list[tuple[Row, int]]] = {}
        totals: dict[Row, int] = {}
        for r in state_rows:
            group = tuple(r[:g])
            pairs.setdefault(group, []).append((tuple(r[g:g + n]), int(r[g + n])))
            totals[group] = int(r[g + n + 1])
        return {grp: Candidates.loaded(p, totals[grp], self.sort_key) for grp, p in pairs.items()}

    def entry_size(self, entry: Candidates) -> int:
        return entry.size(row_size)

    def signature(self) -> Hashable:
        return ("topk", self.group_by, tuple(self.order), self.k, self.candidates)

    def description(self) -> str:
        names = self.columns
        order = ", ".join(f"{names[c]}{' DESC' if d else ''}" for c, d in self.order)
        by = ", ".join(names[c] for c in self.group_by)
        return f"↑[{self.k} by {order}{' per ' + by if by else ''}]"


def _sort_key(order: list[tuple[int, bool]], width: int) -> Callable[[Row], tuple]:
    """row -> a tuple that sorts best first: the order keys, then all columns ascending."""
    parts = [(c, d) for c, d in order] + [(c, False) for c in range(width)]

    def key(row: Row) -> tuple:
        out = []
        for c, desc in parts:
            v = row[c]
            if desc:  # NULLS LAST
                out.append((True, 0) if v is None else (False, descending(v)))
            else:  # NULLS FIRST
                out.append((False, 0) if v is None else (True, v))
        return tuple(out)

    return key

