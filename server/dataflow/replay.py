"""Replaying a fill's held updates once its keys are filled, and the replay's scope.

When a fill's reply lands (``FillCoordinator.finish``), the updates it held (fill.py:
``HeldRows``, ``HeldNode``, ``HeldJoin``) go through the dataflow again in LSN order, as
batches of the same shape they first arrived in. While an *index fill*'s held updates
replay, only the keys that fill filled or unblocked may change, each only by updates
after the LSN it is exact at (``ReplayScope``): every other filled key was filled from a
snapshot that has the updates already. The rule for whether an update at an LSN may
change a key (``ReplayScope.changes``) is also what a dropped join update uses to spare
keys that have it (joinmiss.py, ``Evictor.evict_downstream``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import TYPE_CHECKING, Protocol

from partialflow.operators.base import Delta, Row
from partialflow.server.dataflow.access import CapturedAccess
from partialflow.server.dataflow.fill import Captured, Held, HeldJoin, HeldNode, HeldRows

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Node
    from partialflow.server.dataflow.state import State
    from partialflow.server.dataflow.stats import Stats

# Deltas arriving at a node: (node, parent index, deltas).
Items = list[tuple["Node", int, list[Delta]]]
# The keys an index fill's replay may change, each with the LSN it is exact at.
Scope = dict[tuple["State", Row], int]


class ReplayScope:
    """While an index fill's held updates replay: the keys it filled or unblocked, each
    with the LSN it is exact at (``keys``); None outside such a replay. Read by
    propagation for every batch it applies."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: Scope | None = None

    def changes(self, st: State, fk: Row, lsn: int) -> bool:
        """Whether an update at ``lsn`` may change key ``fk`` of ``st`` (the rules of
        ``Propagator.apply_batch``). Not a filled key outside the scope of an index fill
        whose held updates replay, or of it but exact at ``lsn`` already, and not a key
        pending on a fill whose snapshot has ``lsn``: their contents have the update.
        (Live writes come after every snapshot and outside replays: every key, for them.)"""
        if st.is_filled(fk):
            scope = self.keys
            return scope is None or lsn > scope.get((st, fk), lsn)
        fill = st.pending_fill(fk)
        return fill is None or lsn > fill.lsn


class Propagates(Protocol):
    """What a replay needs from propagation (propagate.py)."""

    def propagate(self, items: Items, lsn: int, captured: Captured | None = None) -> None: ...
    def apply_batch(self, st: State, deltas: list[Delta], lsn: int) -> None: ...


class ReplayWatcher(Protocol):
    """Subscriptions: told after the last replayed batch of each LSN."""

    @property
    def active(self) -> bool: ...
    def replayed(self, lsn: int) -> None: ...


class Replayer:
    """Replays held updates through ``propagation`` within ``scope``; ``watcher()``: the
    subscriptions to tell of each LSN replayed (None: none)."""

    def __init__(self, propagation: Propagates, scope: ReplayScope,
                 watcher: Callable[[], ReplayWatcher | None]) -> None:
        self.propagation = propagation
        self.scope = scope
        self.watcher = watcher

    def replay(self, held: list[Held], before: Callable[[int], None] | None = None,
               scope: Scope | None = None) -> None:
        """Apply a fill's held updates (in LSN order) now that its keys are filled.
        Consecutive updates held by one node from one input are one batch again, as when
        they first arrived. ``before(lsn)`` runs before each batch (gates, gating.py);
        ``scope``: the only filled keys the updates may change (an index fill's)."""
        self.scope.keys = scope
        subs = self.watcher()
        try:
            if subs is None or not subs.active:
                self._replay(held, before)
                return
            # Subscriptions learn each LSN's rows of the keys the fill landed on
            # (subscriptions.replayed): after the last batch of one LSN, before the gates
            # of the next.
            last: list[int] = []

            def marked(lsn: int) -> None:
                if last and lsn != last[0]:
                    subs.replayed(last[0])
                last[:] = [lsn]
                if before is not None:
                    before(lsn)

            self._replay(held, marked)
            if last:
                subs.replayed(last[0])
        finally:
            self.scope.keys = None

    def _replay(self, held: list[Held], before: Callable[[int], None] | None) -> None:
        for (lsn, kind, _, _), group in groupby(held, key=lambda h: h.batch_key()):
            if before is not None:
                before(lsn)
            items = list(group)
            if kind == "rows":  # one batch key: one state
                assert isinstance(items[0], HeldRows)
                self.propagation.apply_batch(items[0].state, [h.delta for h in items], lsn)
                continue
            first = items[0]
            assert isinstance(first, (HeldNode, HeldJoin))
            captured: Captured | None = None
            if isinstance(first, HeldJoin):  # one batch key: every item is a HeldJoin
                captured = {
                    k: v for h in items if isinstance(h, HeldJoin) for k, v in h.captured.items()
                }
            self.propagation.propagate([(first.node, first.parent, [h.delta for h in items])],
                                       lsn, captured)


class EvictsDownstream(Protocol):
    def evict_downstream(self, node: Node, pidx: int, row: Row,
                         changes: Callable[[State, Row], bool]) -> None: ...


def replay_join(node: Node, pidx: int, deltas: list[Delta], captured: Captured, lsn: int,
                scope: ReplayScope, evictor: EvictsDownstream, stats: Stats) -> list[Delta]:
    """Compute held join deltas now that the side they missed is filled. The side
    indexes outside the fill were captured when the deltas were held (they have moved
    on since), and the delta's own side was updated then, so it is not touched here."""
    out = node.op.on_input(pidx, deltas, CapturedAccess(node, captured))  # type: ignore[union-attr]
    for m in out.misses:  # the side was evicted meanwhile: drop, evict what it affects
        stats.count("join_misses")
        evictor.evict_downstream(node, pidx, m.delta[0],
                                 lambda st, fk: scope.changes(st, fk, lsn))
    return out.deltas
