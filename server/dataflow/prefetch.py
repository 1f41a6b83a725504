"""Index prefetch: when a read's fill lands, fetch the keys of the evict-on-miss join
indexes that the keys it filled depend on, so later dimension updates find them filled.

The shape it serves is the common one: a partial view keyed by a column of a join's *full*
side (a dimension, e.g. ``info(product, category)``) over an evict-on-miss index of the
other side (a fact table, e.g. ``visit`` keyed by ``product``). A read's fill of category C
computes C from Spark without touching the visit index, so the index stays a hole at C's
products. When a product of C then changes category, its update misses the index there
and gates both categories for an index fill — one Spark scan per move, each blocking the
readers of two categories (gating.py). Under a steady stream of moves that was the p99 of
the visits view's reads.

Noria fills the index on the way: its replay of C looks up each product in the visit index
and recursively upqueries the missing ones. Here the read's fill stays one Spark plan (its
latency is what the reader waits for), and when it lands the products C depends on — the
rows of the full side whose traced column equals C, known without Spark — that are holes
of the index go into one index fill at the executor's position, issued with the packet.
It gates nothing and no read waits for it; exactness is the index fill's own: the keys are
pending from its snapshot on, so updates to them are held and replayed like any other
(fills.py), and a dimension update that meets one of them while it is in flight is held
and gates as before, for a fill already running.

A downstream key that depends on more than ``MAX_KEYS_PER_KEY`` index keys is skipped (a
huge category would turn every read's fill into a large background scan); the keys
prefetched are counted as ``index_keys_prefetched``. An earlier attempt prefetched when a
*miss* gated a key instead (bc6bf3c, reverted): the gated reads then waited for the larger
fill, and large batches of such fills fell back to scanning the whole table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from partialflow.operators.base import Row
from partialflow.operators.join import Join
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.materialize import trace
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats

# A downstream key depending on more index keys than this is not prefetched.
MAX_KEYS_PER_KEY = 256


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
    def __init__(self, stats: Stats, *, enabled: bool = True) -> None:
        self.stats = stats
        self.enabled = enabled
        self._plans: dict[int, list[Plan]] = {}  # downstream state sid -> its plans

    def forget(self, states: list[State]) -> None:
        """Dropped states (a view dropped). Plans are cheap to rebuild and a plan of one
        view may name states shared with another: all of them go."""
        if states:
            self._plans.clear()

    def keys(self, filled: Iterable[tuple[State, Row]], most: int | None = None
             ) -> dict[State, list[Row]]:
        """Holes of evict-on-miss indexes that the just-filled ``filled`` keys depend
        on, per index state (none for a key depending on more than ``most``, by default
        MAX_KEYS_PER_KEY)."""
        most = MAX_KEYS_PER_KEY if most is None else most
        wanted: dict[Plan, set[Row]] = {}
        for st, fk in filled:
            for plan in self.plans(st):
                wanted.setdefault(plan, set()).add(fk)
        out: dict[State, dict[Row, None]] = {}
        for plan, fks in wanted.items():
            bucket = plan.full.bucket(())
            if bucket is None:
                continue
            cols, key_cols, miss = plan.cols, plan.key_cols, plan.miss
            found: dict[Row, dict[Row, None]] = {}
            for bag in bucket.values():
                for row in bag:
                    fk = tuple([row[c] for c in cols])
                    if fk in fks:
                        jk = tuple([row[c] for c in key_cols])
                        if None not in jk:
                            found.setdefault(fk, {})[jk] = None
            holes = out.setdefault(miss, {})
            for jks in found.values():
                if len(jks) <= most:
                    holes.update((jk, None) for jk in jks if miss.lookup(jk) == "hole")
        result = {m: list(ks) for m, ks in out.items() if ks}
        n = sum(len(ks) for ks in result.values())
        if n:
            self.stats.count("index_keys_prefetched", n)
        return result

    def plans(self, st: State) -> list[Plan]:
        """How the index keys that ``st``'s keys depend on are found (cached)."""
        plans = self._plans.get(st.sid)
        if plans is None:
            plans = []
            node = st.node
            if st.kind == "grouped" or node.view is not None:
                _walk(node, tuple(st.partial_cols), plans)
            self._plans[st.sid] = plans
        return plans


def dependents(plan: Plan, jk: Row) -> list[Row] | None:
    """The downstream keys (of the state ``plan`` was made for) that index key ``jk`` of
    ``plan.miss`` is joined into now: the full side's rows at ``jk`` give them. None when
    the full side is not indexed by the join key (they could only be found by a scan)."""
    full = plan.full
    if tuple(full.index_cols) != plan.key_cols:
        return None
    rows = full.rows_at(jk)
    if not rows:
        return []
    cols = plan.cols
    return [tuple([row[c] for c in cols]) for row in rows]


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
