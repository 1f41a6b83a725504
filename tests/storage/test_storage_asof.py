"""as_of exactness against an in-Python model, across flushes, compaction and retention."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from conftest import BAG
from pyspark.sql import functions as F

from partialflow.server.errors import FailedPrecondition, InvalidArgument
from partialflow.server.storage import Storage


def random_row(rng: random.Random) -> tuple:
    # A small domain so duplicates (bag semantics) and re-inserts happen often; NULLs included.
    return (
        rng.choice([1, 2, 3, None]),
        rng.choice(["a", "b", "ü", None]),
        rng.choice([0.5, -1.25, 3.0, None]),
        rng.choice([True, False, None]),
    )


def run_history(st: Storage, rng: random.Random, writes: int, flush_every: int,
                compact_at: int | None = None) -> dict[int, Counter]:
    """Random inserts/deletes; returns the model (Counter of rows) after each LSN."""
    model: Counter = Counter()
    history: dict[int, Counter] = {0: Counter()}
    for i in range(writes):
        deletes = []
        pool = list(model.elements())
        rng.shuffle(pool)
        deletes = pool[: rng.randrange(0, min(len(pool), 4) + 1)]
        inserts = [random_row(rng) for _ in range(rng.randrange(0, 6))]
        lsn = st.write("t", inserts, deletes)
        model.subtract(deletes)
        model.update(inserts)
        model = +model
        history[lsn] = Counter(model)
        if flush_every and i % flush_every == flush_every - 1:
            st.flush()
        if compact_at is not None and i == compact_at:
            st.compact("t")
    return history


def table_at(st: Storage, lsn: int) -> Counter:
    cols, rows, got_lsn = st.query("SELECT * FROM t", as_of=lsn)
    assert cols == ["k", "s", "x", "b"]
    assert got_lsn == lsn
    return Counter(rows)


def test_as_of_exact_across_flushes_and_compaction(store: Storage) -> None:
    store.create_table(BAG)
    rng = random.Random(1234)
    history = run_history(store, rng, writes=60, flush_every=7, compact_at=40)
    assert store.stats()["compactions"] == 1
    last = store.last_lsn
    assert last == 60
    # Through query(): the unflushed tail, a flushed LSN after compaction, one inside the
    # compacted range, and LSN 0.
    for v in (last, 50, 13, 0):
        assert table_at(store, v) == history[v], f"as_of {v}"
    # Many more LSNs in one Spark job: the union of table_df at each V, tagged with V.
    vs = [1, 5, 7, 8, 29, 40, 41, 42, 55, last - 1]
    snaps = [store.snapshot(v) for v in vs]
    try:
        df = None
        for v, snap in zip(vs, snaps, strict=True):
            part = snap.table_df("t").withColumn("v", F.lit(v))
            df = part if df is None else df.unionByName(part)
        got: dict[int, Counter] = {v: Counter() for v in vs}
        for r in df.collect():
            got[r["v"]][(r["k"], r["s"], r["x"], r["b"])] += 1
    finally:
        for snap in snaps:
            snap.close()
    for v in vs:
        assert got[v] == history[v], f"as_of {v}"
    # Same through the snapshot API directly, with a key filter (pushed down + memtable).
    with store.snapshot(45) as snap:
        got = Counter(tuple(r) for r in snap.table_df("t", {"k": [1, None]}).collect())
    want = Counter({r: n for r, n in history[45].items() if r[0] in (1, None)})
    assert got == want


def test_retention_horizon_refuses_old_reads(make_store) -> None:
    st = make_store(retention_lsns=10)
    st.create_table(BAG)
    rng = random.Random(99)
    history = run_history(st, rng, writes=40, flush_every=5)
    st.flush()
    figures = st.compact("t")
    horizon = figures["tables"]["t"]["horizon"]
    assert horizon == 40 - 10
    assert st.stats()["horizon"]["t"] == horizon
    with pytest.raises(
        FailedPrecondition,
        match=rf"as_of 12 is older than the retention horizon {horizon} of table t",
    ):
        st.query("SELECT * FROM t", as_of=12)
    for v in (horizon, horizon + 1, 35, 40):
        assert table_at(st, v) == history[v]
    # +/- pairs older than the horizon cancelled: the compacted segment holds at most one
    # row per distinct row value up to the horizon, plus the newer raw rows.
    assert figures["rows_after"] < figures["rows_before"]
    # Writes go on after compaction and stay exact.
    more = run_history(st, rng, writes=5, flush_every=0)
    assert sum(more[max(more)].values()) >= 0
    with pytest.raises(InvalidArgument, match="out of range"):
        st.query("SELECT 1 FROM t", as_of=st.last_lsn + 1)


def test_pinned_snapshot_limits_horizon_and_keeps_files(make_store) -> None:
    st = make_store(retention_lsns=0)
    st.create_table(BAG)
    rng = random.Random(7)
    history = run_history(st, rng, writes=20, flush_every=4)
    st.flush()
    seg_dir = st.data_dir / "tables" / "t"
    snap = st.snapshot(10)
    before = {p.name for p in seg_dir.iterdir()}
    figures = st.compact("t")
    assert figures["tables"]["t"]["horizon"] == 10  # held back by the pin, not 20
    assert before <= {p.name for p in seg_dir.iterdir()}  # replaced files kept while pinned
    assert Counter(tuple(r) for r in snap.table_df("t").collect()) == history[10]
    snap.close()
    assert not (before & {p.name for p in seg_dir.iterdir()})  # deleted once unpinned
    assert st.compact("t")["tables"]["t"]["horizon"] == 20
    assert table_at(st, 20) == history[20]
    assert st.stats()["pinned_snapshots"] == 0


def test_leaked_snapshot_stops_pinning(make_store) -> None:
    st = make_store(retention_lsns=0)
    st.create_table(BAG)
    run_history(st, random.Random(3), writes=6, flush_every=3)
    snap = st.snapshot(2)
    assert st.stats()["pinned_snapshots"] == 1
    del snap  # garbage-collected without close()
    assert st.stats()["pinned_snapshots"] == 0
    assert st.compact("t")["tables"]["t"]["horizon"] == 6
