"""A transaction over several tables is one packet (never coalesced with writes around it),
and a join fed by both of its tables changes by dA x B + A' x dB: exactly the view's SQL
after it, whether the join's sides are filled, holes or pending on a fill. No JVM, no
threads: the stepped harness, answers checked against sqlite at their LSN."""

from __future__ import annotations

from stepped import Harness, assert_exact, assert_settled

JOIN = "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.k = ?"
LEFT = "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k WHERE a.k = ?"
TOTAL = ("SELECT a.k, SUM(a.v + b.w) AS total FROM a JOIN b ON a.k = b.k WHERE a.k = ? "
         "GROUP BY a.k")
KEYS = [(k,) for k in range(4)]


def _harness() -> Harness:
    h = Harness()
    h.table("a", [("k", "BIGINT"), ("v", "BIGINT")], [(k, 10 * k) for k in range(3)])
    h.table("b", [("k", "BIGINT"), ("w", "BIGINT")], [(k, k) for k in range(2)])
    for name, sql in (("j", JOIN), ("lj", LEFT), ("tot", TOTAL)):
        h.view(name, sql)
    return h


def _exact(h: Harness, keys: list) -> None:
    for view in ("j", "lj", "tot"):
        answers = h.lookup(view, keys)
        assert all(lsn == h.model.lsn for _, lsn in answers)
        assert_exact(h, view, keys, answers)


def test_a_transaction_is_one_packet_between_writes() -> None:
    h = _harness()
    _exact(h, KEYS)
    h.model.write("a", inserts=[(3, 1)])
    h.model.write_many([("a", [(1, 7)], [(1, 10)]), ("b", [(1, 5), (3, 3)], [(1, 1)])])
    h.model.write("a", inserts=[(2, 2)])
    assert h.run() == 3  # the transaction was not coalesced with the writes around it
    assert h.ex.stats.counters["transactions_applied"] == 1
    _exact(h, KEYS)
    assert_settled(h)


def test_both_sides_of_a_join_change_in_one_transaction() -> None:
    """Inserts and deletes on both sides at the same key, with the sides filled, then
    evicted (holes: the join misses, the fill comes after the transaction), then with a
    read's fill pending while the transaction arrives."""
    h = _harness()
    _exact(h, KEYS)
    tx = [("a", [(0, 1), (2, 5)], [(0, 0)]), ("b", [(0, 9), (2, 4)], [(0, 0)])]
    h.model.write_many(tx)
    h.run()
    _exact(h, KEYS)
    for view in ("j", "lj", "tot"):
        h.df.evict(view, None)
    h.run()
    h.model.write_many([("b", [(2, 6)], [(2, 4)]), ("a", [(2, 6), (3, 3)], [(2, 5)])])
    h.run()
    _exact(h, KEYS)
    for view in ("j", "lj", "tot"):
        h.df.evict(view, None)
    h.run()
    read = h.begin("lj", [(3,)])  # a fill out when the next transaction comes
    h.run()
    h.clock.advance(0.006)
    h.run()
    assert h.runner.pending
    h.model.write_many([("a", [], [(3, 3)]), ("b", [(3, 1)], []), ("a", [(3, 8)], [])])
    h.run()
    assert_exact(h, "lj", [(3,)], h.finish(read))
    _exact(h, KEYS)
    assert_settled(h)
