"""The fill coordinator: turning misses into upqueries and replies into filled state.

It owns everything about fills: the keys *wanted* (misses gathering into the next fill),
the fills *in flight* (per requesting state, and all of them for deadlines), what each
fill *holds*, and the coalescing window. All methods run on the executor thread under its
lock; the executor (``FillHost``) supplies its position (the LSN a fill's snapshot is
taken at), propagation (to replay held updates) and end-of-packet accounting.

A miss is *wanted*; a wanted key is issued as a fill — the key plus every hole below it on
its trace path, all from one snapshot LSN — unless a state below is still pending, in
which case it waits. A reply fills the states bottom-up (from the runner's rows, or
derived in Python from a grouped state below through filter/project nodes), then replays
the updates held meanwhile in LSN order, then answers the waiting reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from partialflow.operators.base import Row
from partialflow.operators.grouped import by_group
from partialflow.server.dataflow.access import StateAccess
from partialflow.server.dataflow.fill import Fill, Held, Waiter
from partialflow.server.dataflow.gating import Gates, IndexFills
from partialflow.server.dataflow.packets import FillDone, Packet
from partialflow.server.dataflow.prefetch import Prefetcher
from partialflow.server.dataflow.runner import FillResults, UpqueryRunner
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import Stats
from partialflow.server.errors import DeadlineExceeded, Unavailable

log = logging.getLogger("partialflow.executor")

# A state's misses gather until none came for GATHER_QUIET seconds (at most GATHER_MAX
# after the first), then go out as one fill; at most MAX_FILLS_PER_STATE fills of one
# state run at once (the rest wait).
GATHER_QUIET = 0.005
GATHER_MAX = 0.05
MAX_FILLS_PER_STATE = 2


class FillHost(Protocol):
    """What the coordinator needs from the executor."""

    applied_lsn: int

    def submit(self, packet: Packet) -> None: ...
    def changed(self, st: State, fk: Row) -> None: ...
    def replay(self, held: list[Held], before: Callable[[int], None] | None = None,
               scope: dict[tuple[State, Row], int] | None = None) -> None: ...
    def evict(self, st: State, fk: Row) -> None: ...
    def landed(self, st: State, keys: list[Row], lsn: int) -> None: ...
    def wake_at(self, when: float) -> None: ...
    def observe(self, event: str, fields: dict) -> None: ...


class FillCoordinator:
    def __init__(self, host: FillHost, runner: UpqueryRunner, stats: Stats, *,
                 upquery_timeout: float, clock: Callable[[], float],
                 prefetch: bool = True) -> None:
        self.host = host
        self.runner = runner
        self.stats = stats
        self.upquery_timeout = upquery_timeout
        self.clock = clock
        self.wanted: dict[State, dict[Row, list[Waiter]]] = {}
        # state sid -> (first, last) time a key was wanted since its last fill was issued
        self._miss_times: dict[int, tuple[float, float]] = {}
        self.inflight: dict[int, list[Fill]] = {}  # requester sid -> its fills in flight
        # Every fill in flight, for deadlines (a dict: ordered by issue, not by address).
        self.active: dict[Fill, None] = {}
        self.index = IndexFills(host, stats, clock)
        self.prefetcher = Prefetcher(stats, enabled=prefetch)

    # -- misses ------------------------------------------------------------------------
    def want(self, st: State, fk: Row, waiter: Waiter | None, derive: bool = False) -> None:
        """``fk`` of ``st`` is needed (by ``waiter``, or by an evict-on-miss index).
        ``derive``: the caller is between propagations (a read's miss packet), so a key
        derivable from filled state may be derived at once."""
        status = st.lookup(fk)
        if status == "hit":
            if waiter is not None:
                self.answer(st, fk, [waiter])
            return
        if status == "pending":
            if waiter is not None:
                st.pending_fill(fk).waiters.setdefault((st, fk), []).append(waiter)  # type: ignore[union-attr]
            return
        if derive and self.derive_now(st, fk):
            if waiter is not None:
                self.answer(st, fk, [waiter])
            return
        now = self.clock()
        first, _ = self._miss_times.get(st.sid, (now, now))
        self._miss_times[st.sid] = (first, now)
        ws = self.wanted.setdefault(st, {}).setdefault(fk, [])
        if waiter is not None:
            ws.append(waiter)

    def derive_now(self, st: State, fk: Row) -> bool:
        """Derive hole ``fk`` of ``st`` now if it is derivable from filled state (a view's
        key from its aggregate's, in memory or shelved in the disk tier): no upquery to
        gather it with, so it is derived at once, as ``_issue`` would at the packet's end.
        Between propagations only (a read's miss packet, keys readers read from the disk
        tier brought back: executor.py). False if it can't be."""
        if st.source is None or st.lookup(fk) != "hole" or self._closure(st, fk) != [st]:
            return False
        self._derive(st, [fk])
        self.host.changed(st, fk)
        return True

    def issue_wanted(self) -> None:
        """Issue wanted keys as fills, gathering concurrent misses first: a state's wanted
        keys go out once misses have paused for GATHER_QUIET (or GATHER_MAX after the
        first of them), as one upquery. A lone cold read waits GATHER_QUIET; a burst of
        64 concurrent cold reads costs about one upquery instead of two or more (with
        more jobs, they only slow each other down on a small machine). Misses that
        arrive while a fill is in flight gather the same way into a second concurrent
        fill; at most MAX_FILLS_PER_STATE run at once."""
        for fill in self.index.take_new():
            self.stats.count("index_fills")
            self.stats.count("upqueries")
            self._submit(fill)
        now = self.clock()
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
            self.host.wake_at(wake)

    def index_fill(self, side: State, fk: Row) -> Fill | None:
        """The index fill for hole ``fk`` of evict-on-miss ``side`` (see gating.py)."""
        return self.index.fill_for(side, fk, self._closure)

    def _closure(self, st: State, fk: Row) -> list[State] | None:
        """``st`` and every hole below it at ``fk``; None while one below is pending."""
        out = [st]
        stack = list(st.below)
        while stack:
            m = stack.pop()
            if m.is_filled(fk) or m in out:
                continue
            if m.is_pending(fk):
                return None
            out.append(m)
            stack.extend(m.below)
        return out

    def _issue(self, st: State) -> None:
        wanted = self.wanted.get(st)
        if not wanted:
            self.wanted.pop(st, None)
            return
        fill = Fill(requester=st, lsn=self.host.applied_lsn, started=self.clock())
        for fk in list(wanted):
            if st.lookup(fk) != "hole":  # filled or claimed meanwhile
                for w in wanted.pop(fk):
                    self.want(st, fk, w)
                continue
            states = self._closure(st, fk)
            if states is None:
                continue  # a state below is pending: wait for it
            # States derivable from filled state are derived now, bottom-up, not with the
            # reply: a source outside the fill keeps moving while the upquery runs, and
            # deriving from it later would count the updates held meanwhile twice.
            pending = []
            for x in sorted(states, key=lambda s: s.node.nid):
                if x.source is not None and x.source[0].is_filled(fk):
                    self._derive(x, [fk])
                    self.host.changed(x, fk)
                else:
                    pending.append(x)
            if not pending:
                self.answer(st, fk, wanted.pop(fk))
                continue
            fill.waiters[(st, fk)] = wanted.pop(fk)
            for x in pending:
                fill.add(x, fk)
        if not wanted:
            self.wanted.pop(st, None)
        if not fill.keys:
            return
        fill.roots = [x for x in fill.keys if x.source is None]
        self.stats.count("fills")
        if fill.roots:
            for v in st.node.users if st.node.view is not None else ():
                self.stats.count_view(v, "upqueries")
        if not fill.roots:
            self.finish(fill, {}, None)  # derivable from filled state: no upquery
            return
        self.inflight.setdefault(st.sid, []).append(fill)
        self.stats.count("upqueries")
        self._submit(fill)

    def load_full(self, states: list[State]) -> Waiter:
        """Load new full states with one fill at the current LSN (view creation)."""
        fill = Fill(requester=states[0], lsn=self.host.applied_lsn, started=self.clock())
        waiter = Waiter({()})
        fill.waiters[(states[0], ())] = [waiter]
        for x in states:
            fill.add(x, ())
        fill.roots = list(states)
        self.stats.count("full_loads")
        self._submit(fill)
        return waiter

    def _submit(self, fill: Fill) -> None:
        self.active[fill] = None
        host = self.host
        try:
            self.runner.submit(fill, lambda f, r, e: host.submit(FillDone(f, r, e)))
        except Exception as e:  # e.g. no snapshot at that LSN: fail the reads, not the loop
            log.warning("upquery %d could not start: %s", fill.fid, e)
            self.finish(fill, None, e)

    # -- replies -----------------------------------------------------------------------
    def finish(self, fill: Fill, results: FillResults | None, error: BaseException | None) -> None:
        """Apply the runner's reply: fill (and unblock), replay what was held, answer the
        reads."""
        if fill.dead:
            return
        self._retire(fill)
        ms = (self.clock() - fill.started) * 1000
        self.stats.record_upquery(ms)
        self.host.observe(
            "upquery", {"view": fill.requester.node.view, "ms": ms, "ok": error is None}
        )
        if error is not None:
            if fill.index:
                self.index.failed(fill)
                self._abandon(fill, error)
            else:
                self._fail(fill, error)
            return
        assert results is not None
        if fill.index:
            self.index.succeeded(fill)
        # Keys made readable, each with the LSN after which this fill's held updates
        # reach it (an index fill's replay changes no other filled key).
        ready: dict[tuple[State, Row], int] = {}
        for x in sorted(fill.keys, key=lambda s: s.node.nid):
            keys = [
                k for k in fill.keys[x]
                if (x.sid, k) not in fill.cancelled and x.pending_fill(k) is fill
            ]
            if x.source is None:
                self._load(x, keys, results[x.sid])
            else:
                self._derive(x, keys)
            for k in keys:
                x.clear_pending(k, fill)
                self.host.changed(x, k)
                ready[(x, k)] = fill.lsn
            if keys and not fill.index and x.node.view is not None:
                self.host.landed(x, keys, fill.lsn)  # exact at fill.lsn until the replay
        for (st, fk), since in fill.gated.items():  # blocked keys get their rows back
            if st.unblock(fk, fill):
                self.host.changed(st, fk)
                ready[(st, fk)] = since
                if st.node.view is not None:
                    self.host.landed(st, [fk], since)
        # Replay what was held in the order it happened. Keys that index fills gated
        # meanwhile are blocked on them at the LSN they were gated at: held updates up to
        # that LSN apply first, later ones reach the blocked key and are held again.
        gates = Gates(fill, ready, self.host)
        self.host.replay(fill.held_in_order(), gates.before, ready if fill.index else None)
        gates.before(None)
        for (st, fk), ws in fill.waiters.items():
            if st.is_filled(fk):
                self.answer(st, fk, ws)
            else:
                for w in ws:
                    self.want(st, fk, w)
        if not fill.index and self.prefetcher.enabled:
            # Keys blocked again (gated while this fill was in flight) count too: what
            # they depend on is known from the full side, not from their rows, and
            # skipping them left the index cold exactly where moves keep gating.
            self.prefetch([key for key in ready
                           if key[0].is_filled(key[1]) or key[0].is_blocked(key[1])])

    def prefetch(self, filled: list[tuple[State, Row]], most: int | None = None) -> int:
        """Fetch the index keys that ``filled`` keys (a read's fill just filled them, or
        they are subscribed) depend on, in this packet's index fills (prefetch.py):
        pending from the current position on, gating nothing. Returns how many."""
        n = 0
        for side, keys in self.prefetcher.keys(filled, most).items():
            for fk in keys:
                if side.lookup(fk) == "hole" and self.index.fill_for(
                        side, fk, self._closure) is not None:
                    n += 1
        return n

    def answer(self, st: State, fk: Row, waiters: list[Waiter]) -> None:
        """Deliver a filled key's rows to the reads waiting for it, at the applied LSN."""
        rows = st.bucket_rows(fk) if st.kind == "rows" else []
        for w in waiters:
            w.deliver(fk, rows, self.host.applied_lsn)

    def _retire(self, fill: Fill) -> None:
        """``fill`` is no longer in flight (answered, failed or aborted)."""
        self.active.pop(fill, None)
        fills = self.inflight.get(fill.requester.sid)
        if fills and fill in fills:
            fills.remove(fill)
            if not fills:
                del self.inflight[fill.requester.sid]
        fill.dead = True

    def _fail(self, fill: Fill, error: BaseException) -> None:
        for x, keys in fill.keys.items():
            for k in keys:
                x.clear_pending(k, fill)
        err = _read_error(error)
        for ws in fill.waiters.values():
            for w in ws:
                w.fail(err)
        self.stats.count("upquery_failures")

    def _abandon(self, fill: Fill, error: BaseException | None) -> None:
        """An index fill that will not land (``fill`` is retired): the deltas it holds are
        lost, so every key they would reach becomes a hole (evicted, with the states
        above); its reads fail with ``error``, or, without one, are asked again."""
        for x, keys in fill.keys.items():
            for k in keys:
                x.clear_pending(k, fill)
        for st, fk in list(fill.gated):
            self.host.evict(st, fk)
        for (st, fk), ws in fill.waiters.items():
            for w in ws:
                if error is not None:
                    w.fail(_read_error(error))
                else:
                    self.want(st, fk, w)
        self.stats.count("index_fills_abandoned")

    # -- giving up on keys or fills ----------------------------------------------------
    def cancel(self, fill: Fill, st: State, fk: Row) -> None:
        """``fk`` of ``st`` was evicted while pending on ``fill``. A read's fill discards
        its reply for that key everywhere and asks for its reads again; an index fill is
        abandoned (its held deltas may reach the key)."""
        if fill.dead:  # being abandoned: only the key is left to clear
            st.clear_pending(fk, fill)
            return
        if fill.index:
            self._retire(fill)
            self.runner.cancel(fill)
            st.clear_pending(fk, fill)
            self._abandon(fill, None)
            return
        for x, keys in fill.keys.items():
            if fk in keys:
                fill.cancelled.add((x.sid, fk))
                x.clear_pending(fk, fill)
        st.clear_pending(fk, fill)  # a key pending on the fill outside its own keys
        for key in [key for key in fill.waiters if key[1] == fk]:
            for w in fill.waiters.pop(key):
                self.want(key[0], fk, w)
        self.stats.count("fills_cancelled")

    def expire(self) -> None:
        """Abort fills past their deadline (their reads fail with DeadlineExceeded)."""
        now = self.clock()
        for fill in list(self.active):
            if now - fill.started > self.upquery_timeout:
                self.host.observe(
                    "upquery",
                    {
                        "view": fill.requester.node.view,
                        "ms": (now - fill.started) * 1000,
                        "ok": False,
                    },
                )
                if fill.index:
                    self.index.failed(fill)
                self.abort(
                    fill,
                    DeadlineExceeded(
                        f"upquery for {fill.label()} exceeded {self.upquery_timeout:g}s"
                    ),
                )

    def abort(self, fill: Fill, error: Exception) -> None:
        """Give up on a fill before its reply: its keys become holes again everywhere (a
        reply arriving later is ignored) and its reads fail with ``error``."""
        if fill.dead:
            return
        self._retire(fill)
        self.runner.cancel(fill)
        if fill.index:
            self._abandon(fill, error)
        else:
            self._fail(fill, error)

    def forget(self, st: State) -> None:
        """A dropped state. A fill of it may also fill shared states below it: abort it
        properly, or those keys would stay pending (holding updates) for good."""
        gone = Unavailable("the view was dropped while this read waited for it")
        for fill in st.pending_fills():
            if fill.index:  # reads of other views blocked on it are asked again
                for key in [key for key in fill.waiters if key[0] is st]:
                    for w in fill.waiters.pop(key):
                        w.fail(gone)
                if not fill.dead:
                    self._retire(fill)
                    self.runner.cancel(fill)
                    self._abandon(fill, None)
            else:
                self.abort(fill, gone)
        st.forget_pending()
        self.wanted.pop(st, None)
        self.prefetcher.forget([st])

    # -- filling states ----------------------------------------------------------------
    def _load(self, st: State, keys: list[Row], rows: list[Row]) -> None:
        """Fill ``keys`` of a root state from the runner's rows."""
        keyset = set(keys)
        for k in keys:
            st.fill(k)
        if st.kind == "rows":
            # By fill key, then one apply_rows each (a reply can be a million rows: a
            # call per row cost more than the rows themselves).
            for fk, batch in by_group([(r, 1) for r in rows], st.fill_key_of_row).items():
                if fk in keyset:
                    st.apply_rows(st.bucket(fk), fk, batch)  # type: ignore[arg-type]
            return
        op = st.node.op
        for group, entry in op.load_entries(rows).items():  # type: ignore[union-attr]
            fk = st.fill_key_of_index(group)
            if fk in keyset:
                st.set_entry(fk, group, entry)

    def _derive(self, st: State, keys: list[Row]) -> None:
        """Fill ``st`` from its source state through filter/project nodes, in Python."""
        assert st.source is not None
        src, chain = st.source
        for k in keys:
            deltas = derived_deltas(src, chain, src.entries(k))
            bucket = st.fill(k)
            if st.kind == "rows":
                for row, sign in deltas:
                    st.apply_row(bucket, k, row, sign)
                continue
            op = st.node.op
            out = op.on_input(0, deltas, StateAccess(st.node, bucket))  # type: ignore[union-attr]
            for group, entry in out.writes.items():
                if entry is not None:
                    st.set_entry(k, group, entry)
            if not op.group_columns() and () not in bucket and hasattr(op, "initial_entry"):  # type: ignore[union-attr]
                # A global aggregate always has its one group, even over no rows.
                entry = op.initial_entry()  # type: ignore[union-attr]
                st.set_entry(k, (), entry)


def _read_error(error: BaseException) -> Exception:
    """What a read waiting on a failed upquery is told."""
    if isinstance(error, (DeadlineExceeded, Unavailable)):
        return error
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return Unavailable(f"upquery failed: {first}")


def derived_deltas(src: State, chain: list[Any], entries: Iterable[tuple[Row, Any]]
                   ) -> list[tuple[Row, int]]:
    """The rows a key of a state derived from grouped ``src`` holds (``State.source``),
    from that key's (group, entry) pairs in ``src``, through the filter and project nodes
    of ``chain``: pure, so readers derive keys from shelved entries with it too
    (shelfreads.py)."""
    sop = src.node.op
    deltas = [(r, 1) for g, e in entries for r in sop.output_rows(g, e)]  # type: ignore[union-attr]
    for n in chain:
        deltas = n.op.on_input(0, deltas, StateAccess(n)).deltas
    return deltas
