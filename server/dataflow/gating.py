"""Index fills and gates: a join delta that misses an evict-on-miss index waits for one
small fill instead of evicting what it affects.

Noria and ReadySet drop such a delta and evict every downstream key it could affect. Under a
steady stream that keeps evicting hot keys and cancelling their fills, so their reads
starve. Here the miss happens while the executor applies write L, i.e. at snapshot L-1 (the
last applied LSN), so:

* ``IndexFills.fill_for`` puts the missed index key (and the holes below it) into an
  *index fill* at snapshot L-1, one per index state and packet, issued when the packet
  ends; the executor holds the delta in it like any held update;
* ``IndexFills.gate`` *gates* the downstream keys the delta will reach: a filled key is
  blocked on the fill (its rows kept aside: readers wait, updates are held in LSN order);
  a key pending on another fill is blocked on this one once that fill lands;
* when the reply lands, the fill coordinator unblocks the keys and replays what was held,
  and ``Gates`` blocks keys of a landed fill on index fills still in flight, at the LSN
  they were gated at — answering the reads that may be answered there first, so a key
  gated again and again by a stream of misses still answers its reads after one fill.

An index fill that fails backs off (misses on that index then drop the delta and evict, as
before, for a while) and abandons what it gated: those keys become holes and their reads
fail with the error.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

from partialflow.operators.base import Row
from partialflow.server.dataflow.fill import Fill
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats

# After an index fill fails, misses on that index evict instead of fetching for this long,
# doubling per failure in a row, up to the maximum.
BACKOFF_MIN = 1.0
BACKOFF_MAX = 30.0

# A join delta's downstream keys: (state, fill key, or None when not computable).
Targets = list[tuple[State, Row | None]]


class GateHost(Protocol):
    applied_lsn: int

    def changed(self, st: State, fk: Row) -> None: ...


class IndexFills:
    def __init__(self, host: GateHost, stats: Stats, clock: Callable[[], float]) -> None:
        self.host = host
        self.stats = stats
        self.clock = clock
        # Index state sid -> its index fill made in this packet (issued when it ends).
        self.new: dict[int, Fill] = {}
        self._backoff: dict[int, tuple[float, float]] = {}  # sid -> (until, delay)

    def fill_for(
        self, side: State, fk: Row, closure: Callable[[State, Row], list[State] | None]
    ) -> Fill | None:
        """The index fill that fetches hole ``fk`` of ``side`` from the snapshot before the
        write being applied; None while backing off, or when a state below is pending or
        derivable from filled state (deriving mid-packet would see this write: the caller
        drops the delta and evicts instead)."""
        backoff = self._backoff.get(side.sid)
        if backoff is not None and self.clock() < backoff[0]:
            return None
        states = closure(side, fk)
        if states is None:
            return None
        if any(x.source is not None and x.source[0].is_filled(fk) for x in states):
            return None
        fill = self.new.get(side.sid)
        if fill is None:
            fill = Fill(requester=side, lsn=self.host.applied_lsn, started=self.clock(),
                        index=True)
            self.new[side.sid] = fill
        for x in states:
            fill.add(x, fk)
        return fill

    def take_new(self) -> list[Fill]:
        """This packet's index fills, to issue (roots set)."""
        out = list(self.new.values())
        self.new.clear()
        for fill in out:
            fill.roots = [x for x in fill.keys if x.source is None]
        return out

    def failed(self, fill: Fill) -> None:
        sid = fill.requester.sid
        _, delay = self._backoff.get(sid, (0.0, 0.0))
        delay = min(BACKOFF_MAX, max(BACKOFF_MIN, delay * 2))
        self._backoff[sid] = (self.clock() + delay, delay)
        self.stats.count("index_fill_failures")

    def succeeded(self, fill: Fill) -> None:
        self._backoff.pop(fill.requester.sid, None)

    # -- gating ------------------------------------------------------------------------
    def reaches_filled(self, targets: Targets) -> bool:
        """Whether any of a join delta's downstream keys (``downstream_keys``) is filled
        or pending (states above a hole are holes there too)."""
        for st, fk in targets:
            if st.mode == "full":
                return True
            if fk is None:
                if st.keys_filled or st.has_pending():
                    return True
            elif st.lookup(fk) != "hole":
                return True
        return False

    def covers(self, fill: Fill, targets: Targets) -> bool:
        """Whether each of ``targets`` is a hole or gated on ``fill`` already (gating
        it again would change nothing)."""
        for st, fk in targets:
            if st.mode == "full":
                continue  # never gated (as in ``_gate``)
            if fk is None:
                return False
            if st.lookup(fk) != "hole" and not ((st, fk) in fill.gated
                                                and _gated(fill, (st, fk))):
                return False
        return True

    def gate(self, fill: Fill, targets: Targets, lsn: int) -> None:
        """A join delta (LSN ``lsn``) is held by index fill ``fill``: gate every downstream
        key it could reach (``targets``, from ``downstream_keys``; all keys of a state
        where the key can't be computed from the row) at ``lsn - 1``."""
        for st, fk in targets:
            keys = [fk] if fk is not None else st.filled_keys() + st.pending_keys()
            for k in keys:
                self._gate(fill, st, k, lsn - 1)

    def _gate(self, fill: Fill, st: State, fk: Row, since: int) -> None:
        """Gate ``fk`` of ``st`` on ``fill`` from LSN ``since`` on: the fill's held updates
        after ``since`` must reach it before it is read at a later LSN."""
        key = (st, fk)
        if st.mode == "full" or (key in fill.gated and _gated(fill, key)):
            return  # gated already, from an earlier LSN
        status = st.lookup(fk)
        if status == "hole":  # updates are dropped there anyway; no read relies on it
            return
        fill.gated[key] = since
        if status == "hit":
            st.block(fk, fill)
            self.host.changed(st, fk)  # readers stop seeing it
        else:
            # Pending on a fill from a snapshot that may be later than ``fill``'s but is
            # at most ``since``: blocked on ``fill`` at ``since`` when that one lands.
            other = st.pending_fill(fk)
            assert other is not None
            if other is not fill:
                other.gates.setdefault(key, []).append((fill, since))
        self.stats.count("keys_gated")
        for d in st.dependents:  # filled relying on this key: they wait for the delta too
            self._gate(fill, d, fk, since)


def _gated(fill: Fill, key: tuple[State, Row]) -> bool:
    """Whether ``key`` is still gated on ``fill`` (it may have been evicted and filled
    again since: then it has the updates held until then, and is gated anew)."""
    st, fk = key
    other = st.pending_fill(fk)
    if other is fill:
        return True
    return other is not None and any(g is fill for g, _ in other.gates.get(key, ()))


class Gates:
    """The gates on a landed fill's keys, applied in LSN order while its held updates
    replay (``before`` is called with each replayed batch's LSN, then with None)."""

    def __init__(self, fill: Fill, ready: dict[tuple[State, Row], int], host: GateHost) -> None:
        self.fill = fill
        self.host = host
        self._heap: list[tuple[int, int, Fill, tuple[State, Row]]] = []
        n = 0
        for key in ready:
            for g, since in fill.gates.get(key, ()):
                self._heap.append((since, n, g, key))
                n += 1
        heapq.heapify(self._heap)

    def before(self, lsn: int | None) -> None:
        heap = self._heap
        while heap and (lsn is None or heap[0][0] < lsn):
            since, _, g, key = heapq.heappop(heap)
            self._apply(g, key, since)

    def _apply(self, g: Fill, key: tuple[State, Row], since: int) -> None:
        if g.dead:  # abandoned: it evicted the key (or landed and replayed into it)
            return
        st, fk = key
        status = st.lookup(fk)
        if status == "hole":
            return
        if status == "pending":  # blocked on an earlier gate: on this one after that
            other = st.pending_fill(fk)
            assert other is not None
            if other is not g:
                other.gates.setdefault(key, []).append((g, since))
            return
        # Every held update up to ``since`` has been replayed, and later ones have not:
        # the key is exact at ``since`` now. Reads that may be answered there are.
        waiters = self.fill.waiters.pop(key, None)
        if waiters:
            rows = st.bucket_rows(fk) if st.kind == "rows" else []
            later = []
            for w in waiters:
                if w.floor <= since:
                    w.deliver(fk, rows, since)
                else:
                    later.append(w)
            if later:
                g.waiters.setdefault(key, []).extend(later)
        g.gated[key] = since
        st.block(fk, g)
        self.host.changed(st, fk)
