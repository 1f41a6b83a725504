"""Key bounds: proving a hole of an evict-on-miss join index empty without an upquery.

A join delta that misses an evict-on-miss index waits for an *index fill* (gating.py), and
the downstream keys it reaches are blocked until that Spark job lands. In the common
stream of Nexmark Q4 every new auction misses the bid-side index (no bid has seen it yet),
so every category is blocked behind one Spark job after another and its reads wait.

Most such keys are provably empty: a new auction's id is one no bid has carried yet. So
for an evict-on-miss index keyed by one BIGINT column copied from a base table (through
filter and project nodes only), the executor keeps what that column has held in every
row the table had at any LSN from ``since`` on: the distinct values themselves while
there are at most ``MAX_VALUES`` of them, and always their range ``[lo, hi]``. Both are
loaded once by the runner (over the table's stored changes at snapshot ``since``,
deleted rows included: a superset is enough) and grown by every insert the executor
applies after ``since``. A key not among the values (or outside the range, once there
are too many values to keep) has no rows at any LSN the executor has reached, so the
hole can be filled, empty, at once: the delta joins nothing, nothing is gated, no
upquery runs. The range alone covers ids that only grow; the values also cover ids
handed out from several ranges at once (one per producer), where a new id falls inside
the range.

Only exact where all of this holds, so only used there: single BIGINT key (Python ints
compare as Spark's longs do), no state below the index (it fills alone), a live write
(not a replay), and a range loaded from a snapshot the executor had reached when it
asked (every later insert is then seen here). Until the range lands, and if its load
fails, misses take the index-fill path as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from partialflow.operators.base import Row
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.packets import Call, Packet
from partialflow.server.dataflow.runner import UpqueryRunner
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats

log = logging.getLogger("partialflow.executor")

# (table, column index) -> (column name, column type), or None (the facade's column_info).
ColumnInfo = Callable[[str, int], "tuple[str, str] | None"]

# The most distinct values a bound keeps (a Python set of ints: about 5 MB at this size);
# past it, only the range.
MAX_VALUES = 100_000


@dataclass(eq=False)
class KeyBound:
    """The range of one base column's values since LSN ``since`` (see the module doc)."""

    state: State = field(repr=False)
    table: str
    column: int  # in the base table's rows
    name: str  # the column's name, for the runner's query
    since: int | None  # the snapshot it is loaded from; None: not asked for yet
    ready: bool = False
    failed: bool = False
    lo: int | None = None  # None (with hi): no value seen yet
    hi: int | None = None
    # Every value seen, while there are at most MAX_VALUES; None: the range only. Kept
    # from the start, so inserts applied while the load runs are in it.
    values: set[int] | None = field(default_factory=set, repr=False)

    def widen(self, value: Any) -> None:
        if value is None:  # NULL joins nothing
            return
        if not isinstance(value, int):  # not what a BIGINT column holds: never trust it
            self.failed = True
            self.ready = False
            return
        value = int(value)  # a bool is an int that equals 0 or 1 as a key
        if self.lo is None or value < self.lo:
            self.lo = value
        if self.hi is None or value > self.hi:
            self.hi = value
        if self.values is not None:
            self.values.add(value)
            self._cap()

    def widen_all(self, values: list[Any]) -> None:
        """``widen`` by each of ``values``; in C for the usual batch of plain ints."""
        if not values:
            return
        if len(values) == 1:  # a 1-row write: one widen, not the batch's five steps
            self.widen(values[0])
            return
        if not set(map(type, values)) <= {int}:
            for v in values:  # NULLs are skipped; anything else disables the bound
                self.widen(v)
            return
        self.widen(min(values))
        self.widen(max(values))
        if self.values is not None:
            self.values.update(values)
            self._cap()

    def _cap(self) -> None:
        if self.values is not None and len(self.values) > MAX_VALUES:
            self.values = None  # too many to keep: the range goes on alone

    def excludes(self, key: Row) -> bool:
        """Whether no row of the table has had ``key`` since ``since`` (ready only)."""
        if not self.ready or self.failed or len(key) != 1 or type(key[0]) is not int:
            return False
        v = key[0]
        if self.lo is None or v < self.lo or v > self.hi:  # type: ignore[operator]
            return True
        return self.values is not None and v not in self.values


class KeyBounds:
    """The bounds the executor keeps, per evict-on-miss index state (executor thread)."""

    def __init__(self, runner: UpqueryRunner, submit: Callable[[Packet], None],
                 stats: Stats, applied: Callable[[], int]) -> None:
        self.runner = runner
        self.applied = applied  # the executor's applied LSN
        self.stats = stats
        self.submit = submit  # the executor's queue: replies come back as Call packets
        self.by_state: dict[int, KeyBound] = {}  # state sid -> its bound
        self.by_table: dict[str, list[KeyBound]] = {}

    def watch(self, states: list[State], info: ColumnInfo, now: bool = True) -> None:
        """Bounds for the eligible states without one, loaded by the runner from the
        snapshot at the applied LSN (every later write passes ``on_write``): now, or
        (``now`` False: a restart from a checkpoint, which should run no Spark job it
        doesn't need) when the first miss that could use it comes."""
        for st in states:
            bound = self._new(st, info)
            if bound is not None and now:
                self._load(bound)

    def _load(self, bound: KeyBound) -> None:
        # Inserts before this LSN have widened the bound too: a superset does no harm.
        bound.since = self.applied()
        submit, loaded = self.submit, self.loaded

        def reply(lo: Any, hi: Any, values: list[Any] | None,
                  error: BaseException | None) -> None:
            # Applied on the executor thread, in order with the writes.
            submit(Call(lambda: loaded(bound, lo, hi, values, error), Future()))

        try:
            self.runner.load_bound(bound.table, bound.name, bound.since, reply)
        except Exception as e:  # only an optimisation: misses fetch their keys instead
            log.warning("key bound of %s could not start: %s", bound.state.label, e)
            self.loaded(bound, None, None, None, e)

    def _new(self, st: State, info: ColumnInfo) -> KeyBound | None:
        if st.sid in self.by_state or not _eligible(st):
            return None
        found = _base_column(st)
        if found is None:
            return None
        table, col = found
        ci = info(table, col)
        if ci is None or ci[1] != "BIGINT":
            return None
        bound = KeyBound(st, table, col, ci[0], None)
        self.by_state[st.sid] = bound
        self.by_table.setdefault(table, []).append(bound)
        return bound

    def loaded(self, bound: KeyBound, lo: Any, hi: Any, values: list[Any] | None,
               error: BaseException | None) -> None:
        """The runner's MIN and MAX at ``bound.since`` (both None for no rows), and the
        distinct values (None: too many)."""
        if self.by_state.get(bound.state.sid) is not bound:
            return  # forgotten meanwhile
        if error is not None:
            bound.failed = True
            self.stats.count("key_bounds_failed")
            return
        # Inserts applied since ``since`` are in the bound already (values and range).
        if values is None:
            bound.values = None  # too many values: the range only
        bound.widen(lo)
        bound.widen(hi)
        bound.widen_all(values or [])
        if bound.failed:
            self.stats.count("key_bounds_failed")
            return
        bound.ready = True
        self.stats.count("key_bounds_loaded")

    def on_write(self, table: str, rows: tuple[Row, ...], diffs: tuple[int, ...]) -> None:
        """Widen the bounds over ``table`` by a write's inserts (before it propagates)."""
        bounds = self.by_table.get(table)
        if not bounds:
            return
        for b in bounds:
            c = b.column
            b.widen_all([row[c] for row, d in zip(rows, diffs, strict=True) if d > 0])

    def excludes(self, st: State, key: Row) -> bool:
        b = self.by_state.get(st.sid)
        if b is None:
            return False
        if b.since is None:  # watched lazily: this miss asks for it (the next ones use it)
            self._load(b)
        return b.excludes(key)

    def fill_if_empty(self, st: State, fk: Row, changed: Callable[[State, Row], None]) -> bool:
        """For a live write's miss at hole ``fk`` of ``st``: if no row has had the key
        since the bound's snapshot, it is empty before this write; fill it, empty (where
        an index fill would have filled it), and return True. ``changed``: the executor's,
        so the key is accounted and its bytes counted."""
        if not self.excludes(st, fk):
            return False
        if st.bucket(fk) is None:  # not filled by an earlier delta of this batch
            st.fill(fk)
            changed(st, fk)
            self.stats.count("index_keys_bounded")
        return True

    def forget(self, st: State) -> None:
        b = self.by_state.pop(st.sid, None)
        if b is not None:
            self.by_table[b.table].remove(b)
            if not self.by_table[b.table]:
                del self.by_table[b.table]


def _eligible(st: State) -> bool:
    # An inner join: a delta that meets an empty side makes nothing (the executor relies
    # on it). Evict-on-miss implies it today; checked so that stays an invariant here.
    op = st.node.op
    return (
        st.mode == "miss" and st.kind == "rows" and st.node.view is None
        and isinstance(op, Join) and op.join_kind == "inner"
        and len(st.index_cols) == 1 and st.partial_cols == st.index_cols and not st.below
    )


def _base_column(st: State) -> tuple[str, int] | None:
    """The base table and column ``st``'s one index column is copied from, through filter
    and project nodes only; None otherwise."""
    node = st.node
    side = next(s for s, x in node.sides.items() if x is st)
    n: Node = node.parents[side]
    col = st.index_cols[0]
    while n.table is None:
        if n.op is None or n.view is not None or not isinstance(n.op, (Filter, Project)):
            return None
        src = [pc for p, pc in n.op.resolve(col) if p == 0]
        if not src:
            return None
        col, n = src[0], n.parents[0]
    return n.table, col
