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
import logging
import math
import queue
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future
from itertools import groupby
from typing import Any, Callable

from cachetools import LRUCache

from partialflow.operators.base import Delta, Row
from partialflow.server.errors import DeadlineExceeded, Unavailable
from partialflow.server.graph import Graph, Node
from partialflow.server.state import State
from partialflow.server.upquery import Fill, UpqueryRunner, Waiter

log = logging.getLogger("partialflow.executor")


class _View:
    """The read-only state an operator sees (operators/base.py StateView)."""

    __slots__ = ("node", "own_bucket")

    def __init__(self, node: Node, own_bucket: dict | None = None) -> None:
        self.node = node
        self.own_bucket = own_bucket

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        return self.node.sides[side].rows_at(key)

    def own(self, group: Row) -> Any | None:
        if self.own_bucket is not None:
            return self.own_bucket.get(group)
        st = self.node.own
        bucket = st.buckets.get(tuple([group[i] for i in st.fk_in_index]))
        return None if bucket is None else bucket.get(group)


class Executor:
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
        self.inflight: dict[int, Fill] = {}  # requester sid -> its fill
        self.fills: set[Fill] = set()
        self.waiting: set[Fill] = set()  # replied, waiting for index keys they hold for
        self._touched: set[tuple[State, Row]] = set()
        self.counters: Counter = Counter()
        self.view_counters: dict[str, Counter] = defaultdict(Counter)
        self.upquery_ms: list[float] = []
        # Called on the executor thread as fn(event, fields), e.g. ("upquery", {"view",
        # "ms", "ok"}) when a fill finishes; for metrics. Keep them cheap.
        self.observers: list[Callable[[str, dict], None]] = []
        self._running = False
        self._thread = threading.Thread(target=self._loop, name="executor", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self.queue.put(("stop",))
        self._thread.join(timeout=10)

    def submit(self, *packet: Any) -> None:
        self.queue.put(packet)

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
        elif kind == "call":
            _, fn, fut = packet
            try:
                fut.set_result(fn())
            except Exception as e:
                fut.set_exception(e)

    # -- propagation -------------------------------------------------------------------
    def _propagate(self, items: list[tuple[Node, int, list[Delta]]], lsn: int) -> None:
        """Push deltas up the graph in topological order (node ids are topological)."""
        inbox: dict[int, list[tuple[int, list[Delta]]]] = {}
        heap: list[int] = []

        def push(node: Node, pidx: int, deltas: list[Delta]) -> None:
            if not deltas:
                return
            if node.nid not in inbox:
                inbox[node.nid] = []
                heapq.heappush(heap, node.nid)
            inbox[node.nid].append((pidx, deltas))

        for node, pidx, deltas in items:
            push(node, pidx, deltas)
        while heap:
            nid = heapq.heappop(heap)
            node = self.graph.nodes.get(nid)
            batches = inbox.pop(nid)
            if node is None:
                continue
            for pidx, deltas in sorted(batches, key=lambda b: b[0]):
                out = self._process(node, pidx, deltas, lsn)
                if out:
                    for child, cidx in node.children:
                        push(child, cidx, out)

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
            out = op.on_input(pidx, passed, _View(node))
            for group, entry in out.writes.items():
                fk = tuple([group[i] for i in st.fk_in_index])
                st.set_entry(fk, group, entry, op.entry_size(entry) if entry is not None else 0)
                self._touched.add((st, fk))
            for group in out.exhausted:
                self.counters["exhausted"] += 1
                self._evict(st, tuple([group[i] for i in st.fk_in_index]))
            return out.deltas
        out = op.on_input(pidx, deltas, _View(node))
        held: Counter = Counter()
        for m in out.misses:
            side = node.sides[m.side]
            fk = side.fill_key_of_index(m.key)
            fill = side.pending.get(fk)
            if fill is not None and side.mode != "miss" and lsn > fill.lsn:
                # Trace mode: the downstream keys are pending in the same fill.
                fill.hold(lsn, fk, ("node", node, pidx, m.delta))
                held[m.delta] += 1
                continue
            self.counters["join_misses"] += 1
            if side.mode == "miss":
                if self._hold_for_pending(node, pidx, m.delta, lsn, side, fk):
                    held[m.delta] += 1
                else:
                    self._evict_downstream(node, pidx, m.delta[0])
                self._want(side, fk, None)
            else:
                self._evict_downstream(node, pidx, m.delta[0])
        own_side = node.sides.get(pidx)
        if own_side is not None:
            for d in deltas:
                if held[d] > 0:
                    held[d] -= 1
                    continue
                self._apply_rows(own_side, d, lsn)
        return out.deltas

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

    # -- eviction ----------------------------------------------------------------------
    def _evict(self, st: State, fk: Row, *, reason: str = "evict") -> None:
        if st.mode == "full":
            return
        if fk in st.buckets:
            st.drop(fk)
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

    def _hold_for_pending(self, node: Node, pidx: int, delta: Delta, lsn: int, side: State, fk: Row) -> bool:
        """A miss in an evict-on-miss index whose only affected downstream key is being
        filled: rather than cancel that fill (which under steady updates can starve it),
        hold the delta in it and complete the fill only once the index key is filled too.
        Replaying then counts every pair of the join exactly once, as the delta's own index
        update is deferred with it."""
        targets = self._downstream_keys(node, pidx, delta[0])
        if not targets or any(k is None or k in st.buckets for st, k in targets):
            return False
        fills = {st.pending[k] for st, k in targets if k in st.pending}
        if len(fills) != 1:
            return False
        fill = fills.pop()
        if lsn <= fill.lsn:
            return False
        key = next(k for st, k in targets if k in st.pending)
        fill.hold(lsn, key, ("node", node, pidx, delta))
        fill.needs.add((side, fk))
        self.counters["held_for_index"] += 1
        return True

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

    def _after_packet(self) -> None:
        for st, fk in self._touched:
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
        self._retry_waiting()
        self._enforce_memory()
        self._issue_wanted()

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
        if any(fk in d.pending for d in st.dependents):
            return True
        return any((st, fk) in f.needs for f in self.waiting) or any((st, fk) in f.needs for f in self.fills)

    def touch(self, st: State, fk: Row) -> None:
        """A read hit: mark the key recently used (caller holds the lock)."""
        key = (st.sid, fk)
        if key in self.lru:
            self.lru[key]  # LRUCache moves it to the most recent end on access

    # -- fills -------------------------------------------------------------------------
    def _want(self, st: State, fk: Row, waiter: Waiter | None) -> None:
        if fk in st.buckets:
            if waiter is not None:
                waiter.deliver(fk, st.bucket_rows(fk), self.applied_lsn)
            return
        fill = st.pending.get(fk)
        if fill is not None:
            if waiter is not None:
                fill.waiters.setdefault(fk, []).append(waiter)
            return
        ws = self.wanted.setdefault(st, {}).setdefault(fk, [])
        if waiter is not None:
            ws.append(waiter)

    def _issue_wanted(self) -> None:
        for st in list(self.wanted):
            if st.sid not in self.inflight:
                self._issue(st)

    def _closure(self, st: State, fk: Row) -> list[State] | None:
        """``st`` and every hole below it at ``fk``; None while one below is pending."""
        out = [st]
        stack = list(st.below)
        while stack:
            m = stack.pop()
            if fk in m.buckets or m in out:
                continue
            if fk in m.pending:
                return None
            out.append(m)
            stack.extend(m.below)
        return out

    def _issue(self, st: State) -> None:
        wanted = self.wanted.get(st)
        if not wanted:
            self.wanted.pop(st, None)
            return
        fill = Fill(requester=st, lsn=self.applied_lsn)
        for fk in list(wanted):
            if fk in st.buckets or fk in st.pending:  # filled or claimed meanwhile
                for w in wanted.pop(fk):
                    self._want(st, fk, w)
                continue
            states = self._closure(st, fk)
            if states is None:
                continue
            fill.waiters[fk] = wanted.pop(fk)
            for x in states:
                fill.keys.setdefault(x, set()).add(fk)
                x.pending[fk] = fill
        if not wanted:
            self.wanted.pop(st, None)
        if not fill.keys:
            return
        fill.roots = [x for x in fill.keys if x.source is None]
        self.counters["fills"] += 1
        for v in st.node.users if st.node.view is not None else ():
            self.view_counters[v]["upqueries"] += 1 if fill.roots else 0
        if not fill.roots:
            self._finish_fill(fill, {}, None)  # derivable from filled state: no Spark
            return
        fill.snapshot = self.runner.storage.snapshot(fill.lsn)
        self.inflight[st.sid] = fill
        self.fills.add(fill)
        self.counters["upqueries"] += 1
        self.runner.submit(fill, lambda f, r, e: self.submit("fill_done", f, r, e))

    def _finish_fill(self, fill: Fill, results: dict[int, list[Row]] | None, error: Exception | None) -> None:
        if fill.dead:
            return
        if error is None and self._missing_needs(fill):
            fill.results = results  # complete once the index keys it held for are filled
            self.waiting.add(fill)
            return
        self.waiting.discard(fill)
        self.fills.discard(fill)
        if self.inflight.get(fill.requester.sid) is fill:
            del self.inflight[fill.requester.sid]
        fill.dead = True
        ms = (time.monotonic() - fill.started) * 1000
        self.upquery_ms.append(ms)
        if len(self.upquery_ms) > 20_000:
            del self.upquery_ms[:10_000]
        self._observe("upquery", {"view": fill.requester.node.view, "ms": ms, "ok": error is None})
        if error is not None:
            self._fail_fill(fill, error)
            return
        for x in sorted(fill.keys, key=lambda s: s.node.nid):
            keys = [k for k in fill.keys[x] if k not in fill.cancelled and x.pending.get(k) is fill]
            if x.source is None:
                self._load(x, keys, results[x.sid])
            else:
                self._derive(x, keys)
            for k in keys:
                del x.pending[k]
                self._touched.add((x, k))
        held = sorted((h for h in fill.held if h[2] not in fill.cancelled), key=lambda h: (h[0], h[1]))
        for lsn, group in groupby(held, key=lambda h: h[0]):
            items = []
            for _, _, _, item in group:
                if item[0] == "rows":
                    self._apply_rows(item[1], item[2], lsn)
                else:
                    items.append((item[1], item[2], [item[3]]))
            self._propagate(items, lsn)
        st = fill.requester
        for fk, ws in fill.waiters.items():
            for w in ws:
                if fk in st.buckets:
                    w.deliver(fk, st.bucket_rows(fk) if st.kind == "rows" else [], self.applied_lsn)
                else:
                    self._want(st, fk, w)

    def _observe(self, event: str, fields: dict) -> None:
        for fn in self.observers:
            try:
                fn(event, fields)
            except Exception:  # a metrics hook must never break the executor
                log.exception("observer failed")

    def _missing_needs(self, fill: Fill) -> bool:
        missing = False
        for st, fk in fill.needs:
            if fk not in st.buckets:
                missing = True
                if fk not in st.pending and st.sid in self.states:
                    self._want(st, fk, None)
        return missing

    def _retry_waiting(self) -> None:
        for fill in list(self.waiting):
            if not self._missing_needs(fill):
                self._finish_fill(fill, fill.results, None)

    def _fail_fill(self, fill: Fill, error: Exception) -> None:
        for x, keys in fill.keys.items():
            for k in keys:
                if x.pending.get(k) is fill:
                    del x.pending[k]
        err = error if isinstance(error, (DeadlineExceeded, Unavailable)) else Unavailable(f"upquery failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
        for ws in fill.waiters.values():
            for w in ws:
                w.fail(err)
        self.counters["upquery_failures"] += 1

    def _cancel(self, fill: Fill, fk: Row) -> None:
        fill.cancelled.add(fk)
        for x, keys in fill.keys.items():
            if fk in keys and x.pending.get(fk) is fill:
                del x.pending[fk]
        for w in fill.waiters.pop(fk, []):
            self._want(fill.requester, fk, w)
        self.counters["fills_cancelled"] += 1

    def _expire_fills(self) -> None:
        now = time.monotonic()
        for fill in list(self.fills):
            if now - fill.started > self.upquery_timeout:
                self.fills.discard(fill)
                self.waiting.discard(fill)
                if self.inflight.get(fill.requester.sid) is fill:
                    del self.inflight[fill.requester.sid]
                fill.dead = True
                self.runner.cancel(fill)
                self._observe("upquery", {"view": fill.requester.node.view, "ms": (now - fill.started) * 1000, "ok": False})
                self._fail_fill(fill, DeadlineExceeded(f"upquery for {fill.requester.label} exceeded {self.upquery_timeout:g}s"))

    # -- filling states ----------------------------------------------------------------
    def _load(self, st: State, keys: list[Row], rows: list[Row]) -> None:
        keyset = set(keys)
        for k in keys:
            st.new_bucket(k)
        if st.kind == "rows":
            for row in rows:
                fk = st.fill_key_of_row(row)
                if fk in keyset:
                    st.apply_row(st.buckets[fk], fk, row, 1)
            return
        op = st.node.op
        for group, entry in op.load_entries(rows).items():
            fk = tuple([group[i] for i in st.fk_in_index])
            if fk in keyset:
                st.set_entry(fk, group, entry, op.entry_size(entry))

    def _derive(self, st: State, keys: list[Row]) -> None:
        """Fill ``st`` from its source state through filter/project nodes, in Python."""
        src, chain = st.source
        sop = src.node.op
        for k in keys:
            deltas = [(r, 1) for g, e in src.buckets[k].items() for r in sop.output_rows(g, e)]
            for n in chain:
                deltas = n.op.on_input(0, deltas, _View(n)).deltas
            bucket = st.new_bucket(k)
            if st.kind == "rows":
                for row, sign in deltas:
                    st.apply_row(bucket, k, row, sign)
            else:
                op = st.node.op
                out = op.on_input(0, deltas, _View(st.node, bucket))
                for group, entry in out.writes.items():
                    if entry is not None:
                        st.set_entry(k, group, entry, op.entry_size(entry))
                if not op.group_columns() and () not in bucket and hasattr(op, "initial_entry"):
                    # A global aggregate always has its one group, even over no rows.
                    entry = op.initial_entry()
                    st.set_entry(k, (), entry, op.entry_size(entry))

    def load_full(self, states: list[State]) -> Waiter:
        """Load new full states with one fill at the current LSN (view creation)."""
        fill = Fill(requester=states[0], lsn=self.applied_lsn)
        waiter = Waiter({()})
        fill.waiters[()] = [waiter]
        for x in states:
            fill.keys[x] = {()}
            x.pending[()] = fill
        fill.roots = list(states)
        fill.snapshot = self.runner.storage.snapshot(fill.lsn)
        self.fills.add(fill)
        self.counters["full_loads"] += 1
        self.runner.submit(fill, lambda f, r, e: self.submit("fill_done", f, r, e))
        return waiter

    # -- reads -------------------------------------------------------------------------
    def wait_for(self, lsn: int, deadline: float) -> None:
        with self.lsn_changed:
            while self.applied_lsn < lsn:
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
            for fill in set(st.pending.values()):
                fill.dead = True
            st.pending.clear()
            self.wanted.pop(st, None)
            self.states.pop(st.sid, None)
        self.full_bytes = sum(s.memory_bytes for s in self.states.values() if s.mode == "full")
