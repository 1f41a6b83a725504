"""Reader keys with many rows are published stale, not copied after every write, unless read.

A view read whole (keyed by ``()``) holds its whole result in one key. Copying that key
for lock-free readers after every packet that changed it cost O(view) per write, so such a
key is published *stale* (publish.py): the first read after a change takes the lock and
reads the state, and leaves its copy for the reads after it; a big key read lock-free
since the last packet is copied when it changes, as its readers are at it. What a user
relies on: every answer stays exact at the LSN it reports (checked against the model's
SQLite answer), however writes, reads, shrinking and eviction interleave; and what the
change is for: a write no longer re-lists a big key nobody is reading (no JVM, stepped
executor).
"""

from __future__ import annotations

from collections import Counter

import pytest
from stepped import Harness

from partialflow.server.dataflow import publish
from partialflow.server.dataflow.state import State

WHOLE = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k"
ROWS = "SELECT k, v FROM t WHERE k = ?"
EAGER = 8  # keys of more rows than this are published stale in these tests


@pytest.fixture
def h(monkeypatch):
    monkeypatch.setattr(publish, "EAGER_ROWS", EAGER)
    h = Harness()
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(k, k) for k in range(20)])
    h.view("whole", WHOLE)
    h.view("rows", ROWS)
    yield h
    h.close()


@pytest.fixture
def listed(monkeypatch):
    """How often each (state, key) was listed (State.bucket_rows: copy_if_small lists
    through it too), reset by the test."""
    calls: Counter = Counter()
    rows = State.bucket_rows

    def counting_rows(self, fk):
        calls[(self, fk)] += 1
        return rows(self, fk)

    monkeypatch.setattr(State, "bucket_rows", counting_rows)
    return calls


def _exact(h: Harness, view: str, key: tuple, answer: tuple[list, int]) -> int:
    rows, lsn = answer
    assert sorted(rows) == sorted(h.expected(view, key, lsn)), (view, key, lsn)
    # Lock-free readers skip looking for STALE where the count says there is none; a
    # count above the truth only costs them that look.
    pub = h.ex.publisher
    for st, published in pub._rows.items():
        assert pub._stale.get(st, 0) == sum(v is publish.STALE for v in published.values())
    return lsn


def test_a_big_key_is_copied_only_while_it_is_read_and_every_read_is_exact(h, listed):
    whole = h.df.reader("whole").state
    small = h.df.reader("rows").state
    _exact(h, "whole", (), h.lookup("whole", [()])[0])
    _exact(h, "rows", (3,), h.lookup("rows", [(3,)])[0])
    h.settle()

    def write(i: int) -> int:
        listed.clear()
        # Key 3 stays small (2 rows); the whole view gains a group each time.
        lsn = h.model.write("t", inserts=[(3, 100 + i), (30 + i, i)],
                            deletes=[(3, 99 + i)] if i else [])
        h.run()
        assert listed[(small, (3,))] == 1, "a small key is copied when it changes"
        return lsn

    # Not read lock-free since the last packet: a write does not list the big key, and
    # the first read after it takes the lock (and sees the write).
    for i in range(3):
        lsn = write(i)
        assert listed[(whole, ())] == 0, "a write re-listed a big key nobody was reading"
        read = h.begin("whole", [()])
        assert read.hit_rows is None
        assert _exact(h, "whole", (), h.finish(read)[0]) == lsn
    # That read left its copy published: the reads after it are lock-free hits of it.
    listed.clear()
    read = h.begin("whole", [()])
    assert read.hit_rows is not None and listed[(whole, ())] == 0
    assert _exact(h, "whole", (), h.finish(read)[0]) == lsn
    # Read lock-free since the last packet: its readers are at it, so a change is copied
    # as a small key's is, and they need no lock.
    for i in range(3, 6):
        lsn = write(i)
        assert listed[(whole, ())] == 1
        read = h.begin("whole", [()])
        assert read.hit_rows is not None
        assert _exact(h, "whole", (), h.finish(read)[0]) == lsn
    # A packet with no read in between: stale again.
    write(6)
    lsn = write(7)
    assert listed[(whole, ())] == 0
    read = h.begin("whole", [()])
    assert read.hit_rows is None
    assert _exact(h, "whole", (), h.finish(read)[0]) == lsn
    # The small key never needs the lock.
    read = h.begin("rows", [(3,)])
    assert read.hit_rows is not None
    assert _exact(h, "rows", (3,), h.finish(read)[0]) == lsn


def test_a_big_key_unread_between_writes_is_read_exact_after_many(h, listed):
    _exact(h, "whole", (), h.lookup("whole", [()])[0])
    h.settle()
    listed.clear()
    lsn = 0
    for i in range(10):  # nobody reads: nothing is listed, however many writes
        lsn = h.model.write("t", inserts=[(i % 4, i)], deletes=[(10 + i, 10 + i)])
        h.run()
    assert not listed
    assert _exact(h, "whole", (), h.lookup("whole", [()])[0]) == lsn


def test_a_key_that_shrinks_is_copied_again_and_one_that_grows_goes_stale(h):
    _exact(h, "whole", (), h.lookup("whole", [()])[0])
    h.model.write("t", inserts=[(0, 1)])  # still big: stale again, and nobody reads it
    h.run()
    lsn = h.model.write("t", deletes=[(k, k) for k in range(EAGER, 20)])  # EAGER groups left
    h.run()
    read = h.begin("whole", [()])
    assert read.hit_rows is not None, "small again: copied when it changed"
    assert _exact(h, "whole", (), h.finish(read)[0]) == lsn
    h.model.write("t", inserts=[(0, 5)])  # a packet with no read since
    h.run()
    lsn = h.model.write("t", inserts=[(100, 1)])  # one group more than EAGER
    h.run()
    read = h.begin("whole", [()])
    assert read.hit_rows is None, "big again: published stale"
    assert _exact(h, "whole", (), h.finish(read)[0]) == lsn


def test_an_evicted_stale_key_is_a_miss_and_refills_exact(h):
    _exact(h, "whole", (), h.lookup("whole", [()])[0])
    h.model.write("t", inserts=[(50, 5)])
    h.run()  # published stale
    assert h.df.evict("whole", ()) == 1
    h.settle()
    before = h.df.stats().views["whole"].misses
    lsn = h.model.write("t", inserts=[(51, 5)])
    h.run()
    assert _exact(h, "whole", (), h.lookup("whole", [()])[0]) == lsn
    assert h.df.stats().views["whole"].misses == before + 1
    assert not h.check_states()
