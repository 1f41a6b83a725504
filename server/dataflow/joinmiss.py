"""A join update whose lookup found a hole in the other side's index: what becomes of it.

The executor hands each miss of a join's output here (``JoinMisses.on_miss``), in the packet of
the write at LSN ``lsn``. Outcomes 1 and 2 and the index fill of 3 are for a *live* write
that missed an evict-on-miss index (LSN after everything applied so far; a replayed held
update is not live). In order:

1. Nothing the update could reach is filled (a view nobody reads, say): it would be
   dropped at a hole further up anyway. Dropped, with no fill and no eviction
   (``join_misses_dropped``).
2. The missed index key is proven empty by the column's key bounds (bounds.py): filled
   empty at once, and the inner join makes nothing.
3. Otherwise the key is fetched by an *index fill* at the snapshot before this write
   (gating.py). The update is held by that fill (or by the fill the key is already
   pending on, in trace mode), with the other sides' rows captured as they are now, and
   an index fill gates the downstream keys it reaches, so their readers wait for one
   small fill rather than being evicted again and again.
4. Otherwise (a replayed update, a transaction over several tables, or index fills backing
   off after failures) the update
   can't be computed: it is dropped and every downstream key it could change is evicted
   (``Executor.changes``: not a key whose content has it already, such as one pending on
   a fill from a snapshot at or after ``lsn``); an evict-on-miss index then fills the key
   it missed (``join_misses``).

A transaction over several tables is one packet at one LSN, so an index fill started while
it propagates could only read the snapshot before it, which lacks the transaction's changes
that already went through in this packet and were dropped at the holes that fill would
fill (and the keys it would gate may have taken some of them already). Such a miss takes
outcome 4 instead: the fill it wants starts after the packet, at a snapshot that has the
whole transaction, and the keys the update could change are evicted. But while the
*first* table of a transaction goes through (``Executor.tx_first``) nothing of it is in
the dataflow yet but that table's own delta, exactly as for a single write: its misses
take outcome 3 (not the bounds of 2: they already count the later tables), and the later
tables' deltas are held by that fill and the keys it gates like any later write's. The
executor applies the tables that feed an evict-on-miss index last
(``feeds_miss_index``), so a miss of that index, made by the other side's delta, comes
first. Evicting instead evicted subscribed keys (pinned against memory eviction) at
nearly every such transaction, each eviction cancelled the refill of the one before,
and the subscription's LSN stood still for as long as the transactions went on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from partialflow.operators.base import Miss, Row
from partialflow.server.dataflow.access import capture
from partialflow.server.dataflow.downstream import downstream_keys
from partialflow.server.dataflow.fill import HeldJoin

if TYPE_CHECKING:
    from partialflow.server.dataflow.bounds import KeyBounds
    from partialflow.server.dataflow.evictor import Evictor
    from partialflow.server.dataflow.fills import FillCoordinator
    from partialflow.server.dataflow.graph import Graph, Node
    from partialflow.server.dataflow.replay import ReplayScope
    from partialflow.server.dataflow.state import State
    from partialflow.server.dataflow.stats import Stats


def feeds_miss_index(graph: Graph, table: str) -> bool:
    """Whether ``table``'s deltas reach an evict-on-miss join index (a join side in
    "miss" mode), the side that a transaction's other tables' deltas may miss."""
    base = graph.bases.get(table)
    stack = list(base.children) if base is not None else []
    seen: set[tuple[int, int]] = set()
    while stack:
        node, pidx = stack.pop()
        if (node.nid, pidx) in seen:
            continue
        seen.add((node.nid, pidx))
        side = node.sides.get(pidx)
        if side is not None and side.mode == "miss":
            return True
        stack.extend(node.children)
    return False


class Position(Protocol):
    """Where the executor is: the LSN applied, and whether a transaction over several
    tables is propagating (and its first table)."""

    @property
    def applied_lsn(self) -> int: ...
    @property
    def in_tx(self) -> bool: ...
    @property
    def tx_first(self) -> bool: ...


class JoinMisses:
    """Handles the misses of joins' lookups (executor thread), with the fills, key bounds
    and evictor it acts through; ``changed``: records a key filled in this packet."""

    def __init__(self, position: Position, fills: FillCoordinator, bounds: KeyBounds,
                 evictor: Evictor, stats: Stats, scope: ReplayScope,
                 changed: Callable[[State, Row], None]) -> None:
        self.position = position
        self.fills = fills
        self.bounds = bounds
        self.evictor = evictor
        self.stats = stats
        self.scope = scope
        self.changed = changed

    def on_miss(self, node: Node, pidx: int, m: Miss, lsn: int) -> None:
        """Drop, fill or hold join ``node``'s update ``m.delta`` (from input ``pidx``),
        whose lookup into side ``m.side`` found a hole at ``m.key``."""
        pos, fills = self.position, self.fills
        side = node.sides[m.side]
        fk = side.fill_key_of_index(m.key)
        fill = side.pending_fill(fk)
        # The keys above the delta could reach: computed once, for whichever needs them.
        targets = downstream_keys(node, pidx, m.delta[0]) if side.mode == "miss" else None
        in_tx, tx_first = pos.in_tx, pos.tx_first
        if fill is None and side.mode == "miss" and lsn > pos.applied_lsn and (
                not in_tx or tx_first):
            assert targets is not None
            if not fills.index.reaches_filled(targets):
                self.stats.count("join_misses_dropped")
                return
            if not in_tx and self.bounds.fill_if_empty(side, fk, self.changed):
                return
            fill = fills.index_fill(side, fk)
        if fill is not None and lsn > fill.lsn and (side.mode != "miss" or fill.index):
            # Hold the computation until the missed side is filled, with the other sides'
            # rows as they are now (the replay must not see their later updates, which
            # reach the pending keys on their own). The delta's own side is updated now
            # like any other: deltas from the other side meanwhile must see this one. In
            # trace mode the downstream keys are pending in the same fill; an index fill
            # gates them.
            keys = None
            if fill.index:
                keys = targets if targets is not None else downstream_keys(node, pidx,
                                                                           m.delta[0])
            # A key gated now is exact at the LSN before this one: after a transaction's
            # first table, a key not gated already may have taken some of the transaction.
            if keys is None or not in_tx or tx_first or fills.index.covers(fill, keys):
                fill.hold(HeldJoin(lsn, fk, node, pidx, m.delta,
                                   capture(node, m.side, m.key), m.side))
                if keys is not None:
                    fills.index.gate(fill, keys, lsn)
                return
        self.stats.count("join_misses")
        scope = self.scope
        self.evictor.evict_downstream(node, pidx, m.delta[0],
                                      lambda st, k: scope.changes(st, k, lsn))
        if side.mode == "miss" and fill is None:
            fills.want(side, fk, None)
