"""A fake upquery runner: answers fills from the Python model, when and how a test says.

It implements the dataflow's ``UpqueryRunner`` (``partialflow.server.dataflow.runner``):
``submit`` only records the fill; the test then delivers replies in any order, fails
them, or drops them (the fill's deadline must then fail its reads). With ``auto`` set it
answers at once (view creation, simple tests).

An answer is computed the way the Spark runner defines it, from the model's tables as of
the fill's snapshot LSN — whenever it is delivered. Each root state's rows come from
running the graph's own operators over the model's rows (every operator fed all of its
input as inserts), and grouped states are turned into the state-row layout the Spark
compiler produces (``server/upquery/operator_plans.py``) so ``load_entries`` reads them
as it reads Spark's.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from model import Model

from partialflow.operators.aggfuncs import special_kind
from partialflow.operators.aggregate import Aggregate
from partialflow.operators.base import GroupedOperator, Row
from partialflow.operators.distinct import Distinct
from partialflow.operators.join import Join
from partialflow.operators.topk import TopK
from partialflow.server.dataflow.bounds import MAX_VALUES
from partialflow.server.dataflow.fill import Fill
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.runner import BoundReply, FillResults, Reply
from partialflow.server.dataflow.state import State


@dataclass
class Submitted:
    fill: Fill
    reply: Reply


class FakeRunner:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.auto = False
        self.pending: list[Submitted] = []
        self.cancelled: set[int] = set()  # fids the executor gave up on
        # Key bound loads (table, column, lsn, reply) not answered yet: answered with the
        # fills' replies (deliver_all), from the model as of their LSN.
        self.bounds: list[tuple[str, str, int, BoundReply]] = []
        # Keep bound loads waiting (even when ``auto`` or settling) until the test calls
        # deliver_bounds().
        self.hold_bounds = False
        # Answer bound loads with the distinct values too (as the Spark runner does while
        # there are at most MAX_VALUES of them); False: MIN and MAX only.
        self.bound_values = True
        self._jobs = 0
        self._lock = threading.Lock()

    # -- UpqueryRunner -----------------------------------------------------------------
    @property
    def jobs(self) -> int:
        return self._jobs

    def start(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}  # the model measures no scans

    def submit(self, fill: Fill, reply: Reply) -> None:
        if fill.lsn > self.model.lsn:
            raise AssertionError(
                f"fill {fill} at a snapshot beyond the last write {self.model.lsn}"
            )
        if self.auto:
            reply(fill, self.answer(fill), None)
        else:
            self.pending.append(Submitted(fill, reply))

    def load_bound(self, table: str, column: str, lsn: int, reply: BoundReply) -> None:
        if lsn > self.model.lsn:
            raise AssertionError(f"key bound at a snapshot beyond the last write {self.model.lsn}")
        self.bounds.append((table, column, lsn, reply))
        if self.auto and not self.hold_bounds:
            self.deliver_bounds()

    def deliver_bounds(self) -> None:
        while self.bounds:
            table, column, lsn, reply = self.bounds.pop(0)
            c = self.model.table(table).column_names.index(column)
            # Every row ever inserted up to ``lsn``, deleted ones too, as Spark's answer
            # over the stored changes (a superset of the live rows' values is enough).
            values = [row[c] for at, t, row, d in self.model.history
                      if at <= lsn and t == table and d > 0 and row[c] is not None]
            distinct = sorted(set(values))
            reply(min(values, default=None), max(values, default=None),
                  distinct if self.bound_values and len(distinct) <= MAX_VALUES else None, None)

    def cancel(self, fill: Fill) -> None:
        self.cancelled.add(fill.fid)

    def close(self) -> None:
        self.pending.clear()

    # -- what tests do with submitted fills ----------------------------------------------
    def deliver(self, i: int = 0) -> None:
        s = self.pending.pop(i)
        s.reply(s.fill, self.answer(s.fill), None)

    def fail(self, i: int = 0, error: Exception | None = None) -> None:
        s = self.pending.pop(i)
        s.reply(s.fill, None, error or RuntimeError("injected: the scan failed"))

    def drop(self, i: int = 0) -> None:
        """Never answer (a lost reply): only the fill's deadline ends it."""
        self.pending.pop(i)

    def deliver_all(self) -> None:
        if not self.hold_bounds:
            self.deliver_bounds()
        while self.pending:
            self.deliver(0)

    # -- answers ---------------------------------------------------------------------------
    def answer(self, fill: Fill) -> FillResults:
        with self._lock:
            self._jobs += len(fill.roots)
        memo: dict[int, list[Row]] = {}
        return {
            st.sid: state_rows(st, fill.keys[st], self.model, fill.lsn, memo) for st in fill.roots
        }


def state_rows(
    st: State, keys: set[Row], model: Model, lsn: int, memo: dict[int, list[Row]]
) -> list[Row]:
    """What a runner answers for ``keys`` of ``st`` at ``lsn`` (see dataflow/runner.py)."""
    node = st.node
    if st.kind == "rows":
        side = 0 if node.view is not None else next(s for s, x in node.sides.items() if x is st)
        rows = node_rows(node.parents[side], model, lsn, memo)
        return [r for r in rows if _matches(st.fill_key_of_row(r), keys)]
    op = node.op
    assert isinstance(op, GroupedOperator)
    groups: dict[Row, list[Row]] = {}
    for r in node_rows(node.parents[0], model, lsn, memo):
        groups.setdefault(op.input_group(0, r), []).append(r)
    if isinstance(op, Aggregate) and not op.group_by and () in keys:
        groups.setdefault((), [])  # a global aggregate has its row even over no input
    out = []
    for group, rows in groups.items():
        if _matches(st.fill_key_of_index(group), keys):
            out += _state_rows_of(op, group, rows)
    return out


def _matches(fk: Row, keys: set[Row]) -> bool:
    return None not in fk and fk in keys  # NULL keys never match, as in SQL


def _state_rows_of(op: GroupedOperator, group: Row, rows: list[Row]) -> list[Row]:
    """One group's state rows in the Spark compiler's layout."""
    if isinstance(op, Aggregate):
        acc: list[Any] = []
        for f in op.funcs:
            if f.col is None:
                continue
            vals = [r[f.col] for r in rows if r[f.col] is not None]
            acc.append(len(vals))
            if f.name in ("SUM", "AVG"):
                finite = [v for v in vals if special_kind(v) == 0]
                acc.append(sum(finite) if vals else None)
                acc.append([sum(special_kind(v) == k for v in vals) for k in (1, 2, 3)])
            elif f.name in ("MIN", "MAX"):
                best = sorted(Counter(vals).items(), key=lambda p: f.key(p[0]))  # type: ignore[attr-defined]
                acc.append(best[: op.candidates] if op.candidates is not None else best)
        return [group + (len(rows),) + tuple(acc)]
    if isinstance(op, TopK):
        counts = sorted(Counter(rows).items(), key=lambda p: op.sort_key(p[0]))
        if op.candidates is not None:
            counts = counts[: op.candidates]
        return [group + row + (m, len(rows)) for row, m in counts]
    if isinstance(op, Distinct):
        return [group + (len(rows),)]
    raise AssertionError(f"no state rows for {op!r}")


class _FullAccess:
    """StateView over complete inputs: lookups never miss, no own state."""

    def __init__(self, index: dict[int, dict[Row, list[Row]]]) -> None:
        self.index = index

    def lookup(self, side: int, key: Row) -> list[Row]:
        return self.index[side].get(key, [])

    def own(self, group: Row) -> Any:
        return None


def node_rows(node: Node, model: Model, lsn: int, memo: dict[int, list[Row]]) -> list[Row]:
    """A node's output at ``lsn``: its operator fed every input row as an insert."""
    rows = memo.get(node.nid)
    if rows is not None:
        return rows
    if node.table is not None:
        rows = model.rows_at(node.table, lsn)
    else:
        op = node.op
        assert op is not None
        inputs = [node_rows(p, model, lsn, memo) for p in node.parents]
        if isinstance(op, GroupedOperator):
            out = op.on_input(0, [(r, 1) for r in inputs[0]], _FullAccess({}))
            rows = [r for g, e in out.writes.items() if e is not None for r in op.output_rows(g, e)]
            if isinstance(op, Aggregate) and not op.group_by and () not in out.writes:
                rows = op.output_rows((), op.initial_entry())
        elif isinstance(op, Join):
            right: dict[Row, list[Row]] = {}
            for r in inputs[1]:
                right.setdefault(tuple(r[c] for c in op.right_key), []).append(r)
            out = op.on_input(0, [(r, 1) for r in inputs[0]], _FullAccess({1: right}))
            rows = [r for r, _ in out.deltas]
        else:
            rows = []
            for i, rs in enumerate(inputs):
                rows += [r for r, _ in op.on_input(i, [(r, 1) for r in rs], _FullAccess({})).deltas]
    memo[node.nid] = rows
    return rows
