"""The executor: one thread that applies every change to the dataflow in order.

Packets — a write's deltas (tagged with its LSN), upquery replies, misses to fill,
evictions and graph changes — are processed strictly one at a time, so every state
changes at well-defined LSN boundaries. The ordering rules (DESIGN.md, "Ordering"):

* an update that meets a **hole** is dropped there;
* an update that meets a **pending** key with LSN > the fill's snapshot V is held by the
  fill; when the reply lands, the fill's states are filled bottom-up with the reply and
  the held updates are replayed in LSN order (updates with LSN <= V are already in it);
* evicting a pending key cancels the fill for that key (the reply is discarded there and
  the read re-issued);
* evicting a key evicts every state above that was filled relying on it.

Readers of filled keys don't queue behind writes: they take the lock between packets.
"""

from __future__ import annotations

import heapq
from collections import deque
import logging
import math
import queue
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future
from typing import Any, Callable

from cachetools import LRUCache

from partialflow.operators.base import Delta, Row
from partialflow.server.errors import DeadlineExceeded, Unavailable
from partialflow.server.graph import Graph, Node
from partialflow.server.state import State, StateAccess
from partialflow.server.eviction import EvictionMixin
from partialflow.server.fills import FillsMixin
from partialflow.server.upquery import Fill, UpqueryRunner, Waiter

log = logging.getLogger("partialflow.executor")


class Executor(FillsMixin, EvictionMixin):
    def __init__(self, graph: Graph, runner: UpqueryRunner, *, memory_limit: int | None, upquery_timeout: float, start_lsn: int) -> None:
        self.graph = graph
        self.runner = runner
        self.memory_limit = memory_limit
        self.upquery_timeout = upquery_timeout
        self.applied_lsn = start_lsn
        self.lock = threading.RLock()
        self.lsn_changed = threading.Condition(self.lock)
        self.queue: queue.Queue = queue.Queue()
        self.states: dict[int, State] = {}
        self.lru: LRUCache = LRUCache(maxsize=math.inf)  # (sid, fill key) -> bytes; order only
        self.partial_bytes = 0
        self.full_bytes = 0
        self.wanted: dict[State, dict[Row, list[Waiter]]] = {}
        self.inflight: dict[int, list[Fill]] = {}  # requester sid -> its fills in flight
        self._wake: float | None = None  # when a timer will next poke the loop
        # state sid -> (first, last) time a key was wanted since its last fill was issued
        self._miss_times: dict[int, tuple[float, float]] = {}
        self.fills: set[Fill] = set()
        self._touched: set[tuple[State, Row]] = set()
        # Lock-free reads (a seqlock): readers' published rows and the LSN they are exact
        # at change only inside an odd pub_version; readers retry if it moved.
        self.pub_version = 0
        self.published_lsn = start_lsn
        self._republish: set[tuple[State, Row]] = set()
        self.read_log: deque = deque()  # (state, key, hit) from lock-free reads
        self.counters: Counter = Counter()
        self.view_counters: dict[str, Counter] = defaultdict(Counter)
        self.upquery_ms: list[float] = []
        # Called on the executor thread as fn(event, fields), e.g. ("upquery", {"view",
        # "ms", "ok"}) when a fill finishes; for metrics. Keep them cheap.
        self.observers: list[Callable[[str, dict], None]] = []
        self._running = False
        self._last_expiry = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="executor", daemon=True)

    def start(self) -> None:
        self._running = True
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self.queue.put(("stop",))
        self._thread.join(timeout=10)

    def submit(self, *packet: Any) -> None:
        self.queue.put(packet)

    def _wake_at(self, when: float) -> None:
        """Have the loop run (and issue gathered misses) at ``when`` even if no packet comes."""
        if self._wake is not None and self._wake <= when:
            return
        self._wake = when

        def poke() -> None:
            self._wake = None
            self.submit("tick")

        t = threading.Timer(max(0.0, when - time.monotonic()), poke)
        t.daemon = True
        t.start()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the executor thread, in order with everything else."""
        fut: Future = Future()
        self.queue.put(("call", fn, fut))
        return fut

    def _loop(self) -> None:
        while self._running:
            try:
                packet = self.queue.get(timeout=0.2)
            except queue.Empty:
                with self.lock:
                    self._expire_fills()
                continue
            if packet[0] == "stop":
                break
            with self.lock:
                t0 = time.perf_counter_ns()
                try:
                    self._handle(packet)
                    self._after_packet()
                except Exception:  # never let one packet kill the executor
                    log.exception("executor packet %s failed", packet[0])
                self.counters["busy_ns"] += time.perf_counter_ns() - t0
                # Deadlines must bite under steady writes too, not only when idle.
                if time.monotonic() - self._last_expiry > 0.5:
                    self._last_expiry = time.monotonic()
                    self._expire_fills()
                self.lsn_changed.notify_all()

    def _handle(self, packet: tuple) -> None:
        kind = packet[0]
        if kind == "write":
            rec = packet[1]
            base = self.graph.bases.get(rec.table)
            if base is not None and base.children:
                deltas = list(zip(rec.rows, rec.diffs))
                self._propagate([(c, i, deltas) for c, i in base.children], rec.lsn)
            self.applied_lsn = rec.lsn
            self.counters["writes_applied"] += 1
        elif kind == "miss":
            _, st, keys, waiter = packet
            for k in keys:
                self._want(st, k, waiter)
        elif kind == "fill_done":
            _, fill, results, error = packet
            self._finish_fill(fill, results, error)
        elif kind == "tick":
            pass  # _after_packet issues what was waiting for its window
        elif kind == "call":
            _, fn, fut = packet
            try:
                fut.set_result(fn())
            except Exception as e:
                fut.set_exception(e)

    def _propagate(self, items: list[tuple[Node, int, list[Delta]]], lsn: int,
                   captured: dict[tuple[int, Row], list[Row]] | None = None) -> None:
        """Push deltas up the graph in topological order (node ids are topological).
        ``captured``: the items are held join deltas being replayed (see _process)."""
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
        for node, pidx, deltas in items:
            push(node, pidx, deltas)
        while heap:
            nid = heapq.heappop(heap)
            node = self.graph.nodes.get(nid)
            batches = inbox.pop(nid)
            if node is None:
                continue
            for pidx, deltas in sorted(batches, key=lambda b: b[0]):
                if nid in replayed:
                    out = self._replay_join(node, pidx, deltas, lsn, captured or {})
                else:
                    out = self._process(node, pidx, deltas, lsn)
                if out:
                    for child, cidx in node.children:
                        push(child, cidx, out)

    def _replay_join(self, node: Node, pidx: int, deltas: list[Delta], lsn: int,
                     captured: dict[tuple[int, Row], list[Row]]) -> list[Delta]:
        """Compute held join deltas now that the side they missed is filled. The side
        indexes outside the fill were captured when the deltas were held (they have moved
        on since), and the delta's own side was updated then, so it is not touched here."""
        out = node.op.on_input(pidx, deltas, _CapturedAccess(node, captured))
        for m in out.misses:  # the side was evicted meanwhile: drop, evict what it affects
            self.counters["join_misses"] += 1
            self._evict_downstream(node, pidx, m.delta[0])
        return out.deltas

    def _process(self, node: Node, pidx: int, deltas: list[Delta], lsn: int) -> list[Delta]:
        if node.view is not None:
            st = node.own
            for d in deltas:
                self._apply_rows(st, d, lsn)
            return []
        op = node.op
        st = node.own
        if st is not None:
            passed = []
            for d in deltas:
                group = op.input_group(pidx, d[0])
                fk = tuple([group[i] for i in st.fk_in_index])
                if fk in st.buckets:
                    passed.append(d)
                else:
                    fill = st.pending.get(fk)
                    if fill is not None and lsn > fill.lsn:
                        fill.hold(lsn, fk, ("node", node, pidx, d))
            if not passed:
                return []
            out = op.on_input(pidx, passed, StateAccess(node))
            for group, entry in out.writes.items():
                fk = tuple([group[i] for i in st.fk_in_index])
                st.set_entry(fk, group, entry, op.entry_size(entry) if entry is not None else 0)
                self._touched.add((st, fk))
            for group in out.exhausted:
                self.counters["exhausted"] += 1
                self._evict(st, tuple([group[i] for i in st.fk_in_index]))
            return out.deltas
        out = op.on_input(pidx, deltas, StateAccess(node))
        for m in out.misses:
            side = node.sides[m.side]
            fk = side.fill_key_of_index(m.key)
            fill = side.pending.get(fk)
            if fill is not None and side.mode != "miss" and lsn > fill.lsn:
                # Trace mode: the downstream keys are pending in the same fill. Hold the
                # computation until the missed side is filled, with the other sides' rows
                # as they are now (the replay must not see their later updates, which reach
                # the pending keys on their own). The delta's own side is updated now like
                # any other: deltas from the other side meanwhile must see this one.
                fill.hold(lsn, fk, ("join", node, pidx, m.delta, self._capture(node, m.side, m.key)))
                continue
            self.counters["join_misses"] += 1
            # The update can't be computed: drop it and evict what it could affect; an
            # evict-on-miss index then fills the key it missed.
            self._evict_downstream(node, pidx, m.delta[0])
            if side.mode == "miss":
                self._want(side, fk, None)
        own_side = node.sides.get(pidx)
        if own_side is not None:
            for d in deltas:
                self._apply_rows(own_side, d, lsn)
        return out.deltas

    @staticmethod
    def _capture(node: Node, missed: int, key: Row) -> dict[tuple[int, Row], list[Row]]:
        out = {}
        for s, side in node.sides.items():
            if s != missed:
                rows = side.rows_at(key)
                if rows is not None:
                    out[(s, key)] = rows
        return out

    def _apply_rows(self, st: State, d: Delta, lsn: int) -> None:
        row, sign = d
        fk = st.fill_key_of_row(row)
        bucket = st.buckets.get(fk)
        if bucket is not None:
            st.apply_row(bucket, fk, row, sign)
            self._touched.add((st, fk))
            return
        fill = st.pending.get(fk)
        if fill is not None and lsn > fill.lsn:
            fill.hold(lsn, fk, ("rows", st, d))

    def _after_packet(self) -> None:
        for st, fk in self._touched:
            if st.node.view is not None:
                self._republish.add((st, fk))
            if fk not in st.buckets:
                continue
            size = st.sizes.get(fk, 0)
            if st.mode == "full":
                continue
            old = self.lru.pop((st.sid, fk), 0)
            self.lru[(st.sid, fk)] = size
            self.partial_bytes += size - old
        if any(st.mode == "full" for st, _ in self._touched):
            self.full_bytes = sum(s.memory_bytes for s in self.states.values() if s.mode == "full")
        self._touched.clear()
        self._enforce_memory()
        self._issue_wanted()
        self._publish()

    def _publish(self) -> None:
        """Make this packet's reader changes visible to lock-free reads, atomically with
        the LSN they are exact at."""
        self.drain_read_log()
        if self._republish:
            self.pub_version += 1  # odd: readers retry
            for st, fk in self._republish:
                if fk in st.buckets:
                    st.published[fk] = tuple(st.bucket_rows(fk))
                else:
                    st.published.pop(fk, None)
            self._republish.clear()
            self.published_lsn = self.applied_lsn
            self.pub_version += 1
        else:
            # No reader rows changed: the published rows are exact at the new LSN too.
            self.published_lsn = self.applied_lsn

    def drain_read_log(self) -> None:
        """Account lock-free reads: LRU recency and hit/miss counters (caller holds the lock)."""
        log_ = self.read_log
        while log_:
            st, fk, hit = log_.popleft()
            counters = self.view_counters[st.node.view]
            if hit:
                counters["hits"] += 1
                self.touch(st, fk)
            else:
                counters["misses"] += 1

    def wait_for(self, lsn: int, deadline: float) -> None:
        if self.published_lsn >= lsn:  # the common case needs no lock
            return
        with self.lsn_changed:
            while self.published_lsn < lsn:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded(f"timed out waiting for LSN {lsn} (applied: {self.applied_lsn})")
                self.lsn_changed.wait(min(left, 0.5))

    def register_states(self, states: list[State]) -> None:
        for st in states:
            self.states[st.sid] = st

    def forget_states(self, states: list[State]) -> None:
        for st in states:
            for fk in list(st.buckets):
                self._evict(st, fk) if st.mode != "full" else None
            # A fill of a dropped state may also fill shared states below it: abort it
            # properly, or those keys would stay pending (holding updates) for good.
            for fill in set(st.pending.values()):
                self._abort_fill(fill, Unavailable("the view was dropped while this read waited for it"))
            st.pending.clear()
            self.wanted.pop(st, None)
            self.states.pop(st.sid, None)
        self.full_bytes = sum(s.memory_bytes for s in self.states.values() if s.mode == "full")


class _CapturedAccess(StateAccess):
    """Join lookups for a replayed held delta: captured rows where there are some, the
    (now filled) index otherwise."""

    __slots__ = ("captured",)

    def __init__(self, node: Node, captured: dict[tuple[int, Row], list[Row]]) -> None:
        super().__init__(node)
        self.captured = captured

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        rows = self.captured.get((side, key))
        return rows if rows is not None else self.node.sides[side].rows_at(key)
