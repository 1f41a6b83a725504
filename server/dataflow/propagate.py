"""Propagation: pushing a batch of deltas up the graph, node by node, in one packet.

The executor hands each write's deltas here (and ``Replayer`` each held batch). At each
state the ordering rules apply: a filled key takes the update, a pending key's fill holds
it when its LSN is after the fill's snapshot, a hole drops it (``apply_batch``,
``process``); a join lookup that misses goes to the join-miss handler (joinmiss.py). Keys
filled or changed are collected (``ChangedKeys``) for the end of the packet.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from partialflow.operators.base import Delta, Miss, Row
from partialflow.operators.grouped import by_group
from partialflow.server.dataflow.access import StateAccess
from partialflow.server.dataflow.fill import Captured, HeldNode, HeldRows
from partialflow.server.dataflow.replay import Items, ReplayScope, replay_join

if TYPE_CHECKING:
    from partialflow.server.dataflow.evictor import Evictor
    from partialflow.server.dataflow.graph import Graph, Node
    from partialflow.server.dataflow.state import State
    from partialflow.server.dataflow.stats import Stats

# fn(join node, parent index, miss, lsn): drop, fill or hold the update (joinmiss.py).
OnJoinMiss = Callable[["Node", int, Miss, int], None]


class ChangedKeys:
    """Keys filled or changed by the current packet: accounted (LRU, bytes) and
    republished (readers) when it ends. A dict, not a set: states hash by identity, and
    the LRU order must not depend on memory addresses (reproducible runs)."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: dict[tuple[State, Row], None] = {}

    def add(self, st: State, fk: Row) -> None:
        self.keys[(st, fk)] = None

    def take(self) -> dict[tuple[State, Row], None]:
        keys, self.keys = self.keys, {}
        return keys


def _parent_index(batch: tuple[int, list[Delta]]) -> int:
    return batch[0]


class Propagator:
    def __init__(self, graph: Graph, stats: Stats, evictor: Evictor, scope: ReplayScope,
                 changed: ChangedKeys, on_join_miss: OnJoinMiss) -> None:
        self.graph = graph
        self.stats = stats
        self.evictor = evictor
        self.scope = scope
        self.changed = changed
        self.on_join_miss = on_join_miss
        # One StateAccess per node, made once: it holds only the node (a packet made one
        # per node it reached).
        self._access: dict[int, StateAccess] = {}

    def propagate(self, items: Items, lsn: int, captured: Captured | None = None) -> None:
        """Push deltas up the graph in topological order (node ids are topological).
        ``captured``: the items are held join deltas being replayed (see joinmiss.py).

        This runs once per write, for every node a write reaches: at one row per write its
        own steps cost more than the operators' work, so they are plain loops and dict
        operations (no closures, generators or sorts of one batch)."""
        inbox: dict[int, list[tuple[int, list[Delta]]]] = {}
        heap: list[int] = []
        for start, pidx, deltas in items:
            if deltas:
                got = inbox.get(start.nid)
                if got is None:
                    inbox[start.nid] = [(pidx, deltas)]
                    heapq.heappush(heap, start.nid)
                else:
                    got.append((pidx, deltas))
        replayed = {node.nid for node, _, _ in items} if captured is not None else ()
        nodes, states_above, process = self.graph.nodes, self.graph.states_above, self.process
        while heap:
            nid = heapq.heappop(heap)
            node = nodes.get(nid)
            batches = inbox.pop(nid)
            if node is None:
                continue
            if nid not in replayed:
                for st in states_above(node):
                    if not st.holds_nothing():
                        break
                else:
                    # Nothing at or above this node is filled or being filled (a view
                    # nobody reads, say): every delta would be dropped at a hole further
                    # up, and a join miss here would evict only holes. Skip the work.
                    self.stats.count("deltas_skipped_idle", sum([len(d) for _, d in batches]))
                    continue
            if len(batches) > 1:
                batches.sort(key=_parent_index)  # stable: each parent's batches in order
            for pidx, deltas in batches:
                if nid in replayed:
                    out = replay_join(node, pidx, deltas, captured or {}, lsn, self.scope,
                                      self.evictor, self.stats)
                else:
                    out = process(node, pidx, deltas, lsn)
                if out:
                    for child, cidx in node.children:
                        cid = child.nid
                        got = inbox.get(cid)
                        if got is None:
                            inbox[cid] = [(cidx, out)]
                            heapq.heappush(heap, cid)
                        else:
                            got.append((cidx, out))

    def _new_access(self, node: Node) -> StateAccess:
        acc = self._access[node.nid] = StateAccess(node)  # node ids are never reused
        return acc

    def process(self, node: Node, pidx: int, deltas: list[Delta], lsn: int) -> list[Delta]:
        if node.view is not None:
            assert node.own is not None
            self.apply_batch(node.own, deltas, lsn)
            return []
        op = node.op
        assert op is not None
        st = node.own
        if st is not None:  # a grouped operator: only groups whose key is filled go in
            # Split once; every delta of a group shares its fill key, so one check per
            # group decides for all of them (each group's deltas keep their order).
            groups = op.split(pidx, deltas)  # type: ignore[attr-defined]
            scope = self.scope.keys
            if scope is None and not st.partial_cols and st.is_filled(()):
                passed = groups  # one fill key, filled: every group goes in
            else:
                if st.keys_shelved:  # those the batch changes come back in one read
                    st.unshelve([st.fill_key_of_index(g) for g in groups])
                passed = {}
                fk_of = st.fill_key_of_index
                for group, batch in groups.items():
                    fk = fk_of(group)
                    if st.is_filled(fk):
                        if scope is None or lsn > scope.get((st, fk), lsn):
                            passed[group] = batch
                    else:
                        fill = st.pending_fill(fk)
                        if fill is not None and lsn > fill.lsn:
                            for d in batch:
                                fill.hold(HeldNode(lsn, fk, node, pidx, d))
            if not passed:
                return []
            acc = self._access.get(node.nid) or self._new_access(node)
            out = op.on_groups(pidx, passed, acc)  # type: ignore[attr-defined]
            # Sizes are the state's own; a grouped state is no reader: nothing to republish.
            st.set_entries(out.writes, op.entry_size)  # type: ignore[attr-defined]
            for group in out.exhausted:
                self.stats.count("exhausted")
                self.evictor.evict(st, st.fill_key_of_index(group))
            return out.deltas
        acc = self._access.get(node.nid) or self._new_access(node)
        out = op.on_input(pidx, deltas, acc)
        for m in out.misses:  # joinmiss.py: drop, fill or hold the update
            self.on_join_miss(node, pidx, m, lsn)
        own_side = node.sides.get(pidx)
        if own_side is not None:
            self.apply_batch(own_side, deltas, lsn)
        return out.deltas

    def apply_batch(self, st: State, deltas: list[Delta], lsn: int) -> None:
        """Apply a rows state's deltas: to a filled key's bucket, held by a pending key's
        fill (LSN > its snapshot), dropped at a hole. By fill key: one check and one size
        update per key; keys have separate buckets and each key's deltas keep their order."""
        if st.holds_nothing():
            return  # every key is a hole: each delta would be dropped there
        scope = self.scope.keys
        # Only a reader's changed keys are listed (to be republished): sizes are the
        # state's own, and a write does not move a key in the LRU.
        changed = self.changed.keys if st.node.view is not None else None
        if scope is None:
            # Outside a replay, every filled key takes the update: the state applies
            # them in one call and hands back the rest.
            if changed is None:
                by_fk = st.apply_deltas(deltas, None)
            else:
                applied: list[Row] = []
                by_fk = st.apply_deltas(deltas, applied)
                for fk in applied:
                    changed[(st, fk)] = None
            for fk, batch in by_fk.items():
                fill = st.pending_fill(fk)
                if fill is not None and lsn > fill.lsn:
                    for d in batch:
                        fill.hold(HeldRows(lsn, fk, st, d))
            return
        by_fk = by_group(deltas, st.fill_key_of_row)
        for fk, batch in by_fk.items():
            bucket = st.bucket(fk)
            if bucket is not None:
                if lsn > scope.get((st, fk), lsn):
                    st.apply_rows(bucket, fk, batch)
                    if changed is not None:
                        changed[(st, fk)] = None
                continue
            fill = st.pending_fill(fk)
            if fill is not None and lsn > fill.lsn:
                for d in batch:
                    fill.hold(HeldRows(lsn, fk, st, d))
