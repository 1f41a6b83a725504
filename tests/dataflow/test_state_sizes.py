"""A state's bytes, for the memory limit, are its rows or groups counted times a sampled
mean size of one (meter.py, SAMPLE_EVERY): checked here against each stored row's or
entry's size measured, as the rows' widths vary and change. JVM-free: the stepped
harness."""

from __future__ import annotations

import random

from stepped import Harness, assert_exact, assert_settled

from partialflow.operators.sizes import row_size
from partialflow.server.dataflow.meter import BUCKET_OVERHEAD
from partialflow.server.dataflow.state import State

VIEW = "SELECT k, name FROM t WHERE k = ?"


def _measured(st: State) -> int:
    """Bytes of every filled key, each row's or entry's size measured (what was kept
    before)."""
    if st.kind == "grouped":
        op = st.node.op
        return sum(BUCKET_OVERHEAD + sum(op.entry_size(e) + row_size(g) for g, e in st.entries(fk))
                   for fk in st.filled_keys())
    return sum(BUCKET_OVERHEAD + sum(row_size(r) for r in st.bucket_rows(fk))
               for fk in st.filled_keys())


def _text(rng: random.Random, width: int) -> str:
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randrange(width // 2, width)))


def _harness(rng: random.Random, width: int, keys: int, rows: int) -> Harness:
    h = Harness()
    h.table("t", [("k", "BIGINT"), ("name", "TEXT")],
            [(rng.randrange(keys), _text(rng, width)) for _ in range(rows)])
    h.view("v", VIEW)
    return h


def test_a_filled_state_accounts_about_the_bytes_its_rows_take() -> None:
    rng = random.Random(3)
    h = _harness(rng, 200, 50, 5_000)
    keys = [(k,) for k in range(50)]
    assert_exact(h, "v", keys, h.lookup("v", keys))
    st = h.df.reader("v").state
    assert st.meter.mean_item_size > 0
    assert abs(st.memory_bytes - _measured(st)) <= 0.1 * _measured(st)
    assert not h.check_states()  # each key's row count kept as counted from its rows
    assert_settled(h)


def test_the_accounted_bytes_follow_rows_that_grow() -> None:
    """Short rows replaced by rows ten times as wide, once: the estimate follows (it
    does not keep the mean of every row it ever saw)."""
    rng = random.Random(4)
    h = _harness(rng, 40, 20, 2_000)
    keys = [(k,) for k in range(20)]
    h.lookup("v", keys)
    st = h.df.reader("v").state
    before = st.memory_bytes
    old = h.model.rows_at("t", h.model.lsn)
    for i in range(0, len(old), 100):  # each write: 100 short rows out, 100 wide rows in
        h.model.write("t", deletes=old[i:i + 100],
                      inserts=[(rng.randrange(20), _text(rng, 400)) for _ in range(100)])
        h.run()
    assert_exact(h, "v", keys, h.lookup("v", keys))
    assert st.memory_bytes > 2 * before
    assert abs(st.memory_bytes - _measured(st)) <= 0.15 * _measured(st)
    assert not h.check_states()


def test_a_grouped_state_accounts_about_the_bytes_its_entries_take() -> None:
    """Groups of MAX over text: entries of different widths (candidates of short and
    long strings), groups coming and going as rows are deleted and inserted."""
    rng = random.Random(5)
    h = Harness()
    h.table("t", [("k", "BIGINT"), ("g", "BIGINT"), ("name", "TEXT")],
            [(rng.randrange(20), rng.randrange(30), _text(rng, rng.choice([20, 300])))
             for _ in range(4_000)])
    h.view("m", "SELECT k, g, MAX(name) AS top FROM t WHERE k = ? GROUP BY k, g")
    keys = [(k,) for k in range(20)]
    assert_exact(h, "m", keys, h.lookup("m", keys))
    [st] = [s for s in h.ex.evictor.states.values() if s.kind == "grouped"]
    assert abs(st.memory_bytes - _measured(st)) <= 0.15 * _measured(st)
    old = h.model.rows_at("t", h.model.lsn)
    rng.shuffle(old)
    for i in range(0, 2_000, 50):
        h.model.write("t", deletes=old[i:i + 50],
                      inserts=[(rng.randrange(20), rng.randrange(40), _text(rng, 300))
                               for _ in range(50)])
        h.run()
    assert_exact(h, "m", keys, h.lookup("m", keys))
    assert abs(st.memory_bytes - _measured(st)) <= 0.15 * _measured(st)
    assert not h.check_states()  # each key's groups counted as kept
