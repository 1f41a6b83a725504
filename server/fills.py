"""Fills: turning misses into upqueries and replies into filled state, in order.

Part of the executor (a mixin: all methods run on the executor thread under its lock). A
miss is *wanted*; a wanted key is issued as a fill — the key plus every hole below it on
its trace path, all from one snapshot LSN — unless a state below is still pending, in
which case it waits. A reply fills the states bottom-up (from Spark rows, or derived in
Python from a grouped state below through filter/project nodes), then replays the
updates held meanwhile in LSN order, then answers the waiting reads.
"""

from __future__ import annotations

import logging
import time
from itertools import groupby
from typing import TYPE_CHECKING

from partialflow.operators.base import Row
from partialflow.server.errors import DeadlineExceeded, Unavailable
from partialflow.server.state import State, StateAccess
from partialflow.server.upquery import Fill, Waiter

if TYPE_CHECKING:
    pass

log = logging.getLogger("partialflow.executor")

# A state's misses gather until none came for GATHER_QUIET seconds (at most GATHER_MAX
# after the first), then go out as one fill; at most MAX_FILLS_PER_STATE fills of one
# state run at once (the rest wait).
GATHER_QUIET = 0.005
GATHER_MAX = 0.05
MAX_FILLS_PER_STATE = 2


class FillsMixin:
    def _want(self, st: State, fk: Row, waiter: Waiter | None) -> None:
        if fk in st.buckets:
            if waiter is not None:
                self._answer(st, fk, [waiter])
            return
        fill = st.pending.get(fk)
        if fill is not None:
            if waiter is not None:
                fill.waiters.setdefault(fk, []).append(waiter)
            return
        now = time.monotonic()
        first, _ = self._miss_times.get(st.sid, (now, now))
        self._miss_times[st.sid] = (first, now)
        ws = self.wanted.setdefault(st, {}).setdefault(fk, [])
        if waiter is not None:
            ws.append(waiter)

    def _issue_wanted(self) -> None:
        """Issue wanted keys as fills, gathering concurrent misses first: a state's wanted
        keys go out once misses have paused for GATHER_QUIET (or GATHER_MAX after the
        first of them), as one Spark job. A lone cold read waits GATHER_QUIET; a burst of
        64 concurrent cold reads costs about one upquery instead of two or more (with
        more jobs, they only slow each other down on a small machine). Misses that
        arrive while a fill is in flight gather the same way into a second concurrent
        fill; at most MAX_FILLS_PER_STATE run at once."""
        now = time.monotonic()
        wake = None
        for st in list(self.wanted):
            if len(self.inflight.get(st.sid, ())) >= MAX_FILLS_PER_STATE:
                continue  # issued when one finishes
            times = self._miss_times.get(st.sid)  # None: keys left over, due already
            due = now if times is None else min(times[0] + GATHER_MAX, times[1] + GATHER_QUIET)
            if now >= due:
                self._miss_times.pop(st.sid, None)
                self._issue(st)
            else:
                wake = due if wake is None else min(wake, due)
        if wake is not None:
            self._wake_at(wake)

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
            # States derivable from filled state are derived now, bottom-up, not with the
            # reply: a source outside the fill keeps moving while Spark runs, and deriving
            # from it later would count the updates held meanwhile twice.
            pending = []
            for x in sorted(states, key=lambda s: s.node.nid):
                if x.source is not None and fk in x.source[0].buckets:
                    self._derive(x, [fk])
                    self._touched.add((x, fk))
                else:
                    pending.append(x)
            if not pending:
                self._answer(st, fk, wanted.pop(fk))
                continue
            fill.waiters[fk] = wanted.pop(fk)
            for x in pending:
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
        self.inflight.setdefault(st.sid, []).append(fill)
        self.fills.add(fill)
        self.counters["upqueries"] += 1
        self.runner.submit(fill, lambda f, r, e: self.submit("fill_done", f, r, e))

    def _uninflight(self, fill: Fill) -> None:
        fills = self.inflight.get(fill.requester.sid)
        if fills and fill in fills:
            fills.remove(fill)
            if not fills:
                del self.inflight[fill.requester.sid]

    def _finish_fill(self, fill: Fill, results: dict[int, list[Row]] | None, error: Exception | None) -> None:
        if fill.dead:
            return
        self.fills.discard(fill)
        self._uninflight(fill)
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
        # Replay what was held in the order it happened; consecutive deltas held by one
        # node from one input are one batch again, as when they first arrived.
        held = sorted((h for h in fill.held if h[2] not in fill.cancelled), key=lambda h: (h[0], h[1]))
        for (lsn, kind, _, _), group in groupby(held, key=_batch_key):
            items = [h[3] for h in group]
            if kind == "rows":
                for item in items:
                    self._apply_rows(item[1], item[2], lsn)
                continue
            captured = {k: v for i in items for k, v in i[4].items()} if kind == "join" else None
            self._propagate([(items[0][1], items[0][2], [i[3] for i in items])], lsn, captured)
        st = fill.requester
        for fk, ws in fill.waiters.items():
            if fk in st.buckets:
                self._answer(st, fk, ws)
            else:
                for w in ws:
                    self._want(st, fk, w)

    def _answer(self, st: State, fk: Row, waiters: list[Waiter]) -> None:
        """Deliver a filled key's rows to the reads waiting for it, at the applied LSN."""
        rows = st.bucket_rows(fk) if st.kind == "rows" else []
        for w in waiters:
            w.deliver(fk, rows, self.applied_lsn)

    def _observe(self, event: str, fields: dict) -> None:
        for fn in self.observers:
            try:
                fn(event, fields)
            except Exception:  # a metrics hook must never break the executor
                log.exception("observer failed")

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
                self._observe("upquery", {"view": fill.requester.node.view, "ms": (now - fill.started) * 1000, "ok": False})
                self._abort_fill(fill, DeadlineExceeded(f"upquery for {fill.requester.label} exceeded {self.upquery_timeout:g}s"))

    def _abort_fill(self, fill: Fill, error: Exception) -> None:
        """Give up on a fill before its reply: its keys become holes again everywhere (a
        reply arriving later is ignored) and its reads fail with ``error``."""
        if fill.dead:
            return
        self.fills.discard(fill)
        self._uninflight(fill)
        fill.dead = True
        self.runner.cancel(fill)
        self._fail_fill(fill, error)

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
                deltas = n.op.on_input(0, deltas, StateAccess(n)).deltas
            bucket = st.new_bucket(k)
            if st.kind == "rows":
                for row, sign in deltas:
                    st.apply_row(bucket, k, row, sign)
            else:
                op = st.node.op
                out = op.on_input(0, deltas, StateAccess(st.node, bucket))
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



def _batch_key(h: tuple) -> tuple:
    """Held items that replay as one batch: same LSN, kind, and node and input (or state)."""
    lsn, _, _, item = h
    if item[0] == "rows":
        return (lsn, "rows", item[1].sid, 0)
    return (lsn, item[0], item[1].nid, item[2])
