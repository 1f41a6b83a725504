"""Index prefetch: when a live join miss gates downstream keys, fetch in the same index fill
the other keys of the evict-on-miss index those downstream keys depend on.

The shape it serves is the common one: a partial view keyed by a column of a join's *full*
side (a dimension, e.g. ``info(product, category)``) over an evict-on-miss index of the
other side (a fact table, e.g. ``visit`` keyed by ``product``). A dimension update (a
product changing category) misses the fact index at that product and gates the categories
it touches until an index fill lands (gating.py). Under a stream of such updates the same
categories are gated again and again, each time for one Spark job. The products a
category depends on are known without Spark: they are the rows of the full side whose
traced column equals the category. Fetching all of them with the first miss — one index
fill, the same Spark scan — makes later updates of those products hits.

Each (index, downstream key) is prefetched once (``_done``): a key evicted later is
fetched again by its own miss. Exactness is the index fill's: the prefetched keys are
pending from the fill's snapshot on, so updates to them are held and replayed like any
other (fills.py, gating.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from partialflow.operators.base import Row
from partialflow.operators.join import Join
from partialflow.server.dataflow.gating import Targets
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.materialize import trace
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats

# A downstream key depending on more index keys than this is not prefetched: the gated
# reads wait for the fill that carries the prefetch, so it must stay small.
MAX_KEYS_PER_KEY = 256
# Remembered (index, downstream key) pairs at most; beyond, the memory starts over (a
# repeated prefetch costs one scan of the full side, nothing else).
MAX_DONE = 100_000


@dataclass(frozen=True)
class Plan:
    """How ``miss``'s keys for a downstream key are found: rows of ``full`` (the join's
    other side, full state) whose ``cols`` equal the downstream key give ``miss``'s fill
    key at ``key_cols``."""

    full: State
    cols: tuple[int, ...]
    key_cols: tuple[int, ...]
    miss: State


class Prefetcher:
    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self._plans: dict[int, list[Plan]] = {}  # downstream state sid -> its plans
        self._done: set[tuple[int, int, Row]] = set()  # (index sid, state sid, key)

    def forget(self, states: list[State]) -> None:
        """Dropped states (a view dropped): their plans go."""
        for st in states:
            self._plans.pop(st.sid, None)

    def keys(self, miss: State, targets: Targets) -> list[Row]:
        """Holes of ``miss`` that ``targets`` (downstream keys just gated on a fill of
        ``miss``) depend on, each downstream key once."""
        wanted: dict[Plan, set[Row]] = {}
        for st, fk in targets:
            if fk is None or st.lookup(fk) == "hole":
                continue  # nothing reads a hole: no use fetching what it depends on
            for plan in self._plans_of(st):
                if plan.miss is not miss:
                    continue
                mark = (miss.sid, st.sid, fk)
                if mark in self._done:
                    continue
                if len(self._done) >= MAX_DONE:
                    self._done.clear()
                self._done.add(mark)
                wanted.setdefault(plan, set()).add(fk)
        out: dict[Row, None] = {}
        for plan, fks in wanted.items():
            bucket = plan.full.bucket(())
            if bucket is None:
                continue
            cols, key_cols = plan.cols, plan.key_cols
            found: dict[Row, dict[Row, None]] = {}
            for bag in bucket.values():
                for row in bag:
                    fk = tuple([row[c] for c in cols])
                    if fk in fks:
                        jk = tuple([row[c] for c in key_cols])
                        if None not in jk and miss.lookup(jk) == "hole":
                            found.setdefault(fk, {})[jk] = None
            for jks in found.values():
                if len(jks) <= MAX_KEYS_PER_KEY:
                    out.update(jks)
        if out:
            self.stats.count("index_keys_prefetched", len(out))
        return list(out)

    def _plans_of(self, st: State) -> list[Plan]:
        plans = self._plans.get(st.sid)
        if plans is None:
            plans = []
            node = st.node
            if st.kind == "grouped" or node.view is not None:
                _walk(node, tuple(st.partial_cols), plans)
            self._plans[st.sid] = plans
        return plans


def _walk(node: Node, req: tuple[int, ...], out: list[Plan]) -> None:
    """Plans below ``node`` for a key at columns ``req`` of its output (a reader's rows
    are its parent's)."""
    if node.op is None and node.view is None:
        return  # a base table
    for i, parent in enumerate(node.parents):
        mapped = req if node.view is not None else trace(node.op, req, i)  # type: ignore[arg-type]
        if mapped is None:
            continue
        op = node.op
        if isinstance(op, Join) and len(node.parents) == 2:
            full, miss = node.sides.get(i), node.sides.get(1 - i)
            key_cols = op.left_key if i == 0 else op.right_key
            miss_key = op.right_key if i == 0 else op.left_key
            if (full is not None and miss is not None and full.mode == "full"
                    and miss.mode == "miss" and tuple(miss.partial_cols) == tuple(miss_key)
                    and full.partial_cols == ()):
                out.append(Plan(full, mapped, tuple(key_cols), miss))
        _walk(parent, mapped, out)
