"""Eviction: holes on demand, under memory pressure, and after join misses.

The ``Evictor`` owns the registry of live states and the LRU of filled partial keys, and
holds the states' byte totals (each state keeps its own, as writes change them) to the
memory limit. All methods run on the executor thread under its lock.

Evicting a key turns it into a hole and evicts the same key of every state above that was
filled relying on it; evicting a pending key cancels that fill for the key (the fill
coordinator re-issues the reads waiting for it). A join lookup that misses an
evict-on-miss index drops the update and evicts exactly the downstream keys the update
could have affected.

With a disk tier (tier.py), the memory limit *shelves* least recently used keys instead:
they stay filled, on disk, and nothing above them is evicted. The tier's own limit makes
the least recently shelved keys holes. A key brought back from the tier by a write or a
join lookup comes back cold (the first to be shelved again); by a read, recent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cachetools import LRUCache

from partialflow.operators.base import Row
from partialflow.server.dataflow.downstream import downstream_keys
from partialflow.server.dataflow.publish import Publisher
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats
from partialflow.server.dataflow.tier import Tier, TierError

if TYPE_CHECKING:
    from partialflow.server.dataflow.fills import FillCoordinator
    from partialflow.server.dataflow.graph import Node

log = logging.getLogger("partialflow.executor")


class Evictor:
    """``fills``: cancels the fill of a pending key evicted; ``depends``: whether a key
    not pinned is kept all the same (see ``depends`` below)."""

    def __init__(self, memory_limit: int | None, stats: Stats, publisher: Publisher,
                 fills: FillCoordinator, depends: Callable[[State, Row], bool],
                 tier: Tier | None = None) -> None:
        self.memory_limit = memory_limit
        self.tier = tier
        self.stats = stats
        self.publisher = publisher
        self.fills = fills
        self.states: dict[int, State] = {}
        # Filled partial keys (sid, fill key), least recently used first. Recency is what
        # readers do: a fill or a read hit makes a key recent, a write that changes it does
        # not (a key written to but never read is cold, and moving it would cost an LRU
        # update per changed key per packet). Bytes are the states' own (State.size_of,
        # State.memory_bytes): a write changes them there and nothing here.
        self._lru: LRUCache = LRUCache(maxsize=math.inf)
        # Keys brought back from the disk tier by writes and joins, not reads: in memory,
        # not in the LRU, shelved again before any key of it (oldest first); a read moves
        # one into the LRU.
        self._cold: dict[tuple[int, Row], None] = {}
        if tier is not None:
            tier.on_unshelve = self._unshelved
            tier.on_broken = self._tier_failed
        # (sid, fill key) -> how many subscribed reader keys rely on it (subscriptions.py):
        # never evicted for memory, as a subscriber would get a refill at every packet.
        self.pins: dict[tuple[int, Row], int] = {}
        # Keys pinned because of what they are joined into now (subscriptions.py: a join
        # index key a subscribed key's rows come through). Asked per key at eviction.
        self.depends = depends

    # -- registry ----------------------------------------------------------------------
    def register(self, states: list[State]) -> None:
        for st in states:
            self.states[st.sid] = st
            if self.tier is not None and st.mode != "full":
                st.tier = self.tier

    def unregister(self, states: list[State]) -> None:
        for st in states:
            self.states.pop(st.sid, None)

    @property
    def partial_bytes(self) -> int:
        """Bytes of every partial state's filled (and blocked) keys."""
        return sum([s.memory_bytes for s in self.states.values() if s.mode != "full"])

    @property
    def full_bytes(self) -> int:
        return sum([s.memory_bytes for s in self.states.values() if s.mode == "full"])

    @property
    def memory_bytes(self) -> int:
        return sum([s.memory_bytes for s in self.states.values()])

    # -- accounting (end of packet) ------------------------------------------------------
    def account(self, changed: Iterable[tuple[State, Row]]) -> None:
        """Enter the partial keys filled in this packet into the LRU (the most recently
        used), then evict least recently used keys until the memory limit holds.

        ``changed`` holds keys filled, evicted or blocked in this packet and reader keys
        writes changed; writes to other states' keys are not listed (their sizes are
        kept by the states, and a write does not move a key in the LRU)."""
        lru = self._lru
        for st, fk in changed:
            if st.mode != "full":
                key = (st.sid, fk)
                if key not in lru and st.in_memory(fk) and key not in self._cold:
                    lru[key] = None
        self.enforce_memory()

    def lru_sizes(self) -> dict[tuple[int, Row], int]:
        """(sid, fill key) -> the key's bytes, for every key in the LRU, for checks
        (cachetools iterates its keys in insertion order, not recency: eviction order
        shows in ``enforce_memory``). A key of a dropped state counts 0."""
        states = self.states
        return {(sid, fk): st.size_of(fk) if (st := states.get(sid)) is not None else 0
                for sid, fk in (*self._lru, *self._cold)}

    def touch(self, st: State, fk: Row) -> None:
        """A read hit: mark the key recently used."""
        self.touch_many(st, [fk])

    def touch_many(self, st: State, keys: list[Row]) -> None:
        """Read hits of ``keys`` (in the order read): mark them recently used, and the same
        keys of the partial states below that they were filled relying on (else the
        oldest of those, an aggregate's group say, would be evicted first and take the
        hot reader key with it)."""
        lru, stack, seen = self._lru, [st], set()
        while stack:
            s = stack.pop()
            if s.sid in seen:
                continue
            seen.add(s.sid)
            stack.extend(s.below)
            if s.mode == "full":
                continue  # the LRU holds partial keys only
            sid = s.sid
            cold = self._cold
            for fk in keys:
                try:
                    lru[(sid, fk)]  # LRUCache moves a key to the most recent end on access
                except KeyError:  # evicted since it was read, or back from the tier cold
                    if cold and (sid, fk) in cold:
                        del cold[(sid, fk)]
                        lru[(sid, fk)] = None

    def set_memory_limit(self, limit: int | None) -> None:
        self.memory_limit = limit
        self.enforce_memory()

    def enforce_memory(self) -> None:
        tier = self.tier
        if tier is not None:  # between packets: the rows of keys brought back go now
            try:
                tier.collect()
            except TierError:  # broken: its keys are holes already (on_broken)
                pass
        if self.memory_limit is None:
            return
        pinned: list[tuple[int, Row]] = []
        shelving: list[tuple[State, Row]] = []  # stored in the tier together, below
        total = self.memory_bytes
        cold = self._cold
        while total > self.memory_limit and (self._lru or cold):
            if cold:  # back from the tier for a write: shelved again first
                sid, fk = key = next(iter(cold))
                del cold[key]
            else:
                (sid, fk), _ = self._lru.popitem()  # least recently used
            st = self.states.get(sid)
            if st is not None and (_pinned(st, fk) or (sid, fk) in self.pins
                                   or self.depends(st, fk)):
                pinned.append((sid, fk))
                continue
            if st is None:
                continue
            self.stats.count("memory_evictions")
            if tier is None or tier.broken or _derived_leaf(st):
                total -= self.evict(st, fk)
            elif st.in_memory(fk):
                total -= st.size_of(fk)
                shelving.append((st, fk))
        for key in pinned:  # back in (as recently used: a fill is relying on them)
            self._lru[key] = None
        if shelving:
            self._shelve(shelving)
        if tier is not None and tier.bytes > tier.limit and not tier.broken:
            try:
                self._enforce_disk(tier)
            except TierError:  # broken: its keys are holes already (on_broken)
                pass

    # -- the disk tier -------------------------------------------------------------------
    def _shelve(self, keys: list[tuple[State, Row]]) -> None:
        """Move least recently used keys to the tier, in one write (holes if the tier
        refuses: it is broken then, and its keys are holes already)."""
        assert self.tier is not None
        try:
            refs = self.tier.put_many([st.to_shelve(fk) for st, fk in keys])
        except TierError:
            for st, fk in keys:
                self.evict(st, fk)
            return
        for (st, fk), ref in zip(keys, refs, strict=True):
            st.shelve(fk, ref)
            if st.node.view is not None:
                self.publisher.changed(st, fk)  # no longer published: a read brings it back

    def _unshelved(self, st: State, fk: Row, read: bool) -> None:
        """A key came back from the tier: into the LRU, a read's as the most recent, a
        write's or a join's at the cold end (``_cold``)."""
        key = (st.sid, fk)
        if st.node.view is not None:
            # Published again at the end of the packet (shelving unpublished it): else
            # every later read of the key, in memory now, would miss the lock-free path
            # and queue a Miss packet for the executor until a write changed it.
            self.publisher.changed(st, fk)
        if read:
            self._lru[key] = None
        else:
            self._cold[key] = None

    def _enforce_disk(self, tier: Tier) -> None:
        """Over the tier's limit: the least recently shelved keys (the tier's lowest rows)
        become holes, but not those a fill in flight relies on (as for memory)."""
        after = 0
        while tier.bytes > tier.limit:
            batch = tier.victims(after, 256)
            if not batch:
                return
            for ref, sid, fk in batch:
                after = ref
                st = self.states.get(sid)
                # Rows of keys brought back or dropped in this pass are still there.
                if st is None or st.shelved(fk) != ref or _pinned(st, fk):
                    continue
                tier.counters["evictions"] += 1
                self.evict(st, fk)
                if tier.bytes <= tier.limit:
                    return

    def _tier_failed(self) -> None:
        """The tier broke (tier.py): every shelved key becomes a hole, with what was
        filled relying on it."""
        for st in list(self.states.values()):
            for fk in st.shelved_keys():
                self.evict(st, fk)

    # -- evicting ------------------------------------------------------------------------
    def evict(self, st: State, fk: Row) -> int:
        """Make ``fk`` a hole in ``st`` and in every state above filled relying on it;
        returns the bytes released."""
        if st.mode == "full":
            return 0
        freed = 0
        if st.is_filled(fk) or st.is_blocked(fk):
            freed = st.mark_hole(fk)
            if st.node.view is not None:
                self.publisher.changed(st, fk)
            key = (st.sid, fk)
            self._lru.pop(key, None)
            self._cold.pop(key, None)
            self.stats.count("evictions")
            for v in st.node.users if st.node.view is not None else ():
                self.stats.count_view(v, "evictions")
        fill = st.pending_fill(fk)
        if fill is not None:
            self.fills.cancel(fill, st, fk)
        for d in st.dependents:
            freed += self.evict(d, fk)
        return freed

    def evict_key(self, reader_state: State, fk: Row) -> int:
        """Evict a view key and every partial state below it with the same key; returns
        1 if the reader's key was filled or pending, else 0."""
        n = 0
        stack, seen = [reader_state], set()
        while stack:
            st = stack.pop()
            if st.sid in seen:
                continue
            seen.add(st.sid)
            if st.lookup(fk) != "hole":
                n += st is reader_state
                self.evict(st, fk)
            stack.extend(st.below)
        return n

    def forget(self, st: State) -> None:
        """A dropped state: every partial key becomes a hole (and leaves the LRU)."""
        if st.mode != "full":
            for fk in st.filled_keys():
                self.evict(st, fk)

    def evict_downstream(self, node: Node, pidx: int, row: Row,
                         changes: Callable[[State, Row], bool]) -> None:
        """A delta from parent ``pidx`` of ``node`` was dropped: evict every downstream key
        it could have affected (computable from the row's own columns). ``changes``: the
        executor's rule for whether the delta would change a key (a key whose content
        already has it is left alone: evicting a pending one would cancel its fill)."""
        for st, fk in downstream_keys(node, pidx, row):
            if fk is not None and not changes(st, fk):
                continue
            if fk is None:
                log.warning(
                    "cannot compute key of %s from a dropped update; evicting all of it", st.label
                )
                for k in st.filled_keys() + st.pending_keys():
                    self.evict(st, k)
            else:
                self.evict(st, fk)


def _derived_leaf(st: State) -> bool:
    """A state whose keys become holes rather than shelved: derived in Python from a
    grouped state below (a view's reader over its aggregate: ``State.source``) with
    nothing above it. A read derives its key again from the source's (shelved or not)
    without Spark, and a write pays one trip to the disk for the aggregate's key, not
    two."""
    return st.source is not None and not st.dependents


def _pinned(st: State, fk: Row) -> bool:
    """Keys a fill in flight relies on, and keys blocked on an index fill, are not evicted
    for memory: evicting them would cancel that fill, and under pressure fills would never
    complete."""
    return st.is_blocked(fk) or any(d.is_pending(fk) for d in st.dependents)
