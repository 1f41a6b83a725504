"""Eviction: holes on demand, under memory pressure, and after join misses.

Part of the executor (a mixin: all methods run on the executor thread under its lock).
Evicting a key turns it into a hole and evicts the same key of every state above that was
filled relying on it; evicting a pending key cancels that fill for the key. A join lookup
that misses an evict-on-miss index drops the update and evicts exactly the downstream keys
the update could have affected.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Row
from partialflow.server.graph import Node
from partialflow.server.state import State

if TYPE_CHECKING:
    pass

log = logging.getLogger("partialflow.executor")


class EvictionMixin:
    def _evict(self, st: State, fk: Row, *, reason: str = "evict") -> None:
        if st.mode == "full":
            return
        if fk in st.buckets:
            st.drop(fk)
            if st.node.view is not None:
                self._republish.add((st, fk))
            # partial_bytes sums the sizes recorded in the LRU; keys touched in this packet
            # but not yet recorded are skipped by _after_packet once they are holes.
            self.partial_bytes -= self.lru.pop((st.sid, fk), 0)
            self.counters["evictions"] += 1
            for v in st.node.users if st.node.view is not None else ():
                self.view_counters[v]["evictions"] += 1
        fill = st.pending.get(fk)
        if fill is not None:
            self._cancel(fill, fk)
        for d in st.dependents:
            self._evict(d, fk, reason=reason)

    def evict_key(self, reader_state: State, fk: Row) -> int:
        """Evict a view key and every partial state below it with the same key."""
        n = 0
        stack, seen = [reader_state], set()
        while stack:
            st = stack.pop()
            if st.sid in seen:
                continue
            seen.add(st.sid)
            if fk in st.buckets or fk in st.pending:
                n += st is reader_state
                self._evict(st, fk)
            stack.extend(st.below)
        return n

    def _evict_downstream(self, node: Node, pidx: int, row: Row) -> None:
        """A delta from parent ``pidx`` of ``node`` was dropped: evict every downstream key
        it could have affected (computable from the row's own columns)."""
        for st, fk in self._downstream_keys(node, pidx, row):
            if fk is None:
                log.warning("cannot compute key of %s from a dropped update; evicting all of it", st.label)
                for k in list(st.buckets) + list(st.pending):
                    self._evict(st, k)
            else:
                self._evict(st, fk)

    def _downstream_keys(self, node: Node, pidx: int, row: Row) -> list[tuple[State, Row | None]]:
        """The nearest states above ``node`` that a delta of ``row`` from parent ``pidx``
        reaches, each with the fill key it would touch (None when not computable)."""
        out: list[tuple[State, Row | None]] = []
        self._walk_known(node, pidx, {pc: row[pc] for pc in range(len(row))}, out, through=True)
        return out

    def _walk_known(self, node: Node, pidx: int, known: dict[int, Any], out: list, through: bool = False) -> None:
        st = node.own
        if st is not None and not through:
            out.append((st, self._key_from_known(st, node, pidx, known)))
            return
        if not through and pidx in node.sides and node.sides[pidx].mode != "full":
            side = node.sides[pidx]
            out.append((side, self._key_from_known(side, None, pidx, known)))
        mapped = {}
        for c in range(len(node.columns)):
            for p, pc in node.op.resolve(c):
                if p == pidx and pc in known:
                    mapped[c] = known[pc]
                    break
        for child, cidx in node.children:
            self._walk_known(child, cidx, mapped, out)

    @staticmethod
    def _key_from_known(st: State, node: Node | None, pidx: int, known: dict[int, Any]) -> Row | None:
        fk = []
        for c in st.partial_cols:
            if node is not None and node.view is None:
                srcs = [pc for p, pc in node.op.resolve(c) if p == pidx]
                c = srcs[0] if srcs else None
            if c is None or c not in known:
                return None
            fk.append(known[c])
        return tuple(fk)

    def _enforce_memory(self) -> None:
        if self.memory_limit is None:
            return
        pinned: list[tuple[tuple[int, Row], int]] = []
        while self.partial_bytes + self.full_bytes > self.memory_limit and self.lru:
            (sid, fk), size = self.lru.popitem()  # least recently used
            st = self.states.get(sid)
            if st is not None and self._pinned(st, fk):
                pinned.append(((sid, fk), size))
                continue
            self.partial_bytes -= size
            if st is not None:
                self.counters["memory_evictions"] += 1
                self._evict(st, fk, reason="memory")
        for key, size in pinned:  # back in (as recently used: a fill is relying on them)
            self.lru[key] = size

    def _pinned(self, st: State, fk: Row) -> bool:
        """Keys a fill in flight relies on are not evicted for memory: evicting them would
        cancel that fill, and under pressure fills would never complete."""
        return any(fk in d.pending for d in st.dependents)

    def touch(self, st: State, fk: Row) -> None:
        """A read hit: mark the key recently used (caller holds the lock)."""
        key = (st.sid, fk)
        if key in self.lru:
            self.lru[key]  # LRUCache moves it to the most recent end on access

