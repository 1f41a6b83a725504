"""Subscriptions in chosen interleavings (no JVM, no threads): writes, replies delivered
late and out of order, evictions, join misses (index fills, blocked keys) and MIN/MAX
candidates running out. After every step, every event a subscription queued is applied to
the rows a subscriber holds, and those rows must equal the view's SQL (sqlite over the
model's history) for every key at the event's LSN; so must they at the subscription's cut
LSN (what a heartbeat reports)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from stepped import Harness, norm_row

from partialflow.server.dataflow.subscriptions import Subscription

MAXLEN = ("SELECT category, MAX(length) AS max_length FROM info JOIN visit "
          "ON info.product = visit.product WHERE category = ? GROUP BY category")
TOTAL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE k = ? GROUP BY k"
TOP2 = "SELECT g, p, pts FROM s WHERE g = ? ORDER BY pts DESC, p LIMIT 2"
CATS = ["c0", "c1", "c2"]
PRODUCTS = [f"p{i}" for i in range(8)]


class Holder:
    """What a subscriber holds, checked against the oracle at every LSN it is told."""

    def __init__(self, h: Harness, view: str, sub: Subscription) -> None:
        self.h, self.view, self.sub = h, view, sub
        self.rows: dict[tuple, Counter] = {}
        self.lsn = 0
        self.events = 0

    def drain(self) -> None:
        with self.sub.cond:
            events = list(self.sub.queue)
            self.sub.queue.clear()
            cut = self.sub.cut_lsn() if self.sub.started else None
        assert self.sub.error is None, self.sub.error
        for ev in events:
            assert ev.lsn >= self.lsn, f"LSN went back: {ev.lsn} after {self.lsn}"
            if ev.kind == "snapshot":
                self.rows = {k: Counter(ins) for k, ins, _ in ev.changes}
            else:
                for k, ins, dels in ev.changes:
                    bag = self.rows[k]
                    for r in dels:
                        assert bag[r] > 0, f"{self.view} {k}: deleted {r} not held at {ev.lsn}"
                        bag[r] -= 1
                    bag.update(ins)
                    self.rows[k] = +bag
            self.lsn = ev.lsn
            self.events += 1
            self.check(ev.lsn)
        if cut is not None and cut != self.lsn:
            assert cut > self.lsn
            self.lsn = cut
            self.check(cut)

    def check(self, lsn: int) -> None:
        for k in self.sub.keys:
            got = Counter(norm_row(r) for r in self.rows.get(k, Counter()).elements())
            want = Counter(norm_row(r) for r in self.h.expected(self.view, k, lsn))
            assert got == want, f"{self.view} {k} at LSN {lsn}: held {got}, SQL says {want}"


def _setup(h: Harness, rng: random.Random) -> None:
    h.table("info", [("product", "TEXT"), ("category", "TEXT")],
            [(p, rng.choice(CATS)) for p in PRODUCTS[:5]])
    h.table("visit", [("product", "TEXT"), ("usr", "TEXT"), ("length", "BIGINT")],
            [(rng.choice(PRODUCTS), "u", rng.randrange(50)) for _ in range(12)])
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, k) for k in range(4)])
    h.table("s", [("g", "BIGINT"), ("p", "BIGINT"), ("pts", "BIGINT")],
            [(g, p, rng.randrange(20)) for g in range(3) for p in range(3)])
    h.view("maxlen", MAXLEN, candidates=(2, 1))
    h.view("total", TOTAL)
    h.view("top2", TOP2, candidates=(2, 1))


def _write(h: Harness, rng: random.Random) -> None:
    m = h.model
    x = rng.random()
    if x < 0.15:  # a product appears or moves: join misses on the info index
        p = rng.choice(PRODUCTS)
        old = [r for r in m.live("info") if r[0] == p]
        m.write("info", inserts=[(p, rng.choice(CATS))], deletes=old[:1])
    elif x < 0.5:
        live = m.live("visit")
        if live and rng.random() < 0.4:  # deletions, often of the longest: MAX runs out
            live.sort(key=lambda r: -r[2])
            m.write("visit", deletes=[live[0] if rng.random() < 0.6 else rng.choice(live)])
        else:
            m.write("visit", inserts=[(rng.choice(PRODUCTS), "u", rng.randrange(50))])
    elif x < 0.75:
        live = m.live("t")
        if live and rng.random() < 0.3:
            m.write("t", deletes=[rng.choice(live)])
        else:
            m.write("t", inserts=[(rng.randrange(5), rng.randrange(10))])
    else:
        live = m.live("s")
        if live and rng.random() < 0.4:
            m.write("s", deletes=[max(live, key=lambda r: r[2])])
        else:
            m.write("s", inserts=[(rng.randrange(3), rng.randrange(5), rng.randrange(20))])


@pytest.mark.parametrize("memory_limit", [None, 20_000], ids=["no-limit", "20KB"])
@pytest.mark.parametrize("seed", range(12))
def test_subscribers_hold_the_views_answer_at_every_lsn_they_are_told(
        seed: int, memory_limit: int | None) -> None:
    rng = random.Random(seed)
    h = Harness(upquery_timeout=60.0, memory_limit=memory_limit)
    try:
        _setup(h, rng)
        keys = {"maxlen": [(c,) for c in CATS], "total": [(k,) for k in range(5)],
                "top2": [(g,) for g in range(3)]}
        holders = [Holder(h, v, h.df.subscribe(v, ks)) for v, ks in keys.items()]
        for _ in range(400):
            step = rng.random()
            if step < 0.45:
                _write(h, rng)
            elif step < 0.55:
                view = rng.choice(list(keys))
                h.df.evict(view, rng.choice(keys[view]))
            elif step < 0.6:  # reads of keys nobody subscribed to: memory pressure
                h.begin("total", [(k,) for k in rng.sample(range(5, 60), 8)])
            elif step < 0.8 and h.runner.pending:
                h.runner.deliver(rng.randrange(len(h.runner.pending)))
            else:
                h.clock.advance(0.01)
            h.run()
            for hd in holders:
                hd.drain()
        h.settle()
        for hd in holders:
            hd.drain()
            assert hd.lsn == h.ex.applied_lsn  # caught up: every key exact at the last write
            assert hd.events > 1
        stats = h.df.stats()
        assert stats["subscriptions"] == 3 and stats["subscribed_keys"] == 11
        if memory_limit is not None:  # evictions for memory happened, never of a pinned key
            assert stats.get("memory_evictions", 0) > 0
            pinned = h.ex.evictor.pins
            for hd in holders:
                st = h.df._reader(hd.view).state
                assert all((st.sid, k) in pinned for k in hd.sub.keys)
        assert not h.errors, h.errors
    finally:
        h.close()


def test_exercised_what_it_claims() -> None:
    """Across the seeds, the interleavings did reach the paths named in the docstring."""
    seen: Counter = Counter()
    for seed in range(6):
        rng = random.Random(seed)
        h = Harness(upquery_timeout=60.0)
        try:
            _setup(h, rng)
            for v, ks in {"maxlen": [(c,) for c in CATS], "top2": [(0,), (1,), (2,)]}.items():
                h.df.subscribe(v, ks)
            for _ in range(400):
                step = rng.random()
                if step < 0.5:
                    _write(h, rng)
                elif step < 0.8 and h.runner.pending:
                    h.runner.deliver(rng.randrange(len(h.runner.pending)))
                else:
                    h.clock.advance(0.01)
                h.run()
            h.settle()
            seen.update({k: v for k, v in h.ex.stats.counters.items()
                         if k in ("exhausted", "index_fills", "keys_gated")})
        finally:
            h.close()
    assert seen["exhausted"] > 0 and seen["index_fills"] > 0 and seen["keys_gated"] > 0, seen
