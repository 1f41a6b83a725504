"""A subscribed key that leaves and comes back with no write in between (an explicit evict,
then its refill or a read deriving it from its aggregate's key, both at the same LSN) must
not leave the subscription's cut behind: after every later write, even one that changes
none of its keys, its cut reaches the newest LSN (stepped, no JVM).

What a subscriber relies on: the LSN of its last event or heartbeat (``Subscription.cut_lsn``)
reaches the last write once the dataflow settles, and its rows equal the view's SQL at
every LSN it is told (``Holder``: sqlite over the model's history).
"""

from __future__ import annotations

import pytest
from stepped import Harness
from test_subscriptions import TOTAL, Holder

SUBSCRIBED = [(1,), (2,), (3,)]


def _setup() -> tuple[Harness, Holder]:
    h = Harness(upquery_timeout=60.0)
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, k) for k in range(6)])
    h.view("total", TOTAL)
    hd = Holder(h, "total", h.df.subscribe("total", SUBSCRIBED))
    h.settle()
    hd.drain()
    h.model.write("t", inserts=[(1, 10)])
    h.settle()
    hd.drain()
    assert hd.lsn == h.ex.applied_lsn
    return h, hd


def _leave(h: Harness, key: tuple, back: str) -> None:
    """``key`` becomes a hole: with its aggregate's key (an upquery brings it back), or
    alone (derivable from the aggregate's key, in memory: no upquery)."""
    if back == "upquery":
        assert h.df.evict("total", key) == 1
    else:
        st = h.df.reader("total").state
        h.ex.call(lambda: h.ex.evictor.evict(st, key)).result()
    if back == "read":  # a read's miss packet derives it at once (no gathering wait)
        read = h.begin("total", [key])
        h.run()
        assert read.waiter is None or read.waiter.event.is_set()  # answered, no fill
        assert h.finish(read)[0][1] == h.ex.applied_lsn


def _write_elsewhere(h: Harness) -> int:
    """A write that changes none of the subscribed keys."""
    h.model.write("t", inserts=[(5, 1)])
    h.run()
    return h.ex.applied_lsn


@pytest.mark.parametrize("back", ["upquery", "refill", "read"])
def test_a_key_back_at_the_lsn_it_left_at_keeps_the_cut_moving(back: str) -> None:
    """The subscription was exact at LSN L; its key leaves and is back at L. It is exact
    at L as it stands, and every later write moves its cut."""
    h, hd = _setup()
    try:
        at = h.ex.applied_lsn
        upqueries = h.ex.stats.counters.get("upqueries", 0)
        _leave(h, (2,), back)
        h.settle()
        hd.drain()
        assert h.ex.applied_lsn == at  # no write in between
        assert h.df.reader("total").state.is_filled((2,))
        assert (h.ex.stats.counters.get("upqueries", 0) > upqueries) == (back == "upquery")
        assert hd.lsn == at
        for _ in range(3):
            lsn = _write_elsewhere(h)
            h.settle()
            hd.drain()
            assert hd.lsn == lsn, f"cut stuck at {hd.lsn} after a write at {lsn}"
        assert not h.errors, h.errors
    finally:
        h.close()


def _fills_of(h: Harness, key: tuple) -> list[int]:
    return [i for i, s in enumerate(h.runner.pending)
            if any(fk == key for _, fk in s.fill.waiters)]


@pytest.mark.parametrize("back", ["upquery", "read"])
def test_a_key_back_at_the_lsn_it_left_at_while_another_is_refilled(back: str) -> None:
    """Key 1 is being refilled (from a snapshot before a write at L); key 2 leaves at L and
    is back at L (its refill, or a read deriving it); key 1 lands after a later write. Key
    2 is known from L on, so the cut reaches that write and every one after it."""
    h, hd = _setup()
    try:
        assert h.df.evict("total", (1,)) == 1
        h.clock.advance(0.01)
        h.run()
        assert len(_fills_of(h, (1,))) == 1  # in flight, from the snapshot before L
        h.model.write("t", inserts=[(2, 20)])  # L: changes key 2
        h.run()
        at = h.ex.applied_lsn
        _leave(h, (2,), back)
        if back == "upquery":  # a read of it: its own refill waits for key 1's round
            read = h.begin("total", [(2,)])
            for _ in range(3):  # past the gathering window
                h.run()
                h.clock.advance(0.01)
            [i] = _fills_of(h, (2,))
            h.runner.deliver(i)
            h.run()
            assert h.finish(read)[0][1] == at
        assert h.ex.applied_lsn == at and h.df.reader("total").state.is_filled((2,))
        hd.drain()
        lsn = _write_elsewhere(h)
        [i] = _fills_of(h, (1,))
        h.runner.deliver(i)
        h.settle()
        hd.drain()
        assert hd.lsn == lsn, f"cut stuck at {hd.lsn} after a write at {lsn}"
        for _ in range(3):
            lsn = _write_elsewhere(h)
            h.settle()
            hd.drain()
            assert hd.lsn == lsn, f"cut stuck at {hd.lsn} after a write at {lsn}"
        assert not h.errors, h.errors
    finally:
        h.close()
