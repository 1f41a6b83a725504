"""The disk tier on the JVM-free model: what a user relies on when keys are shelved.

Keys evicted for memory are shelved in the tier (server/dataflow/tier.py) and stay exact:
reading one answers the model's own answer (SQLite over the base tables) without an
upquery; writing to one brings it back and applies the write; the tier's limit makes
holes; a failing store makes every shelved key a hole and answers stay exact; the store
commits only at checkpoints, so a restart reuses exactly what the checkpoint names.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from stepped import Harness

from partialflow.server.dataflow.shelfreads import read_shelved
from partialflow.server.dataflow.tier import Tier, TierError

COUNT = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE k = ? GROUP BY k"
ROWS = "SELECT k, v FROM t WHERE k = ?"
JOIN = "SELECT t.k, t.v, u.w FROM t JOIN u ON t.k = u.k WHERE t.k = ?"
KEYS = 40


def _harness(tmp_path, **kw: Any) -> Harness:
    kw.setdefault("memory_limit", 6_000)
    h = Harness(tier=tmp_path / "tier.db", **kw)
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")],
            [(k, 10 * k + i) for k in range(KEYS) for i in range(k % 3 + 1)])
    h.table("u", [("k", "BIGINT"), ("w", "TEXT")], [(k, f"w{k}") for k in range(KEYS)])
    for name, sql in (("counts", COUNT), ("rows", ROWS), ("joined", JOIN)):
        h.view(name, sql)
    return h


def _read_all(h: Harness) -> None:
    for view in ("counts", "rows", "joined"):
        keys = [(k,) for k in range(KEYS)]
        for key, (rows, lsn) in zip(keys, h.lookup(view, keys), strict=True):
            assert h.mismatch(view, key, rows, lsn) is None


def test_shelved_keys_read_exactly_without_upqueries(tmp_path):
    h = _harness(tmp_path)
    try:
        _read_all(h)
        h.settle()
        assert h.tier is not None and h.tier.keys > 0, "the memory limit shelved keys"
        assert h.ex.evictor.memory_bytes <= 6_000
        upqueries = h.df.stats().counters.get("upqueries", 0)
        # Write to keys of every kind (shelved or not), then read everything again.
        h.model.write("t", inserts=[(k, 1000 + k) for k in range(0, KEYS, 3)],
                      deletes=[(k, 10 * k) for k in range(1, KEYS, 4)])
        h.model.write("u", inserts=[(k, f"x{k}") for k in range(0, KEYS, 5)])
        h.settle()
        assert h.check_states() == []
        _read_all(h)
        h.settle()
        assert h.df.stats().counters.get("upqueries", 0) == upqueries, "shelved keys came from disk"
        assert h.tier.counters["unshelved"] > 0 and h.tier.counters["shelved"] > 0
        assert h.check_states() == [] and h.check_quiet() == []
    finally:
        h.close()


def _shelved(h: Harness, view: str) -> list[Any]:
    """Keys of ``view`` out of memory whose contents are shelved: the reader's own, or
    (a view derived from its aggregate) the aggregate's."""
    st = h.df.reader(view).state
    src = st.source[0] if st.source is not None else None
    return [(k,) for k in range(KEYS) if not st.in_memory((k,)) and (
        st.shelved((k,)) is not None or (src is not None and src.shelved((k,)) is not None))]


def _own_shelved_key(h: Harness) -> Any:
    """A key of ``rows`` whose reader holds it shelved itself."""
    st = h.df.reader("rows").state
    keys = [k for k in _shelved(h, "rows") if st.shelved(k) is not None]
    assert keys, "the memory limit shelved keys of rows"
    return keys[0]


@pytest.mark.parametrize("view", ["counts", "rows"])
def test_readers_read_shelved_keys_from_the_store_themselves(tmp_path, view):
    # "counts" is derived from its aggregate's shelved key; "rows" keeps its own.
    h = _harness(tmp_path)
    try:
        _read_all(h)
        h.model.write("t", inserts=[(k, 500 + k) for k in range(0, KEYS, 2)])
        h.settle()
        keys = _shelved(h, view)
        assert len(keys) > 5, "the memory limit shelved keys of the view"
        read0 = h.tier.counters["read"]  # type: ignore[union-attr]
        read = h.begin(view, keys)
        # Answered at once from the store, on the reader's side: no packet ran.
        assert read.done
        assert h.tier.counters["read"] - read0 == len(keys)  # type: ignore[union-attr]
        for key, (rows, lsn) in zip(keys, read.answer(), strict=True):
            assert h.mismatch(view, key, rows, lsn) is None
            assert lsn == h.model.lsn
        # Between packets the executor brings keys read from the store a second time into
        # memory (once is not enough: the long tail of a skewed load is read once).
        h.settle()
        assert not any(h.df.reader(view).state.in_memory(k) for k in keys)
        for key, (rows, lsn) in zip(keys, h.lookup(view, keys), strict=True):
            assert h.mismatch(view, key, rows, lsn) is None
        h.settle()
        assert any(h.df.reader(view).state.in_memory(k) for k in keys)
        assert h.check_states() == [] and h.check_quiet() == []
    finally:
        h.close()


def test_a_key_shelved_after_the_published_lsn_is_not_read_from_the_store(tmp_path):
    # A reader that took the published LSN (and the tier's floor with it) before a packet
    # changed a key and shelved it again must not read that newer row: its contents are at
    # an LSN not yet published (shelfreads.py).
    h = _harness(tmp_path)
    try:
        _read_all(h)
        h.settle()
        st = h.df.reader("rows").state
        k = _own_shelved_key(h)
        floor = h.df.executor.publisher.tier_floor
        before = st.shelved(k)
        assert before is not None and before < floor
        assert read_shelved(st, [k], floor) == {k: read_shelved(st, [k], floor)[k]}
        h.model.write("t", inserts=[(k[0], 9_999)])
        h.settle()
        if st.in_memory(k):  # the write brought it back; push it out again
            h.ex.evictor.enforce_memory()
        after = st.shelved(k)
        assert after is not None and after >= floor, "the key was shelved again, higher"
        assert read_shelved(st, [k], floor) == {}
        new_floor = h.df.executor.publisher.tier_floor
        got = read_shelved(st, [k], new_floor)
        assert h.mismatch("rows", k, got[k], h.model.lsn) is None
    finally:
        h.close()


def test_the_disk_limit_makes_holes_and_answers_stay_exact(tmp_path):
    h = _harness(tmp_path, disk_limit=1_500)
    try:
        _read_all(h)
        h.settle()
        assert h.tier is not None and h.tier.counters["evictions"] > 0
        assert h.tier.bytes <= 1_500
        h.model.write("t", inserts=[(k, 7) for k in range(KEYS)])
        h.settle()
        _read_all(h)
        h.settle()
        assert h.tier.bytes <= 1_500
        assert h.check_states() == [] and h.check_quiet() == []
    finally:
        h.close()


class _Failing:
    """A SQLite connection that refuses every write from now on, as a full disk does
    (SQLITE_FULL), and reads as before; only the tier's failure handling is under test."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.in_transaction = db.in_transaction

    def execute(self, sql: str, args: tuple = ()) -> Any:
        if sql.startswith("SELECT"):
            return self.db.execute(sql, args)
        raise sqlite3.OperationalError("database or disk is full")

    def executemany(self, sql: str, args: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    def close(self) -> None:
        self.db.close()


def test_a_failing_tier_turns_shelved_keys_into_holes(tmp_path):
    h = _harness(tmp_path)
    try:
        _read_all(h)
        h.settle()
        tier = h.tier
        assert tier is not None and tier.keys > 0
        tier._db = _Failing(tier._db)  # type: ignore[assignment]
        # A write to shelved keys brings them back (a read of the store); deleting their
        # rows and shelving others then fails between packets: every shelved key becomes
        # a hole, with what was filled relying on it.
        h.model.write("t", inserts=[(k, 5) for k in range(KEYS)])
        h.settle()
        assert tier.broken
        assert all(not st.shelved_keys() for st in h.ex.evictor.states.values())
        # From now on eviction makes holes, and every answer is still exact.
        _read_all(h)
        h.settle()
        assert h.check_states() == []
        assert h.df.stats().as_dict()["tier_broken"]
    finally:
        h.close()


def test_the_store_keeps_only_what_a_checkpoint_committed(tmp_path):
    path = tmp_path / "t.db"
    tier = Tier(path, 1 << 20)
    (kept,) = tier.put_many([(1, ("a",), {"a": 1}, 1)])
    n = tier.commit()
    # After the cut: a crash (or close) rolls it back.
    (later,) = tier.put_many([(1, ("b",), {"b": 2}, 1)])
    tier.close()
    again = Tier(path, 1 << 20)
    assert again.committed == n
    assert again.usable_from(n)
    assert again.peek(kept) == {"a": 1}
    assert again.peek(later) is None
    again.close()
    # A manifest naming another commit (a crash between the tier's commit and the
    # manifest): the store is emptied, its keys start as holes.
    other = Tier(path, 1 << 20)
    assert not other.usable_from(n - 1)
    assert other.peek(kept) is None and other.stored() == (0, 0)
    other.close()


def test_a_broken_tier_refuses_clearly(tmp_path):
    tier = Tier(tmp_path / "t.db", 1 << 20)
    tier._db = _Failing(tier._db)  # type: ignore[assignment]
    with pytest.raises(TierError, match="disk is full"):
        tier.put_many([(1, ("a",), {"a": 1}, 1)])
    assert "disk is full" in tier.broken
    with pytest.raises(TierError, match="tier is off"):
        tier.commit()
    tier.close()


def test_a_restart_reuses_the_shelved_keys_a_checkpoint_named(tmp_path):
    h = _harness(tmp_path, checkpoints=tmp_path / "cp")
    try:
        _read_all(h)
        h.settle()
        shelved = h.tier.keys  # type: ignore[union-attr]
        assert shelved > 0
        cp = h.ex.checkpointer
        assert cp is not None
        fut = cp.request()
        for _ in range(200):
            h.settle()
            if fut.done():
                break
            time.sleep(0.01)
        m = fut.result(5)
        assert m.extra.get("tier") == h.tier.committed  # type: ignore[union-attr]
        h.model.write("t", inserts=[(k, 3) for k in range(KEYS)])  # replayed at the restart
        h.settle()
    finally:
        h.close()
    restarted = Harness(checkpoints=tmp_path / "cp", model=h.model, tier=tmp_path / "tier.db",
                        memory_limit=6_000)
    try:
        restarted.views = dict(h.views)
        restarted.settle()
        assert restarted.tier is not None and restarted.tier.keys > 0, "shelved keys reused"
        assert restarted.check_states() == [] and restarted.check_quiet() == []
        before = restarted.df.stats().counters.get("upqueries", 0)
        _read_all(restarted)
        restarted.settle()
        assert restarted.check_states() == []
        # Every key was in the checkpoint (in memory or shelved): no read needed Spark.
        assert restarted.df.stats().counters.get("upqueries", 0) == before
    finally:
        restarted.close()


def test_without_checkpoints_the_store_still_commits(tmp_path):
    # Nothing refers to these commits (a start without a checkpoint empties the store),
    # but SQLite's write-ahead log only shrinks after one: without them it grew past
    # 100 MB while 1M keys were shelved.
    from partialflow.server.dataflow.packets import Tick

    h = _harness(tmp_path)
    try:
        assert h.ex.checkpointer is None
        _read_all(h)
        h.settle()
        first = h.tier.committed  # type: ignore[union-attr]
        h.clock.advance(11)
        h.ex.submit(Tick())
        h.run()
        assert h.tier.committed > first  # type: ignore[union-attr]
        assert h.check_states() == []
    finally:
        h.close()


def test_the_disk_limit_leaves_a_subscribed_key_shelved_before_it_subscribed(tmp_path):
    # A subscription holds its keys against eviction (a subscriber would get a refill at
    # every packet otherwise); one shelved before the subscription came stays filled when
    # the disk limit then makes holes of the other shelved keys (subscribing brings it
    # back into memory, where it is held).
    h = _harness(tmp_path)
    try:
        _read_all(h)
        h.settle()
        st = h.df.reader("rows").state
        key = _own_shelved_key(h)
        sub = h.df.subscribe("rows", [key])
        h.settle()
        assert h.tier is not None
        h.tier.limit = 1  # every unheld shelved key must go
        h.model.write("t", inserts=[(39, 1)])
        h.settle()
        assert h.tier.counters["evictions"] > 0
        assert st.is_filled(key), "the subscribed key was made a hole"
        h.df.unsubscribe(sub)
    finally:
        h.close()


def test_readers_share_the_store_with_the_executor_thread(tmp_path):
    # Readers read shelved rows on their own threads (peek_many) while the executor's
    # thread shelves, brings back, collects and commits on the same connection: no call
    # fails (a failure would break the tier: every shelved key a hole), and every row a
    # reader gets is exactly what was stored under that number (rows are never rewritten).
    import pickle
    import threading

    from partialflow.server.checkpoint.merge import load_value

    tier = Tier(tmp_path / "shared.db", 1 << 30)
    stored: dict[int, Any] = {}
    live: list[int] = []
    stop = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            refs = list(live[-20:])
            try:
                for ref, blob in tier.peek_many(refs).items():
                    if load_value(blob) != stored[ref]:
                        problems.append(f"row {ref} changed")
            except Exception as e:  # the test's own failure, reported below
                problems.append(repr(e))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for round_ in range(300):
            values = [{(round_, i): (round_ * i, "x" * (i % 7))} for i in range(20)]
            refs = tier.put_many([(1, (round_, i), v, 1) for i, v in enumerate(values)])
            stored.update(zip(refs, values, strict=True))
            live.extend(refs)
            back = tier.take_many(refs[:10])
            assert [back[r][0] for r in refs[:10]] == values[:10]
            tier.collect()
            if round_ % 25 == 0:
                tier.commit()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not tier.broken and problems == []
    assert tier.counters["read"] > 0
    assert pickle.dumps(tier.peek(live[-1])) == pickle.dumps(stored[live[-1]])
    tier.close()
