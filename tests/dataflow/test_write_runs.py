"""Writes queued back to back are applied as one packet (``packets.WriteRun``), and a
write that changes a key does not make it recent for eviction. No JVM, no threads: the
stepped harness queues the writes, then runs them, and checks each answer against
sqlite at its LSN."""

from __future__ import annotations

from fake_runner import Submitted
from stepped import Harness, assert_exact, assert_settled

from partialflow.server.dataflow.packets import Tick
from partialflow.server.dataflow.reads import Read

COUNT = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE k = ? GROUP BY k"
JOIN = "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.k = ?"


def _count_view(**kw) -> Harness:
    h = Harness(**kw)
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, v) for k in range(4) for v in range(3)])
    h.view("v", COUNT)
    return h


def _exact(h: Harness, view: str, keys: list) -> None:
    answers = h.lookup(view, keys)
    assert all(lsn == h.model.lsn for _, lsn in answers)
    assert_exact(h, view, keys, answers)


def _read_with_fill_out(h: Harness, key: tuple) -> tuple[Read, Submitted]:
    """A read of cold ``key`` whose fill has gone out and waits for its reply."""
    read = h.begin("v", [key])
    h.run()
    h.clock.advance(0.006)  # close the gathering window: the fill goes out
    h.run()
    [sub] = h.runner.pending
    return read, sub


def test_writes_queued_back_to_back_apply_as_one_packet() -> None:
    h = _count_view()
    keys = [(k,) for k in range(4)]
    _exact(h, "v", keys)
    for i in range(5):
        h.model.write("t", inserts=[(i % 4, 100 + i), (3, i)])
    assert h.run() == 1  # five writes, one packet
    assert h.ex.stats.counters["writes_coalesced"] == 5
    assert h.ex.stats.counters["writes_applied"] >= 5
    assert h.ex.applied_lsn == h.model.lsn
    _exact(h, "v", keys)
    assert_settled(h)


def test_a_write_with_deletes_starts_a_new_run() -> None:
    """Only a run's first write may delete: a delete after an insert of the same row would
    reach the operators in an order no single write has."""
    h = _count_view()
    keys = [(k,) for k in range(4)]
    _exact(h, "v", keys)
    h.model.write("t", inserts=[(1, 50)])
    h.model.write("t", deletes=[(1, 50)], inserts=[(1, 51)])
    h.model.write("t", inserts=[(2, 52)])
    h.model.write("t", deletes=[(2, 52)])
    assert h.run() == 3  # [insert], [delete+insert, insert], [delete]
    assert h.ex.stats.counters["writes_coalesced"] == 2
    _exact(h, "v", keys)
    assert_settled(h)


def test_a_run_reaching_a_pending_key_is_held_and_replayed_once() -> None:
    h = _count_view()
    read, sub = _read_with_fill_out(h, (2,))
    for i in range(3):
        h.model.write("t", inserts=[(2, 10 * i), (1, i)])
    h.run()
    assert h.ex.stats.counters["writes_coalesced"] == 3
    assert sub.fill.held and all(x.lsn == h.model.lsn for x in sub.fill.held)
    h.runner.deliver()
    h.run()
    read.resume()
    [(rows, lsn)] = read.answer()
    assert lsn == h.model.lsn and h.mismatch("v", (2,), rows, lsn) is None
    _exact(h, "v", [(1,), (2,)])
    assert_settled(h)


def test_writes_to_different_tables_are_not_merged() -> None:
    h = Harness()
    h.table("a", [("k", "BIGINT"), ("v", "BIGINT")], [(1, 10), (2, 20)])
    h.table("b", [("k", "BIGINT"), ("w", "BIGINT")], [(1, 100), (2, 200)])
    h.view("j", JOIN)
    keys = [(1,), (2,)]
    _exact(h, "j", keys)
    h.model.write("a", inserts=[(1, 11)])
    h.model.write("b", inserts=[(1, 101)])
    h.model.write("a", inserts=[(2, 21)])
    h.model.write("a", inserts=[(1, 12)])
    assert h.run() == 3  # a, b, then a run of two writes to a
    assert h.ex.stats.counters["writes_coalesced"] == 2
    _exact(h, "j", keys)
    assert_settled(h)


def test_a_write_does_not_make_a_key_recent() -> None:
    """Keys filled in the order 0, 1, 2, then key 0 written to: under memory pressure the
    least recently *read* key (0) goes first, not key 1."""
    h = _count_view()
    reader = h.df.reader("v").state
    for k in range(3):
        _exact(h, "v", [(k,)])
    h.model.write("t", inserts=[(0, 99)])
    h.run()
    ev = h.ex.evictor
    ev.set_memory_limit(ev.memory_bytes - 1)
    assert not reader.is_filled((0,))
    assert reader.is_filled((1,)) and reader.is_filled((2,))
    _exact(h, "v", [(0,), (1,), (2,)])


def test_a_read_makes_a_key_recent() -> None:
    h = _count_view()
    reader = h.df.reader("v").state
    for k in range(3):
        _exact(h, "v", [(k,)])
    _exact(h, "v", [(0,)])  # a hit (lock-free: counted at the next packet)
    h.ex.submit(Tick())
    h.run()  # key 0 and the aggregate's group 0 below it are now the most recent
    ev = h.ex.evictor
    ev.set_memory_limit(ev.memory_bytes - 1)
    assert reader.is_filled((0,)) and not reader.is_filled((1,))


def test_a_fill_reply_lands_before_the_writes_queued_ahead_of_it() -> None:
    """A read does not wait for a backlog of writes it did not ask to see: the reply to
    its fill goes ahead of them (inbox.URGENT), the read is answered exact at the fill's
    LSN, and the writes then apply to the filled key."""
    h = _count_view()
    read, sub = _read_with_fill_out(h, (2,))
    for i in range(3):
        h.model.write("t", inserts=[(2, 10 * i), (1, i)])  # queued, not applied
    h.runner.deliver()  # the reply is queued behind the three writes
    assert h.ex.run_next()  # one packet: the reply
    assert read.waiter is not None and read.waiter.event.is_set()
    read.resume()
    [(rows, lsn)] = read.answer()
    assert lsn == sub.fill.lsn < h.model.lsn, "answered before the queued writes"
    assert h.mismatch("v", (2,), rows, lsn) is None
    h.run()
    _exact(h, "v", [(1,), (2,)])
    assert_settled(h)
