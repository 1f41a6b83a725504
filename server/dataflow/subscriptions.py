"""Change subscriptions: a stream of a view's changes for chosen keys, exact at each LSN.

A subscription to keys K of a view first gets every key's rows at one LSN (a *snapshot*),
then, at every packet end where something changed, the difference for each changed key
(rows inserted, rows deleted) at the LSN the packet left the dataflow at.

Why differences of whole keys, not forwarded deltas: the executor already knows at each
packet end which reader keys changed (the publisher republishes exactly those), and every
*filled* reader key is exact at the applied LSN then (the same cut lock-free reads rely
on). So the manager keeps, per subscription and key, the rows it last sent, and sends the
multiset difference of the key's current rows against them. An eviction (a join miss, an
exhausted MIN/MAX candidate set, an explicit evict) turns the key into a hole; the manager
asks for its refill like a read miss and, once filled, sends the difference: a
correction, never a gap, and never a row counted twice.

Consistent cuts only: every LSN a subscriber is told (snapshot, change batch, heartbeat)
is one at which *all* of its keys' rows as reconstructed are exactly the view's answer, so
any of them is a valid point to resume from. While a key is not readable (a hole, pending
on a fill, or blocked on an index fill, gating.py) nothing past the last packet end where
it was is sent; the manager records where each key's rows are known (cuts.py: up to
then, and again from the snapshot of the fill that brings it back, through the updates
that fill replays) and sends one batch at the latest LSN where all of them are known. It
used to wait for a packet end where every key was readable: under a stream of refills of
one key after another (MAX candidates running out) there was none, and the subscription's
LSN stood still for as long as the stream lasted. Holes of one subscription
are refilled in rounds (``_defer``) so that each landing moves its cut.
The price that remains: a key kept blocked delays the others' changes by about one upquery
(docs/subscriptions-liveness.md).

Rows are compared and sent as a read presents them (``reads.present``: ORDER BY/LIMIT
applied, hidden columns removed), so a subscriber's rows equal a lookup's.

Comparing a whole key at every packet end that changed it cost O(key) per write (a view
subscribed whole, with 100,000 rows: 58 ms per 100-row write). So the reader state logs
the net change of each subscribed key's rows (``State.watch``), and the difference is
computed from that log when the view has no LIMIT and no empty-group row (a multiset
difference is blind to ORDER BY; hidden columns are dropped from the logged rows as
from the key's). A key that moved (filled again, blocked, evicted) or a state with an
anomaly gives no log: that key is compared whole, as before.

Subscribed keys (and the same key of every partial state below the reader) are pinned
against memory eviction (``Evictor.pins``), and so are the keys of evict-on-miss join
indexes they are joined from now (``depends``: the visit index at the products of a
subscribed category), which are fetched as soon as a subscribed key is readable
(``FillCoordinator.prefetch``). Without that, memory pressure evicted those index keys
(they are keyed by product, not by category, so the pins above missed them); every
later write of such a product then missed the index and gated the subscribed keys on an
index fill, and with a steady stream of writes some key of the subscription was always
gated, so no packet end had them all readable: no batch, the heartbeat's LSN frozen, for
as long as the writes went on. The executor thread runs ``after_packet``; the
streaming threads only take events from each ``Subscription``'s bounded queue.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from typing import TYPE_CHECKING, Protocol

from partialflow.operators.base import Row
from partialflow.server.dataflow import cuts
from partialflow.server.dataflow.cuts import NONE as _NONE
from partialflow.server.dataflow.cuts import latest_cut
from partialflow.server.dataflow.fill import Waiter
from partialflow.server.dataflow.meter import BUCKET_OVERHEAD
from partialflow.server.dataflow.pins import Pins
from partialflow.server.dataflow.reads import present, visible
from partialflow.server.dataflow.subscription import (
    DEFAULT_MAX_BUFFERED,
    Bag,
    Event,
    KeyChange,
    Subscription,
)
from partialflow.server.errors import ResourceExhausted, Unavailable

if TYPE_CHECKING:
    from partialflow.server.dataflow.evictor import Evictor
    from partialflow.server.dataflow.fills import FillCoordinator
    from partialflow.server.dataflow.state import State
    from partialflow.server.sql.planner import ViewPlan

log = logging.getLogger("partialflow.subscriptions")

# A subscribed key's join index keys are fetched when it becomes readable if it depends
# on at most this many (a read's fill stops at prefetch.MAX_KEYS_PER_KEY; a subscribed
# key is read at every write, so each index key it misses costs an index fill and a gate).
PREFETCH_MOST = 10_000
# A subscribed hole waits at most this long (seconds) for the subscription's other keys
# being filled before its own refill goes out (refills in rounds: cuts.py).
DEFER_MAX = 1.0



__all__ = ["DEFAULT_MAX_BUFFERED", "Event", "Subscription", "SubscriptionManager"]


class SubscriptionHost(Protocol):
    """What the manager needs from the executor: the fills it asks refills and prefetches
    of, the evictor whose pins and memory limit it keeps to, and its clock and wake-ups."""

    @property
    def fills(self) -> FillCoordinator: ...
    @property
    def evictor(self) -> Evictor: ...
    def clock(self) -> float: ...
    def wake_at(self, when: float) -> None: ...


class SubscriptionManager:
    """Per subscribed (reader state, key), its subscriptions; run at every packet end."""

    def __init__(self, executor: SubscriptionHost) -> None:
        self.ex = executor
        self.lock = threading.Lock()
        self.subs: dict[int, Subscription] = {}  # id -> subscription
        self.by_key: dict[tuple[State, Row], list[Subscription]] = {}
        self.waiting: set[tuple[State, Row]] = set()  # subscribed keys not readable
        # The last refill asked per subscribed key (a read's waiter: it carries the error).
        self.refills: dict[tuple[State, Row], Waiter] = {}
        self.starting: set[Subscription] = set()
        self._dropped: list[Subscription] = []
        self.packet_lsn = 0  # the LSN of the last packet end (under the lock)
        self.pins = Pins(executor.evictor, executor.fills.prefetcher, self.by_key)
        self.deferred: dict[tuple[State, Row], float] = {}  # hole -> when first deferred
        # Subscribed keys a fill landed on in this packet: their held updates replay (cuts.py
        # adds them, the packet end clears them).
        self.replaying: dict[tuple[State, Row], None] = {}
        # Recent packet-end LSNs: a subscription's cut must be one (cuts.py).
        self._ends: deque[int] = deque(maxlen=4096)
        self.ends_set: set[int] = set()

    @property
    def active(self) -> bool:
        return bool(self.subs)

    def stats(self) -> dict[str, int]:
        return {"subscriptions": len(self.subs), "subscribed_keys": len(self.by_key)}

    # -- adding and removing (executor thread) ----------------------------------------------
    def add(self, sub: Subscription, memory_limit: int | None) -> None:
        """Register ``sub`` (on the executor thread): pin its keys, ask for the holes."""
        st = sub.reader.state
        new = [k for k in sub.keys if (st, k) not in self.by_key]
        if memory_limit is not None:
            need = (self.pins.pinned_bytes() + len(new) * BUCKET_OVERHEAD
                    + self.ex.evictor.full_bytes)
            if need > memory_limit:
                raise ResourceExhausted(
                    f"subscribing to {len(sub.keys)} key(s) of view {sub.view!r} needs at least "
                    f"{need} bytes pinned, more than the memory limit of {memory_limit} bytes")
        self.subs[id(sub)] = sub
        for k in sub.keys:
            self.by_key.setdefault((st, k), []).append(sub)
            if len(self.by_key[(st, k)]) == 1:
                self.pins.pin(st, k, +1)
                st.changelog.watch(k)
        self.starting.add(sub)
        sub.unready = set(sub.keys)
        self.waiting.update((st, k) for k in sub.keys)
        self.pins.plans({sub.reader.state for sub in self.subs.values()})

    def remove(self, sub: Subscription) -> None:
        """Unregister (executor thread): the stream ended or the client went away."""
        if self.subs.pop(id(sub), None) is None:
            return
        st = sub.reader.state
        for k in sub.keys:
            subs = self.by_key.get((st, k))
            if subs is None:
                continue
            subs.remove(sub)
            if not subs:
                del self.by_key[(st, k)]
                self.waiting.discard((st, k))
                self.deferred.pop((st, k), None)
                self.refills.pop((st, k), None)
                self.pins.pin(st, k, -1)
                st.changelog.unwatch(k)
        self.starting.discard(sub)
        self.pins.plans({sub.reader.state for sub in self.subs.values()})

    def drop(self, sub: Subscription) -> None:
        """A subscription ended by the manager (under the lock): removed after the packet."""
        self._dropped.append(sub)

    def forget(self, states: list[State]) -> None:
        """States of a dropped view: its subscriptions end."""
        gone = {id(s) for s in states}
        with self.lock:
            for sub in list(self.subs.values()):
                if id(sub.reader.state) in gone:
                    sub._end(Unavailable(f"view {sub.view!r} was dropped"), sub.cut_lsn())
        self._remove_dropped()

    def close(self) -> None:
        with self.lock:
            for sub in list(self.subs.values()):
                sub._end(Unavailable("the server is shutting down"), sub.cut_lsn())
        self._remove_dropped()

    def _remove_dropped(self) -> None:
        dropped, self._dropped = self._dropped, []
        for sub in dropped:
            self.remove(sub)

    # -- the packet end (executor thread, under the executor's lock) ------------------------
    def after_packet(self, changed: list[tuple[State, Row]], lsn: int) -> None:
        """``changed``: reader keys republished by this packet; ``lsn``: where it left
        the dataflow. Queue what changed for every subscription whose keys are all
        readable; ask for refills of subscribed holes."""
        try:
            self._after_packet(changed, lsn)
        except Exception as e:  # never let a subscription bug break publishing (reads)
            log.exception("subscriptions failed at LSN %d", lsn)
            with self.lock:
                for sub in list(self.subs.values()):
                    sub._end(Unavailable(f"subscription failed: {e}"), sub.cut_lsn())
            self._remove_dropped()

    def _after_packet(self, changed: list[tuple[State, Row]], lsn: int) -> None:
        touched: set[Subscription] = set(self.starting)
        waiting = self.waiting
        for key in changed:
            subs = self.by_key.get(key)
            if subs:
                waiting.add(key)  # re-checked below (filled, or not readable any more)
                for sub in subs:
                    sub.dirty.add(key[1])
                    touched.add(sub)
        asked = False
        failed: list[tuple[tuple[State, Row], Exception]] = []
        readable: list[tuple[State, Row]] = []
        for key in list(waiting):
            st, fk = key
            subs = self.by_key.get(key)
            if not subs:
                waiting.discard(key)
                continue
            if st.is_filled(fk):
                waiting.discard(key)
                self.refills.pop(key, None)
                self.deferred.pop(key, None)
                readable.append(key)
                for sub in subs:
                    if fk in sub.unready:
                        sub.unready.discard(fk)
                        sub.dirty.add(fk)
                    touched.add(sub)
                continue
            for sub in subs:
                if fk not in sub.unready:
                    sub.unready.add(fk)
                    sub.dirty.add(fk)
                    touched.add(sub)
            if st.lookup(fk) != "hole" or fk in self.ex.fills.wanted.get(st, {}):
                continue  # pending on a fill, or blocked: it comes back filled
            if self._defer(key, subs):
                continue
            self.deferred.pop(key, None)
            w = self.refills.get(key)
            if w is not None and w.error is not None:
                # The refill's upquery failed: end the streams (they resume from their
                # last cut) rather than retry at every packet end and hammer Spark.
                failed.append((key, w.error))
                continue
            w = self.refills[key] = Waiter({fk})
            asked = True
            self.ex.fills.want(st, fk, w)
        if readable and self.ex.fills.prefetch(readable, PREFETCH_MOST):
            asked = True  # the index fills go out with the next packet end: soon
        with self.lock:
            for key, error in failed:
                self.refills.pop(key, None)
                for sub in self.by_key.get(key, ()):
                    sub._end(Unavailable(f"refilling subscribed key {key[1]!r} failed: {error}"),
                             sub.cut_lsn())
            for sub in touched:
                if sub.error is None:
                    self._flush(sub, lsn)
            self.packet_lsn = lsn
        self.replaying.clear()
        if not self._ends or self._ends[-1] != lsn:
            if len(self._ends) == self._ends.maxlen:
                self.ends_set.discard(self._ends[0])
            self._ends.append(lsn)
            self.ends_set.add(lsn)
        self._remove_dropped()
        if asked:  # issue the refills soon, not at the next write
            self.ex.wake_at(self.ex.clock())

    def _defer(self, key: tuple[State, Row], subs: list[Subscription]) -> bool:
        """Whether hole ``key``'s refill waits for the next round: every subscription of
        it has another key being refilled (pending on a read's fill), and it has not
        waited DEFER_MAX yet. A key evicted while another's refill is in flight is then
        refilled from a snapshot after that one lands, where the other is known (cuts.py)."""
        st = key[0]
        for sub in subs:
            if not any(k != key[1] and _refilling(st, k) for k in sub.unready):
                return False
        now = self.ex.clock()
        return now - self.deferred.setdefault(key, now) < DEFER_MAX

    def landed(self, st: State, keys: list[Row], lsn: int) -> None:
        """A fill loaded ``keys`` of ``st``, exact at ``lsn`` (cuts.landed)."""
        cuts.landed(self, st, keys, lsn)

    def replayed(self, lsn: int) -> None:
        """Held updates up to ``lsn`` replayed (cuts.replayed)."""
        cuts.replayed(self, lsn)

    def _start_ok(self, sub: Subscription) -> bool:
        """A subscription about to start fits the memory limit with what is pinned (or
        has ended)."""
        self.starting.discard(sub)
        limit = self.ex.evictor.memory_limit
        if limit is not None:
            need = self.pins.pinned_bytes() + self.ex.evictor.full_bytes
            if need > limit:
                sub._end(ResourceExhausted(
                    f"the {len(sub.keys)} subscribed key(s) of view {sub.view!r} need "
                    f"{need} bytes pinned with the others, more than the memory limit of "
                    f"{limit} bytes"), 0)
                return False
        return True

    def _flush(self, sub: Subscription, lsn: int) -> None:
        """Queue ``sub``'s snapshot or its dirty keys' differences at ``lsn`` (caller
        holds the lock), if every key of it is readable; else, at the latest LSN every
        key is known at (``_flush_waiting``)."""
        plan = sub.reader.plan
        if sub.hist is not None or (sub.unready and plan.limit is None
                                    and plan.empty_row is None):
            self._flush_waiting(sub, lsn)
            return
        if sub.unready:
            if sub.ready:  # it was exact at the previous packet end: keep that as its cut
                sub.exact_lsn = sub.cut_lsn()
                sub.ready = False
            return
        st = sub.reader.state
        if not sub.started:
            if not self._start_ok(sub):
                return
            sub.started = True
            if not sub.resumed:
                for k in sub.keys:  # the other subscribers' share of what is logged
                    self.collect(st, k)
                snap: list[KeyChange] = [
                    (k, present(plan, st.bucket_rows(k)), []) for k in sub.keys
                ]
                for k, rows, _ in snap:
                    sub.sent[k] = Counter(rows)
                sub.dirty.clear()
                sub.pending.clear()  # the snapshot has it
                sub._push(Event("snapshot", lsn, snap))
                return
            sub.dirty = set(sub.keys)  # the first batch: from the rows at from_lsn to now
            sub.pending = dict.fromkeys(sub.keys)  # compared whole
            out = self._diff(sub, lsn)
            sub._push(Event("changes", lsn, out))
            return
        if sub.dirty:
            out = self._diff(sub, lsn)
            if out:
                sub._push(Event("changes", lsn, out))
        sub.ready = True

    def _flush_waiting(self, sub: Subscription, lsn: int) -> None:
        """Some key of ``sub`` is (or was, since its last cut) not readable: record where
        each key's rows are known (cuts.record), and queue them at the latest LSN where
        all are.

        The waiting mode: ``sub.hist`` is set at the first packet end where a key of it is
        not readable (a view without LIMIT or an empty-group row); ``ready`` is False, so
        its cut (``cut_lsn``) stays at ``exact_lsn`` instead of following the packet
        ends. It is looked at again only at packet ends that touch it: one of its keys
        changed, moved, or became readable or unreadable (``_after_packet``). Each time it
        sends a batch at the latest LSN above its cut where every key is known, if any.
        It leaves (``hist`` None, ``ready`` True) at a packet end where every key is
        readable and that LSN is the packet's, or is its cut's already. Nothing else gets
        it out: one that no later packet touches keeps its cut, so it must leave at a
        packet end where every key is readable, and every readable key must be known
        there (``KeyHistory.known_from``)."""
        hist = cuts.record(self, sub, lsn)
        cut = latest_cut(list(hist.values()), lsn, sub.exact_lsn if sub.started else -1)
        if cut is None:
            if sub.started and lsn == sub.exact_lsn and not sub.unready:
                # Every key readable at its cut's LSN (a key left and came back with no
                # write in between): exact as it stands. Waiting on, a later write that
                # touched none of its keys would leave its cut behind for good.
                sub.hist = None
                sub.ready = True
            return
        if not sub.started:
            if not self._start_ok(sub):
                return
            sub.started = True
            if not sub.resumed:
                snap: list[KeyChange] = [
                    (k, cuts.ordered(sub.reader.plan, list(hist[k].rows_at(cut).elements())), [])
                    for k in sub.keys]
                for k, rows, _ in snap:
                    sub.sent[k] = Counter(rows)
                sub._push(Event("snapshot", cut, snap))
            else:
                sub._push(Event("changes", cut, cuts.diff_at(sub.sent, hist, sub.keys, cut)))
        else:
            out = cuts.diff_at(sub.sent, hist, sub.keys, cut)
            if out:
                sub._push(Event("changes", cut, out))
            else:
                sub.exact_lsn = cut
        if cut == lsn and not sub.unready:  # every key readable: the usual way again
            sub.hist = None
            sub.ready = True
            return
        sub.ready = False
        for h in hist.values():
            h.rebase(cut)

    def collect(self, st: State, fk: Row) -> None:
        """Hand the change logged at ``fk`` since the last take to each of its
        subscriptions (a key's log is taken once, whichever subscription comes first)."""
        change = st.changelog.take_watched(fk, st.anomalies == 0)
        if change is not None and not change:
            return
        for sub in self.by_key.get((st, fk), ()):
            if change is None:
                sub.pending[fk] = None
            elif fk not in sub.pending:
                sub.pending[fk] = Counter(change)  # its own: the others' grow apart
            else:
                mine = sub.pending[fk]
                if mine is not None:
                    mine.update(change)

    def _diff(self, sub: Subscription, lsn: int) -> list[KeyChange]:
        st = sub.reader.state
        plan = sub.reader.plan
        by_log = plan.limit is None and plan.empty_row is None
        out: list[KeyChange] = []
        for k in sub.keys:  # in the order subscribed: reproducible batches
            if k not in sub.dirty:
                continue
            self.collect(st, k)
            change = sub.pending.pop(k, _NONE)
            if change is _NONE:
                continue  # no row of it changed (every change of a watched key is logged)
            if by_log and change is not None:
                inserted, deleted = _apply_change(sub.sent[k], change, plan)  # type: ignore[arg-type]
                if inserted or deleted:
                    out.append((k, inserted, deleted))
                continue
            now = Counter(present(plan, st.bucket_rows(k)))
            old = sub.sent[k]
            if now != old:
                inserted = list((now - old).elements())
                deleted = list((old - now).elements())
                sub.sent[k] = now
                out.append((k, inserted, deleted))
        sub.dirty.clear()
        return out


def _refilling(st: State, fk: Row) -> bool:
    """``fk`` is pending on a read's fill (not blocked on an index fill: a key blocked is
    known again only once unblocked, whenever a hole's refill goes out)."""
    fill = st.pending_fill(fk)
    return fill is not None and not fill.index and not st.is_blocked(fk)


def _apply_change(sent: Bag, change: Counter[Row], plan: ViewPlan
                  ) -> tuple[list[Row], list[Row]]:
    """Apply a key's logged change of stored rows to the rows sent for it; returns
    (inserted, deleted) as presented. (No count falls below zero: a state with an
    anomaly, a negative count, logs nothing, and its keys are compared whole.)"""
    stored = list(change)
    net: Counter[Row] = Counter()
    for row, shown in zip(stored, visible(plan, stored), strict=True):
        net[shown] += change[row]
    inserted: list[Row] = []
    deleted: list[Row] = []
    for row, n in net.items():
        if not n:
            continue
        m = sent.get(row, 0) + n
        if m:
            sent[row] = m
        else:
            del sent[row]
        if n > 0:
            inserted.extend([row] * n)
        else:
            deleted.extend([row] * -n)
    return inserted, deleted
