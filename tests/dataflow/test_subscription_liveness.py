"""Subscriptions stay live under memory pressure, MAX candidates running out and join keys
moving, stepped: no JVM, no threads, every interleaving the test's own.

The scenario of the report (the visits example of docs/concepts.md): a subscription to categories
of the visits MAX-per-category view while writes insert visits, delete the longest ones (the
MAX candidates run out: the group is refilled) and move products between categories (the
join's key moves), and reads of another view keep the memory limit busy. Every upquery
answers a few packets after it was issued (Spark's latency, in steps), so fills overlap
writes as they do on a server.

What a subscriber relies on: its cut (the LSN of its last event or heartbeat) follows the
writes within a bounded number of steps, and every event is exact (``Holder``, the view's
SQL by sqlite over the model's history at the event's LSN).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from stepped import Harness
from test_subscriptions import MAXLEN, Holder

VALS = "SELECT v FROM t WHERE k = ?"
CATS = [f"c{i}" for i in range(6)]
SUBSCRIBED = [(c,) for c in CATS[:4]]
PRODUCTS = [f"p{i}" for i in range(24)]
LATENCY = 3  # steps between an upquery's issue and its reply
# A subscription's cut (the LSN it last told) must move at least once in this many steps,
# and be at most MAX_STALE writes behind: a refill (an exhausted MAX group) or an index
# fill is one LATENCY, a round of refills two. Before the fix, index fills at nearly every
# write (the visit index evicted under the limit) and refills of one key after another
# (each key of the subscription in turn unreadable) held the cut for 36-61 steps.
MAX_STILL_STEPS = 4 * LATENCY
MAX_STALE = 5 * LATENCY
STEPS = 300


def _setup(h: Harness, rng: random.Random) -> dict[str, str]:
    where = {p: rng.choice(CATS) for p in PRODUCTS}
    h.table("info", [("product", "TEXT"), ("category", "TEXT")], list(where.items()))
    h.table("visit", [("product", "TEXT"), ("usr", "TEXT"), ("length", "BIGINT")],
            [(p, f"u{j}", rng.randrange(100)) for p in PRODUCTS for j in range(3)])
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, j) for k in range(200)
                                                       for j in range(3)])
    h.view("maxlen", MAXLEN, candidates=(2, 1))
    h.view("vals", VALS)
    return where


def _write(h: Harness, rng: random.Random, where: dict[str, str]) -> None:
    m = h.model
    x = rng.random()
    if x < 0.35:  # a product moves to another category: the join key moves
        p = rng.choice(PRODUCTS)
        new = rng.choice([c for c in CATS if c != where[p]])
        m.write("info", inserts=[(p, new)], deletes=[(p, where[p])])
        where[p] = new
    elif x < 0.65:  # the longest visit goes: MAX's candidates run out
        live = sorted(m.live("visit"), key=lambda r: -r[2])
        if live:
            m.write("visit", deletes=[live[0]])
    else:
        m.write("visit", inserts=[(rng.choice(PRODUCTS), "w", rng.randrange(100))])


class Latency:
    """Delivers each upquery's reply LATENCY steps after it was issued."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.born: dict[int, int] = {}

    def step(self, now: int) -> None:
        runner = self.h.runner
        runner.deliver_bounds()
        for s in runner.pending:
            self.born.setdefault(s.fill.fid, now)
        i = 0
        while i < len(runner.pending):
            if now - self.born[runner.pending[i].fill.fid] >= LATENCY:
                runner.deliver(i)
            else:
                i += 1


def _run(seed: int, memory_limit: int | None, steps: int = STEPS,
         writes: Callable[[Harness, random.Random, dict[str, str]], None] = _write,
         ) -> tuple[int, int, Harness, Holder]:
    """The scenario, ``writes(h, rng, where)`` at each of ``steps`` steps (one ``_write``
    here; test_tx_subscription_liveness.py sends several, some as transactions); returns
    the most steps in a row the subscription's cut did not move, the most writes it was
    behind, the harness and the subscriber."""
    rng = random.Random(seed)
    h = Harness(upquery_timeout=60.0, memory_limit=memory_limit)
    where = _setup(h, rng)
    hd = Holder(h, "maxlen", h.df.subscribe("maxlen", SUBSCRIBED))
    lat = Latency(h)
    still = worst = stale = 0
    for i in range(steps):
        writes(h, rng, where)
        if i % 2:  # another client reads keys nobody subscribed to: memory pressure
            h.begin("vals", [(k,) for k in rng.sample(range(200), 12)])
        h.clock.advance(0.01)
        h.run()
        lat.step(i)
        h.run()
        told = hd.lsn
        hd.drain()
        still = 0 if hd.lsn > told else still + 1
        worst = max(worst, still)
        stale = max(stale, h.ex.applied_lsn - hd.lsn)
    return worst, stale, h, hd


@pytest.mark.parametrize("memory_limit", [None, 12_000], ids=["no-limit", "12KB"])
@pytest.mark.parametrize("seed", range(4))
def test_a_subscriptions_cut_follows_the_writes(seed: int, memory_limit: int | None) -> None:
    worst, stale, h, hd = _run(seed, memory_limit)
    try:
        stats = h.ex.stats.counters
        assert stats.get("exhausted", 0) > 0, "MAX candidates should run out"
        if memory_limit is not None:
            assert stats.get("memory_evictions", 0) > 0, "the limit should bite"
        assert worst <= MAX_STILL_STEPS, (
            f"the subscription's cut stood still for {worst} steps (stats {dict(stats)})")
        assert stale <= MAX_STALE, f"the subscription's cut was {stale} writes behind"
        h.settle()
        hd.drain()
        assert hd.lsn == h.ex.applied_lsn
        assert not h.errors, h.errors
    finally:
        h.close()


def test_the_cut_is_the_latest_lsn_every_key_is_known_at() -> None:
    """cuts.py on its own: spans of where each key's rows are known, and the cut."""
    from collections import Counter

    from partialflow.server.dataflow.cuts import KeyHistory, latest_cut

    a, b, c = KeyHistory(), KeyHistory(), KeyHistory()
    for h in (a, b, c):
        h.known_from(10, Counter({("x",): 1}))
    # a: readable throughout, changed at 12 and 14.
    a.open().deltas += [(12, Counter({("y",): 1})), (14, Counter({("x",): -1}))]
    b.close(11)  # b: unreadable after the packet end at 11 ...
    b.known_from(13, Counter({("b",): 1}))  # ... refilled from a snapshot at 13
    b.open().known_to, b.open().fresh = 13, True
    b.close(15)  # and evicted in the same packet: known at 13 only, not up to 15
    c.close(16)  # c: unreadable after 16
    assert b.intervals(20) == [(10, 11), (13, 13)]
    assert latest_cut([a, b, c], now=20, after=10) == 13
    assert a.rows_at(13) == Counter({("x",): 1, ("y",): 1})
    assert latest_cut([a, c], now=20, after=10) == 16
    assert latest_cut([a, b, c], now=20, after=13) is None  # nothing newer yet
    a.rebase(13)
    assert a.spans[0].start == 13 and a.rows_at(20) == Counter({("y",): 1})
