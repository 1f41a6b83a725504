"""What subscriptions keep in memory: subscribed keys, the same key of every partial state
below them, and the join index keys they are joined from now (subscriptions.py).

The evictor never evicts a pinned key for memory (``Evictor.pins``) and asks ``depends``
about the rest. The index keys are not listed: which ones a subscribed key is joined from
changes with every write of the join's full side (a product moving to another category),
so the question is answered when the evictor reaches a key, from the full side's rows at
that join key (``prefetch.dependents``). Without it, memory pressure evicted them (they are
keyed by product, a subscribed view by category), and every later write of such a product
missed the index and gated the subscribed keys on an index fill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partialflow.operators.base import Row
from partialflow.server.dataflow.prefetch import Plan, dependents

if TYPE_CHECKING:
    from partialflow.server.dataflow.evictor import Evictor
    from partialflow.server.dataflow.prefetch import Prefetcher
    from partialflow.server.dataflow.state import State


class Pins:
    def __init__(self, evictor: Evictor, prefetcher: Prefetcher, by_key: dict) -> None:
        self.evictor = evictor
        self.prefetcher = prefetcher
        self.by_key = by_key  # the manager's (reader state, key) -> subscriptions
        # Index state sid -> (plan, subscribed reader state): how its keys are joined into
        # subscribed keys (prefetch.Plan); rebuilt when the subscribed views change.
        self._joined: dict[int, list[tuple[Plan, State]]] = {}
        self._joined_of: set[State] = set()

    def pin(self, st: State, fk: Row, delta: int) -> None:
        """Pin (un-pin) ``fk`` of the reader and of every partial state below it with the
        same key (evicting one of those would evict the reader's key with it)."""
        pins = self.evictor.pins
        stack, seen = [st], set()
        while stack:
            s = stack.pop()
            if s.sid in seen:
                continue
            seen.add(s.sid)
            key = (s.sid, fk)
            n = pins.get(key, 0) + delta
            if n > 0:
                pins[key] = n
            else:
                pins.pop(key, None)
            stack.extend(s.below)

    def pinned_bytes(self) -> int:
        states = self.evictor.states
        total = 0
        for sid, fk in self.evictor.pins:
            s = states.get(sid)
            if s is not None and s.mode != "full":
                total += s.size_of(fk)
        return total

    def plans(self, states: set[State]) -> None:
        """The subscribed reader states are ``states``: rebuild the plans if they changed."""
        if states == self._joined_of:
            return
        self._joined_of = states
        joined: dict[int, list[tuple[Plan, State]]] = {}
        for st in states:
            for plan in self.prefetcher.plans(st):
                joined.setdefault(plan.miss.sid, []).append((plan, st))
        self._joined = joined

    def depends(self, st: State, jk: Row) -> bool:
        """Whether key ``jk`` of index state ``st`` is joined into a subscribed key now
        (the evictor keeps it: evicting it would gate that key at its next write)."""
        plans = self._joined.get(st.sid)
        if not plans:
            return False
        by_key = self.by_key
        for plan, rst in plans:
            fks = dependents(plan, jk)
            if fks and any((rst, fk) in by_key for fk in fks):
                return True
        return False
