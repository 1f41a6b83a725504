"""Where a subscribed key's rows are known, while its subscription waits for a cut.

A subscription tells its client only LSNs at which *all* of its keys are exact. At a
packet end where every key is readable that is the packet's LSN (subscriptions.py, the
common case). While one is not (a hole being refilled, a key pending or blocked), the
others go on changing, and under a steady stream of refills — MAX candidates running out
for one key after another, each refill taking an upquery's time — some key was always
unreadable, so no packet end had them all and the subscription's LSN stood still for as
long as the stream went on.

But a subscription does not need a packet end where all keys are readable, only an LSN
where each of them is *known*:

* a key readable since the last cut is known at every packet end since (its rows as sent,
  plus the net change logged at each packet end: ``Span.deltas``);
* a key that became unreadable is known up to the last packet end before that;
* a key refilled by a fill from snapshot V is known from V on: its rows when the reply is
  loaded (``SubscriptionManager.landed``), then the net change after the updates held
  for each LSN replay, in LSN order (``SubscriptionManager.replayed``), then at each
  packet end. A key an index fill unblocks is known the same way from the LSN it was
  gated at.

So each key has a few spans of LSNs where its rows are known; the latest LSN in all of
them is a cut, and the rows there are sent as one batch. A key is unknown only from the
packet end before it became unreadable to the snapshot of the fill that brings it back,
so when a fill lands the cut moves up to where the keys still being filled became
unreadable. The refills of a subscription's holes go out in rounds (a hole waits while
another key of the subscription is being refilled, for at most
``subscriptions.DEFER_MAX`` seconds): a key evicted while another's refill is in flight
is then refilled from a snapshot after that one lands, not before (where the other is
unknown). All rows here are as a read presents them (no LIMIT and no
empty-group row: there a change of stored rows does not add up, and such views keep
waiting for a packet end where every key is readable).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partialflow.operators.base import Row
from partialflow.server.dataflow.reads import present, visible

if TYPE_CHECKING:
    from partialflow.server.dataflow.state import State
    from partialflow.server.dataflow.subscription import Subscription
    from partialflow.server.dataflow.subscriptions import SubscriptionManager
    from partialflow.server.sql.planner import ViewPlan

NONE = object()  # no change pending for a key (a subscription's ``pending``)


@dataclass
class Span:
    """A key's rows are known at every packet end from ``start`` to ``end`` (None: to
    now): ``base`` at ``start``, plus each delta up to the LSN."""

    start: int
    base: Counter[Row]
    end: int | None = None
    deltas: list[tuple[int, Counter[Row]]] = field(default_factory=list)
    # The last LSN known in the current packet (a fill's held updates replayed up to it).
    known_to: int = -1
    fresh: bool = False  # opened in the current packet by a fill: known up to known_to only

    def rows_at(self, lsn: int) -> Counter[Row]:
        rows = Counter(self.base)
        for at, delta in self.deltas:
            if at > lsn:
                break
            rows.update(delta)  # update keeps negative counts until the sum is done
        return +rows


class KeyHistory:
    """One key of a waiting subscription: its spans, oldest first."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def open(self) -> Span | None:
        """The span that is still known now, if any."""
        return self.spans[-1] if self.spans and self.spans[-1].end is None else None

    def close(self, end: int) -> None:
        """The key stopped being known after ``end`` (the last packet end before this one,
        where it was readable), or after what a fill's replay showed in this packet."""
        span = self.open()
        if span is not None:
            end = span.known_to if span.fresh else max(end, span.known_to)
            if end < span.start:  # it never reached a packet end: it is known nowhere
                self.spans.pop()
            else:
                span.end = end

    def known_from(self, start: int, rows: Counter[Row]) -> None:
        """Known from ``start`` on with ``rows`` (the caller closed the open span first)."""
        last = self.spans[-1] if self.spans else None
        if last is not None:
            if last.end is None:
                return  # known on already
            if last.start == start == last.end:
                self.spans.pop()  # known only there: known from there on now
        # A span may begin where (or before) the last one ends: a key known up to L that
        # left and is back at L (evicted by a packet without a write, refilled from the
        # snapshot at L, or derived at once) is known at L twice, its rows equal there.
        # Dropping the new span left a readable key unknown after L: a later write that
        # touched none of its subscription's keys never moved the cut past L.
        self.spans.append(Span(start, rows))

    def intervals(self, now: int) -> list[tuple[int, int]]:
        return [(s.start, now if s.end is None else s.end) for s in self.spans]

    def rows_at(self, lsn: int) -> Counter[Row]:
        for span in self.spans:
            if span.start <= lsn <= (span.end if span.end is not None else lsn):
                return span.rows_at(lsn)
        raise KeyError(lsn)

    def rebase(self, lsn: int) -> None:
        """A cut was sent at ``lsn``: forget what is known before it."""
        kept = []
        for span in self.spans:
            if span.end is not None and span.end < lsn:
                continue
            if span.start >= lsn:
                kept.append(span)
                continue
            # Unchanged up to the cut: its base as it is (the rows sent, not copied).
            base = span.rows_at(lsn) if span.deltas and span.deltas[0][0] <= lsn \
                else span.base
            kept.append(Span(lsn, base, span.end, [(at, d) for at, d in span.deltas if at > lsn]))
        self.spans = kept


def latest_cut(histories: list[KeyHistory], now: int, after: int) -> int | None:
    """The latest LSN above ``after`` at which every key is known, or None."""
    common: list[tuple[int, int]] | None = None
    for h in histories:
        mine = [(a, b) for a, b in h.intervals(now) if b > after]
        if common is None:
            common = mine
        else:
            common = [(max(a, c), min(b, d)) for a, b in common for c, d in mine
                      if max(a, c) <= min(b, d)]
        if not common:
            return None
    if not common:
        return None
    best = max(b for _, b in common)
    return best if best > after else None


# -- what the subscription manager records (executor thread) -----------------------------
def record(mgr: SubscriptionManager, sub: Subscription, lsn: int) -> dict[Row, KeyHistory]:
    """At the packet end ``lsn``: extend each key's spans with what changed in the packet
    (its logged change while readable; a new span when it became readable again; the
    open span closed when it stopped being readable). Returns the histories."""
    st, plan = sub.reader.state, sub.reader.plan
    prev = mgr.packet_lsn  # the last packet end before this one
    hist = sub.hist
    if hist is None:
        hist = sub.hist = {k: KeyHistory() for k in sub.keys}
        if sub.started:  # exact at its cut as sent (shared: neither is changed in place)
            at = sub.cut_lsn()
            for k in sub.keys:
                hist[k].known_from(at, sub.sent[k])
            sub.exact_lsn, sub.ready = at, False
        visit = set(sub.keys)
    else:
        visit = set(sub.dirty)
    for k in visit:
        h = hist[k]
        mgr.collect(st, k)
        change = sub.pending.pop(k, NONE)
        span = h.open()
        readable = k not in sub.unready
        if readable and span is not None and change is not None:
            if change is not NONE and change:
                span.deltas.append((lsn, shown(plan, change)))  # type: ignore[arg-type]
            span.known_to, span.fresh = lsn, False
            continue
        h.close(prev)  # it moved (filled again, blocked, evicted) in this packet
        if readable:
            h.known_from(lsn, Counter(present(plan, st.bucket_rows(k))))
    sub.dirty.clear()
    return hist


def landed(mgr: SubscriptionManager, st: State, keys: list[Row], lsn: int) -> None:
    """A fill loaded ``keys`` of ``st``, exact at ``lsn`` (its snapshot, or the LSN an
    index fill gated them at) until the updates held since replay: a subscribed one is
    known from ``lsn`` on with these rows."""
    if lsn not in mgr.ends_set:
        return  # not a packet end (inside a run of writes): no cut can be there
    for fk in keys:
        key = (st, fk)
        subs = mgr.by_key.get(key)
        if not subs:
            continue
        mgr.collect(st, fk)  # what the log holds so far is in these rows
        rows: Counter[Row] | None = None
        for sub in subs:
            sub.pending.pop(fk, None)
            if sub.hist is None:
                sub.pending[fk] = None  # compared whole
                continue
            if rows is None:
                rows = shown(sub.reader.plan, Counter(st.bucket_rows(fk)))
            h = sub.hist[fk]
            h.close(mgr.packet_lsn)
            h.known_from(lsn, Counter(rows))
            span = h.open()
            if span is not None:
                span.known_to, span.fresh = lsn, True
                mgr.replaying[key] = None


def replayed(mgr: SubscriptionManager, lsn: int) -> None:
    """A fill's held updates up to ``lsn`` have replayed: the keys it landed on are known
    at ``lsn``."""
    for key in mgr.replaying:
        st, fk = key
        mgr.collect(st, fk)
        for sub in mgr.by_key.get(key, ()):
            if sub.hist is None:
                continue
            change = sub.pending.pop(fk, NONE)
            h = sub.hist[fk]
            span = h.open()
            if span is None:
                continue
            if change is None:  # evicted or blocked again: known up to the last LSN
                h.close(span.known_to)
                continue
            if change is not NONE and change:
                span.deltas.append((lsn, shown(sub.reader.plan, change)))  # type: ignore[arg-type]
            span.known_to = lsn


def diff_at(sent: dict[Row, Counter[Row]], hist: dict[Row, KeyHistory], keys: list[Row],
            cut: int) -> list[tuple[Row, list[Row], list[Row]]]:
    """Each key's (key, inserted, deleted) from the rows sent to its rows at ``cut``;
    ``sent`` is brought to ``cut``."""
    out = []
    for k in keys:
        old = sent[k]
        spans = hist[k].spans
        first = spans[0] if spans else None
        if first is not None and first.base is old and first.start <= cut and (
                first.end is None or first.end >= cut) and (
                not first.deltas or first.deltas[0][0] > cut):
            continue  # unchanged since the rows were sent (most keys of a big one)
        now = hist[k].rows_at(cut)
        if now != old:
            out.append((k, list((now - old).elements()), list((old - now).elements())))
            sent[k] = now
    return out


def shown(plan: ViewPlan, stored: Counter[Row]) -> Counter[Row]:
    """A signed bag of stored rows as presented (hidden columns dropped; no LIMIT)."""
    rows = list(stored)
    out: Counter[Row] = Counter()
    for row, seen in zip(rows, visible(plan, rows), strict=True):
        out[seen] += stored[row]
    return out


def ordered(plan: ViewPlan, rows: list[Row]) -> list[Row]:
    """Presented rows in the view's ORDER BY when its columns are visible (a snapshot
    taken from bags here; a lookup orders them so)."""
    if not plan.order:
        return rows
    pos = {c: i for i, c in enumerate(plan.visible)}
    if any(p not in pos for p, _ in plan.order):
        return rows
    rows.sort(key=lambda r: tuple([(v is not None, v) for v in r]))
    for p, desc in reversed(plan.order):
        i = pos[p]
        rows.sort(key=lambda r: (r[i] is not None, r[i]), reverse=desc)
    return rows
