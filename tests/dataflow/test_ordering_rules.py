"""The ordering rules one at a time, each in a chosen interleaving (no JVM, no threads).

The ordering rules (docs/concepts.md, "Ordering"): updates that reach a pending key
after the fill's snapshot are held and replayed once the reply lands; updates at or
before it are in the reply; evicting a pending key discards the reply there and
re-issues the read; a failed or lost reply fails the reads and leaves a hole; concurrent
misses share one fill.
"""

from __future__ import annotations

import pytest
from stepped import Harness
from stepped import assert_exact as _assert_exact
from stepped import assert_settled as _finish_all

from partialflow.server.errors import DeadlineExceeded, InvalidArgument, Unavailable

COUNT = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE k = ? GROUP BY k"
JOIN = "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.k = ?"
LEFT_JOIN = "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k WHERE a.k = ?"
TIMEOUT = 5.0


def _count_view(**kw) -> Harness:
    h = Harness(upquery_timeout=TIMEOUT, **kw)
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, v) for k in range(4) for v in range(3)])
    h.view("v", COUNT)
    return h


def _join_views(sql: str) -> Harness:
    h = Harness(upquery_timeout=TIMEOUT)
    h.table("a", [("k", "BIGINT"), ("v", "BIGINT")], [(1, 10), (1, 11), (2, 20), (5, 50)])
    h.table("b", [("k", "BIGINT"), ("w", "BIGINT")], [(1, 100), (2, 200)])
    h.view("v", sql)
    return h


def _issue(h: Harness) -> None:
    """Run the queue and close the gathering window, so wanted keys go out as fills."""
    h.run()
    h.clock.advance(0.006)
    h.run()


def test_writes_during_a_fill_are_held_and_replayed_once() -> None:
    h = _count_view()
    read = h.begin("v", [(1,)])
    _issue(h)
    [sub] = h.runner.pending
    snapshot = sub.fill.lsn
    h.model.write("t", inserts=[(1, 7), (1, 8)])
    h.model.write("t", deletes=[(1, 0)])
    h.model.write("t", inserts=[(1, 9)], deletes=[(1, 7)])
    h.run()  # the writes reach the pending key: held (LSN > the snapshot)
    assert len(sub.fill.held) > 0 and all(x.lsn > snapshot for x in sub.fill.held)
    h.runner.deliver()
    h.run()
    read.resume()
    [(rows, lsn)] = read.answer()
    assert lsn == h.model.lsn and rows == [(1, 3 + 2 - 1, 0 + 1 + 2 + 7 + 8 - 0 + 9 - 7)]
    _assert_exact(h, "v", [(1,)], read.answer())
    _finish_all(h)


def test_evicting_a_pending_key_discards_the_reply_and_asks_again() -> None:
    h = _count_view()
    read = h.begin("v", [(2,)])
    _issue(h)
    assert len(h.runner.pending) == 1
    h.df.evict("v", (2,))  # cancels the fill for that key; the read is wanted again
    h.model.write("t", inserts=[(2, 40)])
    h.runner.deliver()  # the first reply: discarded for the cancelled key
    _issue(h)
    assert not read.waiter.event.is_set() and len(h.runner.pending) == 1
    h.runner.deliver()
    h.run()
    read.resume()
    assert read.done
    _assert_exact(h, "v", [(2,)], read.answer())
    assert read.answer()[0][0] == [(2, 4, 0 + 1 + 2 + 40)]
    assert h.ex.stats.counters["fills_cancelled"] == 1
    _finish_all(h)


def test_a_failed_reply_fails_the_read_and_leaves_a_hole() -> None:
    h = _count_view()
    read = h.begin("v", [(3,)])
    _issue(h)
    h.runner.fail()
    h.run()
    with pytest.raises(Unavailable, match="upquery failed"):
        read.resume()
    assert h.df.reader("v").state.lookup((3,)) == "hole"
    _assert_exact(h, "v", [(3,)], h.lookup("v", [(3,)]))  # a retry works
    _finish_all(h)


def test_a_lost_reply_fails_the_read_at_its_deadline_and_a_late_reply_is_ignored() -> None:
    h = _count_view()
    read = h.begin("v", [(3,)])
    _issue(h)
    [lost] = h.runner.pending
    h.runner.pending.clear()
    h.clock.advance(TIMEOUT + 1)
    h.model.write("t", inserts=[(3, 1)])  # any packet: deadlines are checked after it
    h.run()
    with pytest.raises(DeadlineExceeded, match="exceeded"):
        read.resume()
    assert lost.fill.fid in h.runner.cancelled
    lost.reply(lost.fill, h.runner.answer(lost.fill), None)  # arrives after all: ignored
    h.run()
    assert h.df.reader("v").state.lookup((3,)) == "hole"
    _assert_exact(h, "v", [(3,)], h.lookup("v", [(3,)]))
    _finish_all(h)


def test_concurrent_misses_gather_into_one_fill_and_replies_may_come_in_any_order() -> None:
    h = _count_view()
    first = [h.begin("v", [(k,)]) for k in (0, 1)]
    h.run()
    h.clock.advance(0.001)
    first.append(h.begin("v", [(2,), (0,)]))
    _issue(h)
    [one] = h.runner.pending
    assert one.fill.keys[h.df.reader("v").state.source[0]] == {(0,), (1,), (2,)}
    h.model.write("t", inserts=[(0, 5), (3, 5)])
    second = h.begin("v", [(3,)])  # a second fill of the same state, at a later LSN
    _issue(h)
    assert len(h.runner.pending) == 2
    h.model.write("t", inserts=[(3, 6), (0, 6)])
    h.runner.deliver(1)  # the later fill answers first
    h.run()
    h.runner.deliver(0)
    h.run()
    for read in first + [second]:
        read.resume()
        assert read.done
        _assert_exact(h, "v", read.keys, read.answer())
    _finish_all(h)


def test_a_join_delta_meeting_a_pending_index_key_is_held_until_it_is_filled() -> None:
    h = _join_views(JOIN)
    _assert_exact(h, "v", [(1,)], h.lookup("v", [(1,)]))
    reader = h.df.reader("v").state
    join = reader.below[0].node
    ex = h.ex
    ex.call(lambda: ex.evictor.evict(join.sides[1], (1,))).result()  # only b's index at 1
    assert join.sides[0].is_filled((1,)) and reader.lookup((1,)) == "hole"
    read = h.begin("v", [(1,)])
    _issue(h)
    assert join.sides[1].is_pending((1,))
    h.model.write("a", inserts=[(1, 12)])  # meets the pending b index: held
    h.model.write("b", inserts=[(1, 101)], deletes=[(1, 100)])
    h.run()
    h.runner.deliver()
    h.run()
    read.resume()
    _assert_exact(h, "v", [(1,)], read.answer())
    assert sorted(read.answer()[0][0]) == [(1, 10, 101), (1, 11, 101), (1, 12, 101)]
    _finish_all(h)


def test_a_right_write_to_a_left_join_at_a_cold_key_evicts_nothing() -> None:
    """Regression: a right delta of a LEFT JOIN whose left key is a hole was dropped with
    'cannot compute key ... evicting all of it': every key of the view became a hole on
    each such write (the left key of the rows it affects is the delta's right key)."""
    h = _join_views(LEFT_JOIN)
    _assert_exact(h, "v", [(1,), (2,)], h.lookup("v", [(1,), (2,)]))
    reader = h.df.reader("v").state
    h.model.write("b", inserts=[(5, 500)])  # key 5 is a hole on the left
    h.run()
    assert sorted(reader.filled_keys()) == [(1,), (2,)]
    assert h.ex.stats.counters["evictions"] == 0
    h.model.write("b", deletes=[(1, 100)])  # a filled key: updated in place, still exact
    h.run()
    answers = h.lookup("v", [(1,), (5,)])
    _assert_exact(h, "v", [(1,), (5,)], answers)
    assert answers[0][0] == [(1, 10, None), (1, 11, None)]
    _finish_all(h)


def test_a_right_delta_held_by_a_left_join_replays_against_the_right_rows_it_met() -> None:
    """A right write meets the LEFT JOIN's left index pending at key 5 (a read's fill) and
    is held; the right index takes it at once. Key 5 had no right rows, so the replay must
    retract (5, 50, NULL): it has to count the right rows as they were when the delta was
    held (captured), not as they are when it replays (the delta itself is in them then)."""
    h = _join_views(LEFT_JOIN)
    join = h.df.reader("v").state.below[0].node
    read = h.begin("v", [(5,)])
    _issue(h)
    assert join.sides[0].is_pending((5,)) and join.sides[1].mode == "full"
    h.model.write("b", inserts=[(5, 500)])  # held: the left rows at 5 are not there yet
    h.run()
    h.runner.deliver()
    h.run()
    read.resume()
    assert read.answer()[0][1] == h.model.lsn  # the answer has the write
    _assert_exact(h, "v", [(5,)], read.answer())
    _finish_all(h)


def test_lookup_keys_are_checked_before_anything_is_queued() -> None:
    h = _count_view()
    with pytest.raises(
        InvalidArgument, match=r"view 'v' parameter 1 \(k\) is BIGINT, got 'x' \(str\)"
    ):
        h.df.begin_read("v", [(1,), ("x",)])
    with pytest.raises(InvalidArgument, match="takes 1 parameter"):
        h.df.begin_read("v", [(1, 2)])
    assert h.run() == 0 and not h.runner.pending
    assert h.lookup("v", [(None,)]) == [([], h.model.lsn)]


def test_misses_waiting_for_a_fill_slot_go_out_when_fills_expire() -> None:
    """Regression: at most MAX_FILLS_PER_STATE fills of a state run at once; a miss beyond
    that waits for one to finish. When the fills in flight were given up at their
    deadline instead, the waiting miss was not issued until some later packet (a write):
    on a quiet server the read waited out its own deadline."""
    from partialflow.server.dataflow.fills import MAX_FILLS_PER_STATE
    from partialflow.server.dataflow.packets import Tick

    h = _count_view()
    lost = []
    for k in range(MAX_FILLS_PER_STATE):
        lost.append(h.begin("v", [(k,)]))
        _issue(h)
    assert len(h.runner.pending) == MAX_FILLS_PER_STATE
    h.runner.pending.clear()  # their replies never come
    waiting = h.begin("v", [(3,)])
    _issue(h)
    assert not h.runner.pending  # no slot: wanted
    h.clock.advance(TIMEOUT + 1)
    h.ex.submit(Tick())  # what the idle executor does every 0.2 s
    h.run()
    for read in lost:
        with pytest.raises(DeadlineExceeded):
            read.resume()
    h.clock.advance(0.006)
    h.run()
    assert len(h.runner.pending) == 1  # the waiting miss went out
    h.runner.deliver()
    h.run()
    waiting.resume()
    _assert_exact(h, "v", [(3,)], waiting.answer())
    _finish_all(h)


MIN_MAX = "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM t WHERE k = ? GROUP BY k"


def _min_max_view() -> Harness:
    h = Harness(upquery_timeout=TIMEOUT)
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(0, v) for v in range(6)] + [(1, 5)])
    h.view("v", MIN_MAX, candidates=(2, 1))  # MIN/MAX keep 2 values per group
    return h


def test_min_max_groups_whose_candidates_run_out_are_refilled() -> None:
    h = _min_max_view()
    assert h.lookup("v", [(0,)])[0][0] == [(0, 0, 5)]
    h.model.write("t", deletes=[(0, 0)])
    h.model.write("t", deletes=[(0, 1)])  # both kept minimums gone, 4 values unseen
    h.run()
    assert h.ex.stats.counters["exhausted"] == 1
    assert h.df.reader("v").state.lookup((0,)) == "hole"
    answers = h.lookup("v", [(0,), (1,)])
    _assert_exact(h, "v", [(0,), (1,)], answers)
    assert answers[0][0] == [(0, 2, 5)]
    _finish_all(h)


def test_candidates_running_out_while_held_updates_replay_refill_the_key() -> None:
    """The deletes reach the key while its fill is in flight (held); replayed after the
    reply, they exhaust the fresh candidates: the key becomes a hole again at once and
    the read is asked again, never answered from the exhausted group."""
    h = _min_max_view()
    read = h.begin("v", [(0,)])
    _issue(h)
    h.model.write("t", deletes=[(0, 0)])
    h.model.write("t", deletes=[(0, 1)])
    h.run()
    h.runner.deliver()
    h.run()
    assert h.ex.stats.counters["exhausted"] == 1 and not read.waiter.event.is_set()
    _issue(h)
    h.runner.deliver()
    h.run()
    read.resume()
    _assert_exact(h, "v", [(0,)], read.answer())
    assert read.answer()[0][0] == [(0, 2, 5)]
    _finish_all(h)


# -- join misses on evict-on-miss indexes: index fills and gates (gating.py) -----------------
MAXLEN = ("SELECT category, MAX(length) AS m FROM info JOIN visit ON info.product = "
          "visit.product WHERE category = ? GROUP BY category")


def _visits(prefetch: bool = False) -> Harness:
    """The visits view over 6 products in 2 categories. Without ``prefetch`` a read's
    fill leaves the visit index cold (prefetch.py off), so moves miss it: the index-fill
    mechanics these tests are about."""
    h = Harness(upquery_timeout=TIMEOUT)
    h.ex.fills.prefetcher.enabled = prefetch
    h.table("info", [("product", "TEXT"), ("category", "TEXT")],
            [(f"p{i}", f"c{i % 2}") for i in range(6)])
    h.table("visit", [("product", "TEXT"), ("user", "TEXT"), ("length", "BIGINT")],
            [(f"p{i}", "u", 10 * i) for i in range(6)])
    h.view("m", MAXLEN)
    return h


def _move(h: Harness, product: str, old: str, new: str) -> None:
    h.model.write("info", inserts=[(product, new)], deletes=[(product, old)])
    h.run()


def test_a_join_miss_waits_for_an_index_fill_instead_of_cancelling_a_fill_in_flight() -> None:
    """The starvation bug: a product moving category missed the evict-on-miss visit index,
    which evicted both categories and cancelled the read's fill; under a stream of such
    updates the read never completed. Now the fill lands; the read waits for one small
    index fill and is exact."""
    h = _visits()
    read = h.begin("m", [("c0",)])
    _issue(h)  # the read's fill is in flight
    before = h.ex.applied_lsn
    _move(h, "p0", "c0", "c1")  # misses the visit index at p0 (a hole)
    assert h.ex.stats.counters.get("fills_cancelled", 0) == 0
    assert h.ex.stats.counters["index_fills"] == 1
    _move(h, "p2", "c0", "c1")  # and again, while both fills are in flight
    h.runner.deliver(0)  # the read's fill lands first: its key is gated on the index fill
    h.run()
    # Answered at once, exact at the LSN before the first miss; then blocked.
    assert read.waiter.event.is_set()  # type: ignore[union-attr]
    read.resume()
    assert read.answer()[0][1] == before
    _assert_exact(h, "m", [("c0",)], read.answer())
    assert h.df.reader("m").state.is_blocked(("c0",))
    late = h.begin("m", [("c0",)])  # a read starting now waits for the index fills
    h.run()
    assert not late.waiter.event.is_set()  # type: ignore[union-attr]
    h.runner.deliver_all()
    h.run()
    assert late.waiter.event.is_set()  # type: ignore[union-attr]
    late.resume()
    assert late.answer()[0][1] == h.ex.applied_lsn
    _assert_exact(h, "m", [("c0",)], late.answer())
    assert h.ex.stats.counters.get("fills_cancelled", 0) == 0
    assert h.ex.stats.counters.get("evictions", 0) == 0
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _finish_all(h)


def test_a_key_gated_again_and_again_answers_its_reads_after_one_fill() -> None:
    """A stream of misses keeps a key gated: each fill that lands leaves it blocked on the
    next. A read waiting on it is answered at the LSN the key was last exact at (never
    below the read's floor) instead of waiting for a fill that never comes last."""
    h = _visits()
    _assert_exact(h, "m", [("c0",)], h.lookup("m", [("c0",)]))
    _move(h, "p0", "c0", "c1")  # key c0 blocked on index fill 1
    read = h.begin("m", [("c0",)])
    h.run()
    _move(h, "p2", "c0", "c1")  # and gated on index fill 2 (while fill 1 is in flight)
    gated_at = h.ex.applied_lsn - 1
    assert len(h.runner.pending) == 2
    h.runner.deliver(0)  # fill 1 lands: c0 is exact at fill 2's LSN, then blocked again
    h.run()
    assert read.waiter.event.is_set()  # type: ignore[union-attr]
    read.resume()
    (rows, lsn), = read.answer()
    assert lsn == gated_at < h.ex.applied_lsn
    _assert_exact(h, "m", [("c0",)], [(rows, lsn)])
    assert h.df.reader("m").state.is_blocked(("c0",))
    _finish_all(h)
    _assert_exact(h, "m", [("c0",)], h.lookup("m", [("c0",)]))


def test_a_failed_index_fill_evicts_what_it_gated_and_backs_off() -> None:
    h = _visits()
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _move(h, "p0", "c0", "c1")
    read = h.begin("m", [("c1",)])
    h.run()
    h.runner.fail(0)  # the index fill fails: both categories become holes
    h.run()
    assert read.waiter.event.is_set()  # type: ignore[union-attr]
    with pytest.raises(Unavailable):
        read.resume()
    reader = h.df.reader("m").state
    assert reader.lookup(("c0",)) == reader.lookup(("c1",)) == "hole"
    # Backing off: the next miss on that index issues no index fill (both categories are
    # holes here, so it is dropped; the back-off test below has it evict)...
    _move(h, "p2", "c0", "c1")
    assert h.ex.stats.counters["index_fills"] == 1
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    # ...until the back-off has passed.
    h.clock.advance(60)
    _move(h, "p4", "c0", "c1")
    assert h.ex.stats.counters["index_fills"] == 2
    _finish_all(h)
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))


def _visit_index(h: Harness):
    (join,) = [n for n in h.ex.graph.nodes.values() if n.sides]
    return join.sides[1]  # visits by product, evict-on-miss


def test_a_join_miss_that_reaches_only_holes_costs_no_fill_and_evicts_nothing() -> None:
    """joinmiss.py, outcome 1: p1 moves between two categories nobody reads. Its visit
    index key is a hole, but every key the update reaches is a hole too, where it would be
    dropped anyway: no index fill (no upquery), no eviction, and the read key stays."""
    h = _visits()
    _assert_exact(h, "m", [("c0",)], h.lookup("m", [("c0",)]))
    jobs = h.runner.jobs
    _move(h, "p1", "c1", "c3")
    _issue(h)
    counters = h.ex.stats.counters
    assert counters["join_misses_dropped"] == 2  # the delete and the insert
    assert counters.get("index_fills", 0) == 0 and counters.get("evictions", 0) == 0
    assert h.runner.jobs == jobs and not h.runner.pending
    assert h.df.reader("m").state.is_filled(("c0",))
    _assert_exact(h, "m", [("c0",), ("c3",)], h.lookup("m", [("c0",), ("c3",)]))
    _finish_all(h)


def test_a_miss_that_evicts_while_index_fills_back_off_fills_the_index_key() -> None:
    """joinmiss.py, outcome 4: while index fills back off, a miss drops its update and
    evicts what it reaches, and the index then fetches the key it missed (an ordinary
    fill, nothing gated), so the next update of that product finds it and evicts nothing."""
    h = _visits()
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _move(h, "p0", "c0", "c1")
    h.run()
    h.runner.fail(0)  # the index fill fails: back off (both categories become holes)
    h.run()
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    evictions = h.ex.stats.counters["evictions"]
    _move(h, "p2", "c0", "c1")  # backing off: evicts, and wants the index key p2
    assert h.ex.stats.counters["evictions"] > evictions
    _issue(h)
    assert _visit_index(h).lookup(("p2",)) == "pending"
    h.runner.deliver_all()
    h.run()
    assert _visit_index(h).is_filled(("p2",))
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    evictions = h.ex.stats.counters["evictions"]
    _move(h, "p2", "c1", "c0")  # still within the back-off: the key is there now
    assert h.ex.stats.counters["evictions"] == evictions
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _finish_all(h)


@pytest.mark.parametrize("reads_land_first", [True, False])
def test_a_replayed_join_update_skips_keys_filled_after_it(reads_land_first: bool) -> None:
    """An index fill's held update reaches, when it replays, only the keys the fill made
    readable, after the LSN each is exact at (``replay.ReplayScope``), and is not held by a
    fill whose snapshot already has it (LSN <= V). Three views share the join: p0's move
    is held because m's keys are filled, while the same update reaches n's and r's c1,
    holes then (not gated: nothing reads them). Reads fill them from a snapshot that has
    the move. Whether their fills land before the index fill (the keys are filled when
    the update replays) or after it (they are pending), the move must not reach them a
    second time, through an aggregate (n) or straight into a reader (r)."""
    h = _visits()
    h.view("n", "SELECT category, COUNT(*) AS n FROM info JOIN visit ON info.product = "
                "visit.product WHERE category = ? GROUP BY category")
    h.view("r", "SELECT category, user, length FROM info JOIN visit ON info.product = "
                "visit.product WHERE category = ?")
    assert len([n for n in h.ex.graph.nodes.values() if n.sides]) == 1  # one shared join
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _move(h, "p0", "c0", "c1")  # misses the visit index at p0: held by an index fill
    assert h.ex.stats.counters["index_fills"] == 1 and len(h.runner.pending) == 1
    reads = [h.begin(v, [("c1",)]) for v in ("n", "r")]
    _issue(h)
    if reads_land_first:
        while len(h.runner.pending) > 1:  # the reads' fills, from a snapshot after the move
            h.runner.deliver(1)
            h.run()
        assert all(r.done or r.waiter.event.is_set() for r in reads)  # type: ignore[union-attr]
    h.runner.deliver(0)  # the index fill: its held update replays
    h.run()
    h.runner.deliver_all()
    h.run()
    assert not h.check_states()
    for v in ("m", "n", "r"):
        _assert_exact(h, v, [("c0",), ("c1",)], h.lookup(v, [("c0",), ("c1",)]))
    _finish_all(h)


def test_a_join_update_at_a_fills_snapshot_is_not_held_by_it() -> None:
    """Two joins: p0's move (LSN L) misses the visit index and is held by an index fill;
    a read of v then fills c1, the category index of the upper join too, from snapshot L.
    The index fill's replay carries the move up to that join, whose lookup meets the
    read's pending key: the move is in the read's reply already, so it must not be held
    there and replayed once more (it would reach the read's key twice), nor evict that
    key (cancelling the read's fill for nothing: it would ask Spark again)."""
    h = _visits()
    h.table("cat", [("category", "TEXT"), ("label", "TEXT")], [("c0", "zero"), ("c1", "one")])
    h.view("v", "SELECT info.category, visit.length, cat.label FROM info JOIN visit ON "
                "info.product = visit.product JOIN cat ON info.category = cat.category "
                "WHERE info.category = ?")
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _move(h, "p0", "c0", "c1")  # held by an index fill (m's keys are filled)
    read = h.begin("v", [("c1",)])
    _issue(h)
    [index_fill, fill] = [p.fill for p in h.runner.pending]
    assert index_fill.index and fill.lsn == h.ex.applied_lsn == h.model.lsn
    h.runner.deliver(0)  # the index fill lands first: the move replays up to v's join
    h.run()
    assert h.ex.stats.counters.get("fills_cancelled", 0) == 0
    _assert_exact(h, "v", [("c1",)], h.finish(read))
    _finish_all(h)
    _assert_exact(h, "v", [("c0",), ("c1",)], h.lookup("v", [("c0",), ("c1",)]))


def test_a_replayed_join_update_that_misses_skips_filled_keys_that_have_it() -> None:
    """``Executor.changes`` while an index fill's held updates replay: a replayed update
    whose lookup misses (joinmiss.py, outcome 4) does not evict a filled key exact at or
    after its LSN. v joins two evict-on-miss joins on category. p0's move to c2 (LSN L1)
    is held by index fill F (c0 is read); a read then fills c2 from snapshot L1. p0
    loses its visit, then moves on to c3 (LF), which is held by F too and blocks c2 on F,
    exact at LF - 1 >= L1. Item i1's move to c2 misses the cdata index: index fill G
    blocks c2's category index on it, and c2 waits for G once F has replayed. When F
    lands, the move at L1 replays up to v's join, whose lookup meets that blocked index
    key (L1 is before G's snapshot: outcome 4). c2 has L1 already: it must not be evicted
    (only to be fetched again), and it answers after G with no upquery of its own."""
    h = Harness(upquery_timeout=TIMEOUT)
    h.ex.fills.prefetcher.enabled = False  # the indexes stay cold: moves miss them
    h.table("info", [("product", "TEXT"), ("category", "TEXT")],
            [(f"p{i}", f"c{i % 2}") for i in range(6)])
    h.table("visit", [("product", "TEXT"), ("user", "TEXT"), ("length", "BIGINT")],
            [(f"p{i}", "u", 10 * i + 1) for i in range(6)])
    h.table("cinfo", [("item", "TEXT"), ("category", "TEXT")],
            [(f"i{i}", f"c{i % 3}") for i in range(6)])
    h.table("cdata", [("item", "TEXT"), ("w", "BIGINT")], [(f"i{i}", 100 * i) for i in range(6)])
    h.view("v", "SELECT a.category, a.length, b.w FROM (SELECT info.category, visit.length "
                "FROM info JOIN visit ON info.product = visit.product) a JOIN (SELECT "
                "cinfo.category, cdata.w FROM cinfo JOIN cdata ON cinfo.item = cdata.item) b "
                "ON a.category = b.category WHERE a.category = ?")
    _assert_exact(h, "v", [("c0",)], h.lookup("v", [("c0",)]))
    _move(h, "p0", "c0", "c2")  # L1: misses the visit index at p0, held by index fill F
    read = h.begin("v", [("c2",)])
    _issue(h)
    [f, fill] = h.runner.pending
    assert f.fill.index and not fill.fill.index and fill.fill.lsn == h.ex.applied_lsn
    h.runner.deliver(1)  # c2 is filled from snapshot L1: it has the move
    h.run()
    _assert_exact(h, "v", [("c2",)], h.finish(read))
    h.model.write("visit", deletes=[("p0", "u", 1)])  # held by F (visit index at p0)
    h.run()
    _move(h, "p0", "c2", "c3")  # LF: held by F, blocks c2 on it (exact at LF - 1)
    h.model.write("cinfo", inserts=[("i1", "c2")], deletes=[("i1", "c1")])  # index fill G
    h.run()
    reader = h.df.reader("v").state
    assert reader.pending_fill(("c2",)) is f.fill and len(h.runner.pending) == 2
    h.runner.deliver(0)  # F lands: L1 replays and misses G's blocked key at v's join
    h.run()
    counters = h.ex.stats.counters
    assert counters["join_misses"] == 1
    assert counters.get("evictions", 0) == 0
    assert reader.is_blocked(("c2",))  # kept, now waiting for G
    upqueries = counters["upqueries"]
    h.runner.deliver_all()
    h.run()
    read = h.begin("v", [("c2",)])
    assert read.done  # a hit: c2 was never evicted
    _assert_exact(h, "v", [("c2",)], read.answer())
    assert counters["upqueries"] == upqueries and counters.get("evictions", 0) == 0
    _finish_all(h)
    keys = [("c0",), ("c1",), ("c2",), ("c3",)]
    _assert_exact(h, "v", keys, h.lookup("v", keys))


# -- key bounds (bounds.py): a new auction's bid-index key is filled empty, not fetched --
AUCTION = [("id", "BIGINT"), ("category", "BIGINT")]
BID = [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "DOUBLE")]
WINNING = ("SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
           "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category")
AVG_WINNING = ("SELECT category, AVG(price) AS avg_price FROM winning WHERE category = ? "
               "GROUP BY category")
CATS = [(c,) for c in range(3)]


def _nexmark(hold_bounds: bool = False) -> Harness:
    h = Harness(upquery_timeout=TIMEOUT)
    h.ex.fills.prefetcher.enabled = False  # the bid index stays cold: misses are the subject
    h.runner.hold_bounds = hold_bounds
    h.table("auction", AUCTION, [(a, a % 3) for a in range(10)])
    h.table("bid", BID, [(a, b, float(a * 7 + b)) for a in range(10) for b in range(2)])
    h.view("winning", WINNING)
    h.view("avg_winning", AVG_WINNING)
    _assert_exact(h, "avg_winning", CATS, h.lookup("avg_winning", CATS))  # every key warm
    return h


def _read_warm(h: Harness, key: tuple) -> None:
    """A read of a filled key: answered at once (no fill, no gate), and exact."""
    read = h.begin("avg_winning", [key])
    assert read.done, f"read of {key} waits (for an index fill?)"
    _assert_exact(h, "avg_winning", [key], read.answer())


def test_new_auctions_fill_the_bid_index_empty_without_an_upquery() -> None:
    """Ids grow: a new auction's id is above every auction id any bid has, so its hole in
    the evict-on-miss bid index is proven empty by the key bound. Without it, each new
    auction is an index fill that blocks its category until the reply lands."""
    h = _nexmark()
    before = dict(h.ex.stats.counters)
    for i in range(20):
        a = 100 + i
        h.model.write("auction", inserts=[(a, a % 3)])
        h.run()
        _read_warm(h, (a % 3,))
        h.model.write("bid", inserts=[(a, 1, float(i)), (a - 1, 2, 3.5)])  # new and older
        h.run()
        _read_warm(h, (a % 3,))
    after = h.ex.stats.counters
    assert not h.runner.pending
    assert after["index_fills"] == before.get("index_fills", 0)
    assert after["upqueries"] == before.get("upqueries", 0)
    assert after["index_keys_bounded"] - before.get("index_keys_bounded", 0) == 20
    _finish_all(h)


def test_a_new_id_inside_the_range_but_never_seen_is_filled_empty() -> None:
    """Ids handed out from two ranges at once (two producers): a new auction of the lower
    range is inside [lo, hi] but no bid has carried it. The bound's values prove it empty;
    with too many values to keep (the range alone) it is fetched, and stays exact."""
    for keep_values in (True, False):
        h = _nexmark(hold_bounds=True)
        h.runner.bound_values = keep_values
        h.runner.hold_bounds = False
        h.runner.deliver_bounds()
        h.run()
        h.model.write("auction", inserts=[(10_000, 1)])  # the other producer's range
        h.model.write("bid", inserts=[(10_000, 1, 5.0)])
        h.run()
        before = h.ex.stats.counters.get("index_fills", 0)
        h.model.write("auction", inserts=[(20, 2)])  # inside [0, 10000], never bid on
        h.run()
        fills = h.ex.stats.counters.get("index_fills", 0) - before
        assert fills == (0 if keep_values else 1), (keep_values, fills)
        if keep_values:
            _read_warm(h, (2,))
        h.model.write("bid", inserts=[(20, 3, 7.5), (5, 3, 1.0)])
        h.run()
        _finish_all(h)
        _assert_exact(h, "avg_winning", CATS, h.lookup("avg_winning", CATS))
        h.close()


def test_a_key_inside_the_bound_is_fetched() -> None:
    """A bid that arrives before its auction puts the auction's id inside the bound: the
    auction's miss must then fetch the key (it has that bid), not assume it empty."""
    h = _nexmark()
    h.model.write("bid", inserts=[(500, 1, 42.0)])
    h.model.write("auction", inserts=[(500, 2)])
    h.run()
    assert h.ex.stats.counters["index_fills"] == 1
    answers = h.lookup("avg_winning", [(2,)])
    _assert_exact(h, "avg_winning", [(2,)], answers)
    _finish_all(h)


def test_inserts_before_the_bound_lands_widen_it() -> None:
    """The bound is loaded from the snapshot at the view's creation; inserts applied while
    that load runs must widen it too, or a key they fill would be taken for empty."""
    h = _nexmark(hold_bounds=True)
    assert h.runner.bounds, "the bound load should be waiting"
    h.model.write("bid", inserts=[(700, 1, 99.0)])  # after the bound's snapshot
    h.run()
    h.runner.hold_bounds = False
    h.runner.deliver_bounds()  # MIN/MAX as of the snapshot: without the bid on 700
    h.run()
    assert h.ex.stats.counters["key_bounds_loaded"] == 1
    h.model.write("auction", inserts=[(700, 1)])
    h.run()
    assert h.ex.stats.counters["index_fills"] == 1
    answers = h.lookup("avg_winning", [(1,)])
    _assert_exact(h, "avg_winning", [(1,)], answers)
    _finish_all(h)


def test_misses_before_the_bound_lands_are_fetched() -> None:
    h = _nexmark(hold_bounds=True)
    h.model.write("auction", inserts=[(800, 0)])
    h.run()
    assert h.ex.stats.counters["index_fills"] == 1  # no bound yet: fetched, as before
    _assert_exact(h, "avg_winning", [(0,)], h.lookup("avg_winning", [(0,)]))
    _finish_all(h)


def test_a_key_bound_only_where_it_is_exact() -> None:
    """Bounds only for evict-on-miss indexes keyed by one BIGINT base column: not for TEXT
    keys (the visits view's product) nor for keys computed above the table."""
    h = Harness(upquery_timeout=TIMEOUT)
    h.table("info", [("product", "TEXT"), ("category", "TEXT")], [("p", "c")])
    h.table("visit", [("product", "TEXT"), ("length", "BIGINT")], [("p", 1)])
    h.view("m", "SELECT category, MAX(length) AS m FROM info JOIN visit "
                "ON info.product = visit.product WHERE category = ? GROUP BY category")
    h.table("auction", AUCTION, [(1, 0)])
    h.table("bid", BID, [(1, 1, 2.0)])
    h.view("w", "SELECT a.category, b.price FROM auction a JOIN "
                "(SELECT auction + 1 AS nxt, price FROM bid) b ON a.id = b.nxt "
                "WHERE a.category = ?")
    misses = [st for st in h.ex.evictor.states.values() if st.mode == "miss"]
    assert len(misses) == 2
    assert not h.ex.bounds.by_state
    h.view("avg", "SELECT a.category, b.price FROM auction a JOIN bid b ON a.id = b.auction "
                  "WHERE a.category = ?")
    assert len(h.ex.bounds.by_state) == 1
    h.close()


def test_a_value_a_bound_cannot_compare_disables_it() -> None:
    from partialflow.server.dataflow.bounds import KeyBound

    b = KeyBound(None, "bid", 0, "auction", 0, ready=True)  # type: ignore[arg-type]
    b.widen(5)
    b.widen(None)  # NULL joins nothing
    assert b.excludes((6,)) and b.excludes((4,)) and not b.excludes((5,))
    assert not b.excludes(("6",)) and not b.excludes((6.0,))  # only int keys are judged
    b.widen(7.5)
    assert not b.excludes((100,))  # never trusted again


def test_a_bound_watched_lazily_loads_at_the_first_miss() -> None:
    """After a restart from a checkpoint, bounds load when a miss first needs one (at the
    LSN before that write); that miss is fetched, the ones after it are proven empty."""
    h = _nexmark()
    [st] = [h.ex.evictor.states[sid] for sid in h.ex.bounds.by_state]
    h.ex.bounds.forget(st)
    h.ex.bounds.watch([st], h.df.views.column_info, now=False)
    assert not h.runner.bounds
    h.model.write("bid", inserts=[(300, 1, 5.0)])  # before the load: in its snapshot
    h.model.write("auction", inserts=[(200, 1)])
    h.run()
    assert h.ex.stats.counters["index_fills"] == 1 and len(h.runner.bounds) == 1
    h.settle()  # the bound lands: [0, 300]
    h.model.write("auction", inserts=[(300, 0)])  # inside: fetched (it has the bid)
    h.model.write("auction", inserts=[(301, 2)])  # outside: proven empty
    h.run()
    assert h.ex.stats.counters["index_fills"] == 2
    assert h.ex.stats.counters["index_keys_bounded"] == 1
    _assert_exact(h, "avg_winning", CATS, h.lookup("avg_winning", CATS))
    _finish_all(h)


def test_a_view_nobody_reads_costs_no_work_and_wakes_exact_when_read() -> None:
    """Writes skip nodes with nothing filled or pending at or above them
    (``Propagator.propagate``): the unread join view does no work, the read one stays exact, and a
    first read of the unread view later is exact too."""
    h = _join_views(JOIN)
    h.view("w", "SELECT b.k, b.w, a.v FROM b JOIN a ON b.k = a.k WHERE b.w = ?")
    _assert_exact(h, "v", [(1,)], h.lookup("v", [(1,)]))
    skipped = h.ex.stats.counters["deltas_skipped_idle"]
    h.model.write("a", inserts=[(1, 12), (2, 21)])
    h.model.write("b", inserts=[(1, 101)], deletes=[(2, 200)])
    h.run()
    assert h.ex.stats.counters["deltas_skipped_idle"] > skipped
    _assert_exact(h, "v", [(1,), (2,)], h.lookup("v", [(1,), (2,)]))
    _assert_exact(h, "w", [(101,), (100,)], h.lookup("w", [(101,), (100,)]))
    _finish_all(h)


# -- index prefetch in a read's fill (prefetch.py) -----------------------------------------
def test_a_read_fill_prefetches_the_index_keys_its_keys_depend_on() -> None:
    """When a read's fill of a category lands, the visit index keys of the category's
    products are fetched by one index fill that gates nothing; a product moving category
    afterwards finds its visits there: no further index fill, no key blocked, and every
    answer exact."""
    h = _visits(prefetch=True)
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    assert h.ex.stats.counters["index_keys_prefetched"] == 6  # p0..p5
    fills = h.ex.stats.counters["index_fills"]
    assert fills == 1
    assert h.ex.stats.counters.get("keys_gated", 0) == 0
    h.runner.deliver_all()
    h.run()
    _move(h, "p0", "c0", "c1")
    _move(h, "p5", "c1", "c0")
    h.model.write("visit", inserts=[("p2", "v", 99)])
    h.run()
    assert h.ex.stats.counters["index_fills"] == fills
    assert h.ex.stats.counters.get("keys_gated", 0) == 0
    reader = h.df.reader("m").state
    assert not reader.is_blocked(("c0",)) and not reader.is_blocked(("c1",))
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _finish_all(h)


def test_writes_while_a_prefetch_is_in_flight_are_held_and_gate_once() -> None:
    """Before the prefetch lands its keys are pending: a visit for one of them is held
    and replayed once, and a move of one of them gates its categories on the prefetch
    (no second fill); a read waiting on a gated category is answered exactly after it."""
    h = _visits(prefetch=True)
    first = h.begin("m", [("c0",)])
    _issue(h)
    h.runner.deliver(0)  # the read's fill lands; the prefetch goes out with the packet
    h.run()
    assert first.waiter.event.is_set()  # type: ignore[union-attr]
    first.resume()
    _assert_exact(h, "m", [("c0",)], first.answer())
    assert len(h.runner.pending) == 1  # the prefetch of p0, p2, p4
    h.model.write("visit", inserts=[("p2", "late", 500)])
    h.run()
    _move(h, "p4", "c0", "c1")
    assert h.ex.stats.counters["index_fills"] == 1
    read = h.begin("m", [("c0",)])
    h.run()
    assert not read.done  # c0 is gated on the prefetch by the move
    h.runner.deliver_all()
    h.run()
    assert read.waiter.event.is_set()  # type: ignore[union-attr]
    read.resume()
    _assert_exact(h, "m", [("c0",)], read.answer())
    _assert_exact(h, "m", [("c0",), ("c1",)], h.lookup("m", [("c0",), ("c1",)]))
    _finish_all(h)


def test_a_key_depending_on_too_many_index_keys_is_not_prefetched(monkeypatch) -> None:
    from partialflow.server.dataflow import prefetch
    monkeypatch.setattr(prefetch, "MAX_KEYS_PER_KEY", 2)
    h = _visits(prefetch=True)
    _assert_exact(h, "m", [("c0",)], h.lookup("m", [("c0",)]))  # c0 has 3 products
    assert h.ex.stats.counters.get("index_keys_prefetched", 0) == 0
    assert not h.runner.pending
    _move(h, "p0", "c0", "c1")  # so the move misses, as without prefetch
    assert h.ex.stats.counters["index_fills"] == 1
    _assert_exact(h, "m", [("c0",)], h.lookup("m", [("c0",)]))
    _finish_all(h)
