"""Read hits of a lookup of many keys: one answer for every key, and recency for eviction.

A lookup whose keys are all filled is answered from the published rows without per-key
work (reads.py); these check what a user relies on there against the model's own answer
(SQLite over the base tables): rows per key in the order asked, duplicates answered twice,
a NULL key empty, ordered views presented, and the keys it read counted as recently used,
so a memory limit evicts the keys nobody read first (no JVM, stepped executor).
"""

from __future__ import annotations

from stepped import Harness

ROWS = "SELECT k, v FROM t WHERE k = ?"
TOP = "SELECT k, v FROM t WHERE k = ? ORDER BY v DESC LIMIT 2"
COUNT = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t WHERE k = ? GROUP BY k"


def _harness(**kw) -> Harness:
    h = Harness(**kw)
    # Keys 0..9 with k % 3 + 1 rows each; key 10 has none.
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")],
            [(k, 10 * k + i) for k in range(10) for i in range(k % 3 + 1)])
    for name, sql in (("rows", ROWS), ("top", TOP), ("counts", COUNT)):
        h.view(name, sql)
    return h


def test_all_hit_lookups_answer_every_key_as_asked():
    h = _harness()
    try:
        keys = [(3,), (1,), (10,), (2,), (1,), (5,), (4,), (3,)]  # duplicates, a key with no rows
        for view in ("rows", "top", "counts"):
            h.lookup(view, keys)  # fills them
            read = h.begin(view, keys)
            assert read.done and read.hit_rows is not None, "every key a published hit"
            answers = h.finish(read)
            assert len(answers) == len(keys)
            lsn = answers[0][1]
            for key, (rows, at) in zip(keys, answers, strict=True):
                assert at == lsn
                assert isinstance(rows, list)
                want = h.expected(view, key, at)
                if view == "top":  # ordered and limited: the order is part of the answer
                    assert rows == want, (view, key)
                else:
                    assert sorted(rows) == sorted(want), (view, key)
        # A NULL among hits still answers empty (`k = NULL` is never true).
        answers = h.lookup("rows", [(1,), (None,), (2,)])
        assert answers[1][0] == [] and answers[0][0] and answers[2][0]
    finally:
        h.close()


def test_hits_count_distinct_keys_and_make_them_recently_used():
    h = _harness()
    try:
        h.lookup("rows", [(k,) for k in range(10)])
        h.settle()
        st = h.df.reader("rows").state
        before = h.df.stats().views["rows"]
        h.lookup("rows", [(7,), (2,), (7,), (5,)])  # all hits, lock-free
        h.settle()
        after = h.df.stats().views["rows"]
        assert after.hits - before.hits == 3, "distinct keys, as a key-by-key read"
        assert after.misses == before.misses
        # The read keys are the most recently used: a limit that keeps three keys keeps
        # them and evicts the others first (the view's reader is its only partial state).
        lru = h.ex.evictor.lru_sizes()
        assert {sid for sid, _ in lru} == {st.sid}
        h.df.set_memory_limit(h.ex.evictor.full_bytes + sum(lru[(st.sid, (k,))] for k in (7, 2, 5)))
        h.settle()
        filled = {k for k in range(10) if st.is_filled((k,))}
        assert filled == {7, 2, 5}, filled
        assert not h.check_states()
    finally:
        h.close()


def test_a_key_read_back_from_the_disk_tier_is_a_lock_free_hit_again(tmp_path):
    """Shelving a key unpublishes it; reads bring it back into memory, and it must be
    published again, or every later read of it queues a miss for the executor."""
    h = _harness(tier=tmp_path / "tier.db")
    try:
        h.lookup("rows", [(k,) for k in range(10)])
        h.settle()
        st = h.df.reader("rows").state
        lru = h.ex.evictor.lru_sizes()
        # Room for the two biggest keys: the others are shelved.
        h.df.set_memory_limit(h.ex.evictor.full_bytes + 2 * max(lru.values()))
        h.settle()
        shelved = [(k,) for k in range(10) if st.shelved((k,)) is not None]
        assert len(shelved) >= 7, shelved
        key = shelved[0]
        for _ in range(2):  # read from the tier twice: then it comes back (shelfreads.py)
            [(rows, lsn)] = h.lookup("rows", [key])  # answered from the tier
            assert sorted(rows) == sorted(h.expected("rows", key, lsn))
            h.settle()
        assert st.in_memory(key), "read last: the most recently used"
        read = h.begin("rows", [key])
        assert read.done and read.hit_rows is not None, "published again: a lock-free hit"
        [(rows, lsn)] = h.finish(read)
        assert sorted(rows) == sorted(h.expected("rows", key, lsn))
        assert not h.check_states()
    finally:
        h.close()
