"""The executor: one thread that applies every change to the dataflow in order.

Packets (``packets.py``) — a write's deltas (tagged with its LSN), upquery replies,
misses to fill, evictions and graph changes — are processed strictly one at a time, so
every state changes at well-defined LSN boundaries. The ordering rules (docs/concepts.md,
"Ordering"; docs/architecture.md lists each with its test), and where they live:

* an update that meets a **hole** is dropped there (propagate.py);
* a join update whose lookup misses an evict-on-miss index is held by an *index fill* of
  that key, and the downstream keys it reaches wait for it (``joinmiss.py``, ``gating.py``);
* an update that meets a **pending** key with LSN > the fill's snapshot V is held by the
  fill (same places); when the reply lands, the fill's states are filled bottom-up with
  the reply and the held updates are replayed in LSN order (``FillCoordinator.finish``
  and replay.py); updates with LSN <= V are already in the reply;
* evicting a pending key cancels the fill for that key (the reply is discarded there and
  the read re-issued: ``Evictor.evict`` -> ``FillCoordinator.cancel``);
* evicting a key evicts every state above that was filled relying on it (``Evictor``).

Readers of filled keys don't queue behind writes: they read what ``Publisher`` published
at the end of the last packet, or ask for filled rows between packets (``read_filled``).

The executor normally runs its own thread (``start()``). Tests may run it *stepped*
(``start(threaded=False)``): packets then run only when ``run_pending()`` is called, on the
caller's thread, which makes every interleaving reproducible.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Delta, Row
from partialflow.server.dataflow import gcpause
from partialflow.server.dataflow.bounds import KeyBounds
from partialflow.server.dataflow.evictor import Evictor
from partialflow.server.dataflow.fill import Held, Waiter
from partialflow.server.dataflow.fills import FillCoordinator
from partialflow.server.dataflow.graph import Graph
from partialflow.server.dataflow.inbox import Inbox
from partialflow.server.dataflow.joinmiss import JoinMisses, feeds_miss_index
from partialflow.server.dataflow.packets import (
    BringBack,
    Call,
    FillDone,
    Miss,
    Packet,
    Stop,
    Tick,
    Write,
    WriteRun,
)
from partialflow.server.dataflow.propagate import ChangedKeys, Propagator
from partialflow.server.dataflow.publish import Publisher
from partialflow.server.dataflow.replay import Replayer, ReplayScope, Scope
from partialflow.server.dataflow.runner import UpqueryRunner
from partialflow.server.dataflow.shelfreads import Promoter
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats
from partialflow.server.dataflow.tier import Tier
from partialflow.server.errors import DeadlineExceeded
from partialflow.server.storage.record import TxRecord

if TYPE_CHECKING:
    from partialflow.server.dataflow.checkpointer import Checkpointer
    from partialflow.server.dataflow.subscriptions import SubscriptionManager

log = logging.getLogger("partialflow.executor")

EXPIRY_EVERY = 0.5  # seconds between deadline checks while packets keep coming
# Keys read from the disk tier by readers brought back into memory per packet at most
# (shelfreads.py ``Promoter``, about 100-200 us each with the keys shelved in exchange):
# bounds the packet, so writes queued behind it don't wait long, and with one such packet
# per BRING_BACK_EVERY (publish.py) the executor's share of the GIL under many readers
# (100k keys, 32 readers: 256 a packet every 20 ms, 9,310 keys/s read; 64 every 50 ms,
# 10,529, the same memory hit rate).
BRING_BACK = 64


class Executor:
    """``checkpointer`` and ``subscriptions``: factories of the parts that take
    checkpoints at packet boundaries (checkpointer.py; None: checkpoints are off) and feed
    change subscriptions (subscriptions.py), given this executor as their port."""

    def __init__(self, graph: Graph, runner: UpqueryRunner, *, memory_limit: int | None,
                 upquery_timeout: float, start_lsn: int,
                 clock: Callable[[], float] = time.monotonic, index_prefetch: bool = True,
                 checkpointer: Callable[[Executor], Checkpointer] | None = None,
                 subscriptions: Callable[[Executor], SubscriptionManager] | None = None,
                 tier: Tier | None = None,
                 ) -> None:
        self.graph = graph
        self.clock = clock
        self.applied_lsn = start_lsn
        self.lock = threading.RLock()
        self.lsn_changed = threading.Condition(self.lock)
        self._lsn_waiters = 0  # threads in wait_for's wait (under the lock)
        self.inbox = Inbox(clock)  # packets in; writes queued back to back come out as runs
        self.stats = Stats()
        self._counters = self.stats.counters  # bumped in place on the per-packet path
        self._woken: list[Waiter] = []  # reads' waiters answered in this packet (fill.py)
        self.publisher = Publisher(start_lsn)
        self.fills = FillCoordinator(self, runner, self.stats, upquery_timeout=upquery_timeout,
                                     clock=clock, prefetch=index_prefetch)
        self.tier = tier  # the disk tier under the states (tier.py), if any
        self._promoter = Promoter()  # keys readers read from it (shelfreads.py)
        self.evictor = Evictor(memory_limit, self.stats, self.publisher, self.fills,
                               depends=self._depends, tier=tier)
        # Ranges that prove holes of evict-on-miss indexes empty (bounds.py).
        self.bounds = KeyBounds(runner, self.submit, self.stats, lambda: self.applied_lsn)
        # Keys filled or changed by the current packet (propagate.py).
        self._changed = ChangedKeys()
        # While an index fill's held updates replay: the keys it filled or unblocked, each
        # with the LSN it is exact at; only updates after that LSN change it, and no other
        # filled key (those were filled from snapshots that have the updates already).
        scope = ReplayScope()
        misses = JoinMisses(self, self.fills, self.bounds, self.evictor, self.stats, scope,
                            self._changed.add)
        self.propagator = Propagator(graph, self.stats, self.evictor, scope, self._changed,
                                     misses.on_miss)
        self.replayer = Replayer(self.propagator, scope, self._subscriptions)
        # Called on the executor thread as fn(event, fields), e.g. ("upquery", {"view",
        # "ms", "ok"}) when a fill finishes; for metrics. Keep them cheap.
        self.observers: list[Callable[[str, dict], None]] = []
        self._threaded = True
        self._running = False
        self._last_expiry = clock()
        self._thread: threading.Thread | None = None
        # While a transaction over several tables propagates: no index fill may start
        # after its first table (it would read the snapshot before the transaction,
        # without its tables applied already; joinmiss.py).
        self.in_tx = False
        self.tx_first = False  # propagating the first table of a transaction (in_tx)
        # Takes checkpoints at packet boundaries; None when they are off.
        self.checkpointer = checkpointer(self) if checkpointer is not None else None
        # Change subscriptions: fed the reader keys each packet changed.
        self.subscriptions = subscriptions(self) if subscriptions is not None else None

    def _subscriptions(self) -> SubscriptionManager | None:
        return self.subscriptions

    def _depends(self, st: State, fk: Row) -> bool:
        """Whether a subscribed key is joined from key ``fk`` of index state ``st`` now
        (the evictor keeps such keys; pins.py)."""
        subs = self.subscriptions
        return subs is not None and subs.pins.depends(st, fk)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, threaded: bool = True) -> None:
        self._threaded = threaded
        self.inbox.timers = threaded
        self._running = True
        if threaded:
            self._thread = threading.Thread(target=self._loop, name="executor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._running = False
        self.inbox.put(Stop())
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- entering packets --------------------------------------------------------------
    def submit(self, packet: Packet) -> None:
        """Queue a packet (any thread)."""
        self.inbox.put(packet)

    @property
    def threaded(self) -> bool:
        """Runs its own thread (not stepped by a test)."""
        return self._threaded

    def has_queued(self) -> bool:
        """Packets are waiting (background work should yield to them)."""
        return not self.inbox.empty()

    def restart_at(self, lsn: int) -> None:
        """Start from a checkpoint taken at ``lsn`` (executor thread, before any view):
        the logged writes after it are replayed next."""
        self.applied_lsn = lsn
        self.publisher.lsn = lsn

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the executor thread, in order with everything else."""
        fut: Future = Future()
        self.inbox.put(Call(fn, fut))
        if not self._threaded:
            self.run_pending()
        return fut

    def wake_at(self, when: float) -> None:
        """Have the loop run (and issue gathered misses) at ``when`` even if no packet comes."""
        self.inbox.wake_at(when)

    def next_wake(self) -> float | None:
        """When the loop next wants a tick (stepped tests advance their clock to it)."""
        return self.inbox.next_wake()

    # -- waiting (reading threads) -----------------------------------------------------
    def wait_event(self, event: threading.Event, timeout: float) -> bool:
        """Wait for a read's ``event`` (set on the executor thread). Stepped, the
        caller runs what is queued instead: whatever can't happen then never will."""
        if self._threaded:
            return event.wait(timeout)
        self.run_pending()
        return event.is_set()

    def wait_for(self, lsn: int, deadline: float) -> None:
        """Block until the published rows reflect ``lsn`` (read-your-writes)."""
        if not self._threaded:
            self.run_pending()
        pub = self.publisher
        if pub.lsn >= lsn:  # the common case needs no lock
            return
        with self.lsn_changed:
            while pub.lsn < lsn:
                left = deadline - time.monotonic()
                if left <= 0 or not self._threaded:
                    raise DeadlineExceeded(
                        f"timed out waiting for LSN {lsn} (applied: {self.applied_lsn})"
                    )
                # Counted under the lock the executor notifies under: it skips the
                # notification when nobody waits (most packets).
                self._lsn_waiters += 1
                try:
                    self.lsn_changed.wait(min(left, 0.5))
                finally:
                    self._lsn_waiters -= 1

    # -- the loop ----------------------------------------------------------------------
    def _loop(self) -> None:
        while self._running:
            packet = self.inbox.take(timeout=0.2)
            if packet is None:
                self._run(Tick(), expire=True)  # deadlines bite when idle too
                continue
            if isinstance(packet, Stop):
                break
            self._run(packet)

    def run_next(self) -> bool:
        """Stepped mode: run the next queued packet, if any; returns whether one was."""
        packet = self.inbox.take_nowait()
        if packet is not None and not isinstance(packet, Stop):
            self._run(packet)
        return packet is not None

    def run_pending(self) -> int:
        """Stepped mode: run every queued packet (and a tick if a wake time has passed)
        on this thread; returns how many ran."""
        n = 0
        while self.run_next():
            n += 1
        return n

    def _run(self, packet: Packet, expire: bool = False) -> None:
        # Paid once per packet, so once per write at one row per write: kept to plain
        # calls (no generator context manager; the counter bumped in place; waiters
        # notified only if there are any).
        with self.lock:
            t0 = time.perf_counter_ns()
            collecting = gcpause.pause()  # no collections inside a packet
            try:
                self._handle(packet)
                # Deadlines must bite under steady writes too, not only when idle.
                # Before after_packet: misses waiting for a fill slot go out in this
                # packet.
                now = self.clock()
                if expire or now - self._last_expiry > EXPIRY_EVERY:
                    self._last_expiry = now
                    self.fills.expire()
                self.after_packet()
            except Exception:  # never let one packet kill the executor
                log.exception("executor packet %s failed", type(packet).__name__)
            finally:
                gcpause.resume(collecting)
                if self._woken:  # the packet failed before it published: wake them anyway
                    self._wake()
            self._counters["busy_ns"] += time.perf_counter_ns() - t0
            if self._lsn_waiters:
                self.lsn_changed.notify_all()

    def _handle(self, packet: Packet) -> None:
        if isinstance(packet, Write) and isinstance(packet.record, TxRecord):
            self._apply_tx(packet.record)
        elif isinstance(packet, (Write, WriteRun)):
            records = packet.records if isinstance(packet, WriteRun) else (packet.record,)
            table, lsn = records[0].table, records[-1].lsn
            deltas: list[Delta] = []
            for rec in records:
                self.bounds.on_write(table, rec.rows, rec.diffs)
                deltas.extend(zip(rec.rows, rec.diffs, strict=True))
            base = self.graph.bases.get(table)
            if base is not None and base.children:
                self.propagator.propagate([(c, i, deltas) for c, i in base.children], lsn)
            self.applied_lsn = lsn
            self._counters["writes_applied"] += len(records)
            if len(records) > 1:
                self._counters["writes_coalesced"] += len(records)
        elif isinstance(packet, Miss):
            misses = (packet, *self.inbox.more_misses())
            # Keys shelved in the disk tier are all brought back before any read is
            # answered, a state's with one read of the store: each SQLite call lets go of
            # the GIL, and a reading thread woken by an answer before it then holds the
            # executor up to a switch interval (profiled with 32 readers: a take cost
            # 191 us between answers, 67 before them; reads of 1M keys went from 5.9k to
            # 10.3k keys/s). A reader key derived from its aggregate's is a hole, not
            # shelved (evictor.py): its aggregate's key comes back, to derive it from.
            if self.tier is not None:
                for miss in misses:
                    st = miss.state
                    st.unshelve(miss.keys, read=True)
                    if st.source is not None:
                        st.source[0].unshelve(miss.keys, read=True)
            for miss in misses:
                miss.waiter.woken = self._woken  # at the end of the packet (fill.py)
                for k in miss.keys:
                    self.fills.want(miss.state, k, miss.waiter, derive=True)
        elif isinstance(packet, BringBack):  # keys readers read from the disk tier
            self._promoter.run(self.publisher.shelf_reads(), self.fills.derive_now,
                               BRING_BACK)
        elif isinstance(packet, FillDone):
            self.fills.finish(packet.fill, packet.results, packet.error)
        elif isinstance(packet, Call):
            try:
                packet.future.set_result(packet.fn())
            except Exception as e:
                packet.future.set_exception(e)
        # Tick: nothing to apply; after_packet issues what was waiting for its window.

    def _apply_tx(self, tx: TxRecord) -> None:
        """A transaction: every table's deltas go through the graph in this one packet, so
        no read, subscription or checkpoint comes between them. They go one table after
        the other, each all the way up, as writes at the same LSN would: a join fed by two
        of the tables takes dA against B as it was, then dB against A' = A + dA, which is
        exactly the change of A x B; and what a pending fill holds comes in that order too,
        so its replay meets the same states. (In one propagation a node's later input
        would be held before the earlier one's output above it.) No index fill may start
        after the first table (``in_tx``, ``tx_first``, joinmiss.py): it would read the
        snapshot before the transaction, without the tables already applied."""
        for rec in tx.changes:
            self.bounds.on_write(rec.table, rec.rows, rec.diffs)
        self.in_tx = len(tx.changes) > 1
        # The first table's deltas meet the dataflow as a single write's would (nothing of
        # the transaction is in it yet), so their join misses may start index fills from
        # the snapshot before it (joinmiss.py); later tables' misses may not. Tables that
        # feed an evict-on-miss join index go last: a miss of that index comes from the
        # other side's delta, and so is met while it is first. (Any order is exact.)
        changes = sorted(tx.changes, key=lambda rec: feeds_miss_index(self.graph, rec.table))
        self.tx_first = True
        try:
            for rec in changes:
                base = self.graph.bases.get(rec.table)
                if base is not None and base.children:
                    deltas: list[Delta] = list(zip(rec.rows, rec.diffs, strict=True))
                    self.propagator.propagate([(c, i, deltas) for c, i in base.children], tx.lsn)
                    self.tx_first = False
        finally:
            self.in_tx = False
        self.applied_lsn = tx.lsn
        self.stats.count("writes_applied")
        self.stats.count("transactions_applied")

    def after_packet(self) -> None:
        """End of a packet: account and republish what changed, keep the memory limit,
        issue gathered misses, publish for lock-free readers. Each step is skipped when it
        has nothing to do: this runs once per write at one row per write."""
        if self._changed.keys:
            self._account_changes()
        else:  # no key to list, but writes may have grown states past the limit
            self.evictor.enforce_memory()
        fills = self.fills
        if fills.wanted or fills.index.new:
            fills.issue_wanted()
            if self._changed.keys:  # keys derived from filled state while issuing (no upquery)
                self._account_changes()
        if self.publisher.reads_logged():
            self.account_reads()
        subs = self.subscriptions
        if subs is not None and subs.active:  # before publish: it clears the changed keys
            subs.after_packet(self.publisher.peek_changed(), self.applied_lsn)
        self.publisher.publish(self.applied_lsn)
        if self.tier is not None:  # after the LSN (shelfreads.py)
            self.publisher.tier_floor = self.tier.next_ref
        if self._woken:  # reads this packet answered, now that it is published
            self._wake()
        if self.checkpointer is not None:  # a consistent cut: everything filled is exact
            self.checkpointer.after_packet()
        elif self.tier is not None:  # no checkpoint commits it: its write-ahead log would
            self.tier.commit_if_due(self.clock())  # grow without bound (tier.py)

    def _wake(self) -> None:
        """Wake the reads answered in this packet (fill.py ``Waiter.woken``): after the
        publish, before checkpoint and tier work that need not delay them."""
        for w in self._woken:
            w.event.set()
        self._woken.clear()

    def _account_changes(self) -> None:
        changed = self._changed.take()
        for st, fk in changed:
            if st.node.view is not None:
                self.publisher.changed(st, fk)
        self.evictor.account(changed)

    def account_reads(self) -> None:
        """LRU recency and hit/miss counters of lock-free reads (caller holds the lock)."""
        hits: dict[State, list[Row]] = {}
        for st, keys, hit in self.publisher.drain_reads():
            view: str = st.node.view  # type: ignore[assignment]
            if hit:
                self.stats.count_view(view, "hits", len(keys))
                hits.setdefault(st, []).extend(keys)
            else:
                self.stats.count_view(view, "misses", len(keys))
        for st, keys in hits.items():
            # A key read again and again since the last packet is touched once, where it
            # was last read (dict.fromkeys keeps first occurrences: hence the reversals).
            self.evictor.touch_many(st, list(dict.fromkeys(reversed(keys)))[::-1])
            self.publisher.read_lately(st, keys)

    # -- what the fill coordinator needs (FillHost) ------------------------------------
    def changed(self, st: State, fk: Row) -> None:
        """``fk`` of ``st`` was filled or changed in this packet."""
        self._changed.add(st, fk)

    def observe(self, event: str, fields: dict) -> None:
        for fn in self.observers:
            try:
                fn(event, fields)
            except Exception:  # a metrics hook must never break the executor
                log.exception("observer failed")

    def evict(self, st: State, fk: Row) -> None:
        self.evictor.evict(st, fk)

    def landed(self, st: State, keys: list[Row], lsn: int) -> None:
        """A read's fill loaded reader ``keys`` of ``st`` at snapshot ``lsn`` (before its
        held updates replay): subscriptions use them as rows known at ``lsn``."""
        subs = self.subscriptions
        if subs is not None and subs.active:
            subs.landed(st, keys, lsn)

    def replay(self, held: list[Held], before: Callable[[int], None] | None = None,
               scope: Scope | None = None) -> None:
        self.replayer.replay(held, before, scope)

    # -- what reads need (reads.FilledRows) ----------------------------------------------
    def read_filled(self, st: State, keys: Iterable[Row], *, count_as: str | None
                    ) -> tuple[int, dict[Row, list[Row]], set[Row]]:
        """Between packets (under the lock): the LSN applied, the rows of those of ``keys``
        (of reader state ``st``) that are filled, and which of the others are blocked.
        Each filled key's copy is published (publish.py: a big key published stale need
        not be read under the lock again until it changes). ``count_as``: a view a read's
        hits and misses are counted for; its hits are made recent in the LRU then."""
        with self.lock:
            if count_as is not None:
                self.account_reads()
            lsn = self.applied_lsn
            found: dict[Row, list[Row]] = {}
            blocked: set[Row] = set()
            misses = 0
            tier = self.tier
            unshelved = tier.counters["unshelved"] if tier is not None else 0
            for k in keys:
                if st.is_filled(k):
                    rows = found[k] = st.bucket_rows(k)
                    self.publisher.cache(st, k, rows, lsn)
                    if count_as is not None:
                        self.evictor.touch(st, k)
                elif st.is_blocked(k):
                    blocked.add(k)
                    misses += 1
                else:
                    misses += 1
            if count_as is not None:
                counters = self.stats.view(count_as)
                counters["hits"] += len(found)
                counters["misses"] += misses
            if tier is not None and tier.counters["unshelved"] != unshelved:
                # Keys came back from the disk tier outside a packet: a tick keeps the
                # memory limit (at its end) now, not at the next write or idle tick.
                self.submit(Tick())
            return lsn, found, blocked

    # -- views coming and going (on the executor thread) -------------------------------
    def live_states(self) -> list[State]:
        """Every state of the views installed."""
        return list(self.evictor.states.values())

    def view_sqls(self) -> list[tuple[str, str]]:
        """(name, SQL) of every view installed."""
        return [(r.name, r.sql) for r in self.graph.readers.values()]

    def register_states(self, states: list[State]) -> None:
        self.evictor.register(states)
        if self.checkpointer is not None:
            self.checkpointer.registered(states)

    def forget_states(self, states: list[State]) -> None:
        if self.subscriptions is not None:
            self.subscriptions.forget(states)
        for st in states:
            self.bounds.forget(st)
            self.evictor.forget(st)
            self.fills.forget(st)
            if st.node.view is not None:
                self.publisher.forget(st)
        self.evictor.unregister(states)

