"""The executor: one thread that applies every change to the dataflow in order.

Packets (``packets.py``) — a write's deltas (tagged with its LSN), upquery replies,
misses to fill, evictions and graph changes — are processed strictly one at a time, so
every state changes at well-defined LSN boundaries. The ordering rules (docs/concepts.md,
"Ordering"; docs/architecture.md lists each with its test), and where they live:

* an update that meets a **hole** is dropped there (``_apply_batch``, ``_process``);
* a join update whose lookup misses an evict-on-miss index is held by an *index fill* of
  that key, and the downstream keys it reaches wait for it (``joinmiss.py``, ``gating.py``);
* an update that meets a **pending** key with LSN > the fill's snapshot V is held by the
  fill (same places); when the reply lands, the fill's states are filled bottom-up with
  the reply and the held updates are replayed in LSN order (``FillCoordinator.finish``
  and ``replay``); updates with LSN <= V are already in the reply;
* evicting a pending key cancels the fill for that key (the reply is discarded there and
  the read re-issued: ``Evictor.evict`` -> ``FillCoordinator.cancel``);
* evicting a key evicts every state above that was filled relying on it (``Evictor``).

Readers of filled keys don't queue behind writes: they read what ``Publisher`` published
at the end of the last packet, or take the lock between packets.

The executor normally runs its own thread (``start()``). Tests may run it *stepped*
(``start(threaded=False)``): packets then run only when ``run_pending()`` is called, on the
caller's thread, which makes every interleaving reproducible.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from itertools import groupby
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Delta, Row
from partialflow.operators.grouped import by_group
from partialflow.server.dataflow.bounds import KeyBounds
from partialflow.server.dataflow.checkpointer import Checkpointer
from partialflow.server.dataflow.evictor import Evictor
from partialflow.server.dataflow.fill import (
    Captured,
    CapturedAccess,
    Held,
    HeldJoin,
    HeldNode,
    HeldRows,
)
from partialflow.server.dataflow.fills import FillCoordinator
from partialflow.server.dataflow.gcpause import collection_deferred
from partialflow.server.dataflow.graph import Graph, Node
from partialflow.server.dataflow.inbox import Inbox
from partialflow.server.dataflow.joinmiss import feeds_miss_index, on_join_miss
from partialflow.server.dataflow.packets import (
    Call,
    FillDone,
    Miss,
    Packet,
    Stop,
    Tick,
    Write,
    WriteRun,
)
from partialflow.server.dataflow.publish import Publisher
from partialflow.server.dataflow.runner import UpqueryRunner
from partialflow.server.dataflow.state import State, StateAccess
from partialflow.server.dataflow.stats import Stats
from partialflow.server.errors import DeadlineExceeded
from partialflow.server.storage.record import TxRecord

if TYPE_CHECKING:
    from partialflow.server.dataflow.subscriptions import SubscriptionManager

log = logging.getLogger("partialflow.executor")

EXPIRY_EVERY = 0.5  # seconds between deadline checks while packets keep coming

# Deltas arriving at a node: (node, parent index, deltas).
Items = list[tuple[Node, int, list[Delta]]]


class Executor:
    def __init__(self, graph: Graph, runner: UpqueryRunner, *, memory_limit: int | None,
                 upquery_timeout: float, start_lsn: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.graph = graph
        self.clock = clock
        self.applied_lsn = start_lsn
        self.lock = threading.RLock()
        self.lsn_changed = threading.Condition(self.lock)
        self.inbox = Inbox(clock)  # packets in; writes queued back to back come out as runs
        self.stats = Stats()
        self.publisher = Publisher(start_lsn)
        self.evictor = Evictor(memory_limit, self.stats, self.publisher)
        self.fills = FillCoordinator(
            self, runner, self.stats, upquery_timeout=upquery_timeout, clock=clock
        )
        self.evictor.fills = self.fills
        # Ranges that prove holes of evict-on-miss indexes empty (bounds.py).
        self.bounds = KeyBounds(runner, self.submit, self.stats, lambda: self.applied_lsn)
        # Keys filled or changed by the current packet: accounted (LRU, bytes) and
        # republished (readers) when it ends. A dict, not a set: states hash by identity,
        # and the LRU order must not depend on memory addresses (reproducible runs).
        self._changed: dict[tuple[State, Row], None] = {}
        # While an index fill's held updates replay: the keys it filled or unblocked, each
        # with the LSN it is exact at; only updates after that LSN change it, and no other
        # filled key (those were filled from snapshots that have the updates already).
        self._scope: dict[tuple[State, Row], int] | None = None
        # Called on the executor thread as fn(event, fields), e.g. ("upquery", {"view",
        # "ms", "ok"}) when a fill finishes; for metrics. Keep them cheap.
        self.observers: list[Callable[[str, dict], None]] = []
        self._threaded = True
        self._running = False
        self._last_expiry = clock()
        self._thread: threading.Thread | None = None
        # Takes checkpoints at packet boundaries (checkpointer.py); None when they are off.
        self.checkpointer: Checkpointer | None = None
        # Change subscriptions: fed the reader keys each packet changed (subscriptions.py).
        # Set by the facade (the manager reads views' plans, above this module).
        self.subscriptions: SubscriptionManager | None = None
        # While a transaction over several tables propagates: no index fill may start
        # after its first table (it would read the snapshot before the transaction,
        # without its tables applied already; joinmiss.py).
        self.in_tx = False
        self.tx_first = False  # propagating the first table of a transaction (in_tx)

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
                self.lsn_changed.wait(min(left, 0.5))

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
        with self.lock:
            t0 = time.perf_counter_ns()
            with collection_deferred():  # gcpause.py: no collections inside a packet
                try:
                    self._handle(packet)
                    # Deadlines must bite under steady writes too, not only when idle.
                    # Before after_packet: misses waiting for a fill slot go out in this
                    # packet.
                    if expire or self.clock() - self._last_expiry > EXPIRY_EVERY:
                        self._last_expiry = self.clock()
                        self.fills.expire()
                    self.after_packet()
                except Exception:  # never let one packet kill the executor
                    log.exception("executor packet %s failed", type(packet).__name__)
            self.stats.count("busy_ns", time.perf_counter_ns() - t0)
            self.lsn_changed.notify_all()

    def _handle(self, packet: Packet) -> None:
        if isinstance(packet, Write) and isinstance(packet.record, TxRecord):
            self._apply_tx(packet.record)
        elif isinstance(packet, (Write, WriteRun)):
            records = packet.records if isinstance(packet, WriteRun) else [packet.record]
            table, lsn = records[0].table, records[-1].lsn
            deltas: list[Delta] = []
            for rec in records:
                self.bounds.on_write(table, rec.rows, rec.diffs)
                deltas.extend(zip(rec.rows, rec.diffs, strict=True))
            base = self.graph.bases.get(table)
            if base is not None and base.children:
                self._propagate([(c, i, deltas) for c, i in base.children], lsn)
            self.applied_lsn = lsn
            self.stats.count("writes_applied", len(records))
            if len(records) > 1:
                self.stats.count("writes_coalesced", len(records))
        elif isinstance(packet, Miss):
            for k in packet.keys:
                self.fills.want(packet.state, k, packet.waiter)
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
                    self._propagate([(c, i, deltas) for c, i in base.children], tx.lsn)
                    self.tx_first = False
        finally:
            self.in_tx = False
        self.applied_lsn = tx.lsn
        self.stats.count("writes_applied")
        self.stats.count("transactions_applied")

    def after_packet(self) -> None:
        """End of a packet: account and republish what changed, keep the memory limit,
        issue gathered misses, publish for lock-free readers."""
        self._account_changes()
        self.fills.issue_wanted()
        if self._changed:  # keys derived from filled state while issuing (no upquery)
            self._account_changes()
        self.account_reads()
        subs = self.subscriptions
        if subs is not None and subs.active:  # before publish: it clears the changed keys
            subs.after_packet(self.publisher.peek_changed(), self.applied_lsn)
        self.publisher.publish(self.applied_lsn)
        if self.checkpointer is not None:  # a consistent cut: everything filled is exact
            self.checkpointer.after_packet()

    def _account_changes(self) -> None:
        changed, self._changed = self._changed, {}
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
        self._changed[(st, fk)] = None

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
               scope: dict[tuple[State, Row], int] | None = None) -> None:
        """Apply a fill's held updates (in LSN order) now that its keys are filled.
        Consecutive updates held by one node from one input are one batch again, as when
        they first arrived. ``before(lsn)`` runs before each batch (gates, gating.py);
        ``scope``: the only filled keys the updates may change (an index fill's)."""
        self._scope = scope
        subs = self.subscriptions
        if subs is not None and subs.active:
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

            try:
                self._replay(held, marked)
                if last:
                    subs.replayed(last[0])
            finally:
                self._scope = None
            return
        try:
            self._replay(held, before)
        finally:
            self._scope = None

    def _replay(self, held: list[Held], before: Callable[[int], None] | None) -> None:
        for (lsn, kind, _, _), group in groupby(held, key=lambda h: h.batch_key()):
            if before is not None:
                before(lsn)
            items = list(group)
            if kind == "rows":  # one batch key: one state
                assert isinstance(items[0], HeldRows)
                self._apply_batch(items[0].state, [h.delta for h in items], lsn)
                continue
            first = items[0]
            assert isinstance(first, (HeldNode, HeldJoin))
            captured: Captured | None = None
            if isinstance(first, HeldJoin):  # one batch key: every item is a HeldJoin
                captured = {
                    k: v for h in items if isinstance(h, HeldJoin) for k, v in h.captured.items()
                }
            self._propagate([(first.node, first.parent, [h.delta for h in items])], lsn, captured)

    # -- propagation -------------------------------------------------------------------
    def _propagate(self, items: Items, lsn: int, captured: Captured | None = None) -> None:
        """Push deltas up the graph in topological order (node ids are topological).
        ``captured``: the items are held join deltas being replayed (see joinmiss.py)."""
        inbox: dict[int, list[tuple[int, list[Delta]]]] = {}
        heap: list[int] = []

        def push(node: Node, pidx: int, deltas: list[Delta]) -> None:
            if not deltas:
                return
            if node.nid not in inbox:
                inbox[node.nid] = []
                heapq.heappush(heap, node.nid)
            inbox[node.nid].append((pidx, deltas))

        replayed = {node.nid for node, _, _ in items} if captured is not None else set()
        for start, pidx, deltas in items:
            push(start, pidx, deltas)
        while heap:
            nid = heapq.heappop(heap)
            node = self.graph.nodes.get(nid)
            batches = inbox.pop(nid)
            if node is None:
                continue
            if nid not in replayed and all(st.holds_nothing()
                                           for st in self.graph.states_above(node)):
                # Nothing at or above this node is filled or being filled (a view nobody
                # reads, say): every delta would be dropped at a hole further up, and a
                # join miss here would evict only holes. Skip the work.
                self.stats.count("deltas_skipped_idle", sum(len(d) for _, d in batches))
                continue
            for pidx, deltas in sorted(batches, key=lambda b: b[0]):
                if nid in replayed:
                    out = self._replay_join(node, pidx, deltas, captured or {}, lsn)
                else:
                    out = self._process(node, pidx, deltas, lsn)
                if out:
                    for child, cidx in node.children:
                        push(child, cidx, out)

    def _replay_join(
        self, node: Node, pidx: int, deltas: list[Delta], captured: Captured, lsn: int
    ) -> list[Delta]:
        """Compute held join deltas now that the side they missed is filled. The side
        indexes outside the fill were captured when the deltas were held (they have moved
        on since), and the delta's own side was updated then, so it is not touched here."""
        out = node.op.on_input(pidx, deltas, CapturedAccess(node, captured))  # type: ignore[union-attr]
        for m in out.misses:  # the side was evicted meanwhile: drop, evict what it affects
            self.stats.count("join_misses")
            self.evictor.evict_downstream(node, pidx, m.delta[0],
                                          lambda st, fk: self.changes(st, fk, lsn))
        return out.deltas

    def changes(self, st: State, fk: Row, lsn: int) -> bool:
        """Whether an update at ``lsn`` may change key ``fk`` of ``st`` (the rules of
        ``_apply_batch``). Not a filled key outside the scope of an index fill whose
        held updates replay, or of it but exact at ``lsn`` already, and not a key pending
        on a fill whose snapshot has ``lsn``: their contents have the update. (Live
        writes come after every snapshot and outside replays: every key, for them.)"""
        if st.is_filled(fk):
            scope = self._scope
            return scope is None or lsn > scope.get((st, fk), lsn)
        fill = st.pending_fill(fk)
        return fill is None or lsn > fill.lsn

    def _process(self, node: Node, pidx: int, deltas: list[Delta], lsn: int) -> list[Delta]:
        if node.view is not None:
            assert node.own is not None
            self._apply_batch(node.own, deltas, lsn)
            return []
        op = node.op
        assert op is not None
        st = node.own
        if st is not None:  # a grouped operator: only groups whose key is filled go in
            # Split once; every delta of a group shares its fill key, so one check per
            # group decides for all of them (each group's deltas keep their order).
            groups = op.split(pidx, deltas)  # type: ignore[attr-defined]
            scope = self._scope
            if scope is None and not st.partial_cols and st.is_filled(()):
                passed = groups  # one fill key, filled: every group goes in
            else:
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
            out = op.on_groups(pidx, passed, StateAccess(node))  # type: ignore[attr-defined]
            # Sizes are the state's own; a grouped state is no reader: nothing to republish.
            st.set_entries(out.writes, op.entry_size)  # type: ignore[attr-defined]
            for group in out.exhausted:
                self.stats.count("exhausted")
                self.evictor.evict(st, st.fill_key_of_index(group))
            return out.deltas
        out = op.on_input(pidx, deltas, StateAccess(node))
        for m in out.misses:  # joinmiss.py: drop, fill or hold the update
            on_join_miss(self, node, pidx, m, lsn)
        own_side = node.sides.get(pidx)
        if own_side is not None:
            self._apply_batch(own_side, deltas, lsn)
        return out.deltas

    def _apply_batch(self, st: State, deltas: list[Delta], lsn: int) -> None:
        """Apply a rows state's deltas: to a filled key's bucket, held by a pending key's
        fill (LSN > its snapshot), dropped at a hole. By fill key: one check and one size
        update per key; keys have separate buckets and each key's deltas keep their order."""
        if st.holds_nothing():
            return  # every key is a hole: each delta would be dropped there
        scope = self._scope
        # Only a reader's changed keys are listed (to be republished): sizes are the
        # state's own, and a write does not move a key in the LRU.
        changed = self._changed if st.node.view is not None else None
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

    # -- views coming and going (on the executor thread) -------------------------------
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

