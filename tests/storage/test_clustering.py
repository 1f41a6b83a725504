"""Clustered compaction: segments sorted by the clustering columns, in
small row groups, with exactly the same rows at every readable LSN; and the footer
footprint of a key filter is smaller on a clustered table than on the same data unsorted."""

from __future__ import annotations

import random
import time
from collections import Counter

import pyarrow.compute as pc
import pyarrow.parquet as pq
from conftest import BAG

from partialflow.server.storage import Storage


def build(st: Storage, seed: int) -> list[int]:
    """Random inserts and deletes over keys 0..199 in random order, flushed into several
    segments; returns every LSN written."""
    rng = random.Random(seed)
    st.create_table(BAG)
    live: list[tuple] = []
    lsns = []
    for i in range(60):
        inserts = [
            (rng.randrange(200), rng.choice(["a", "b", None]), float(rng.randrange(9)),
             rng.choice([True, False]))
            for _ in range(50)
        ]
        rng.shuffle(live)
        deletes, live = live[:5], live[5:]
        lsns.append(st.write("t", inserts, deletes))
        live.extend(inserts)
        if i % 10 == 9:
            st.flush()
    return lsns


def rows_at(st: Storage, lsn: int) -> Counter:
    _, rows, got = st.query("SELECT * FROM t", as_of=lsn)
    assert got == lsn
    return Counter(rows)


def the_segment(st: Storage) -> str:
    with st.snapshot() as snap:
        paths = snap.table_view("t").paths()
    assert len(paths) == 1, paths
    return paths[0]


def test_compaction_sorts_by_clustering_columns_and_keeps_rows(make_store, tmp_path) -> None:
    st = make_store(tmp_path / "a", row_group_rows=200, retention_lsns=20)
    lsns = build(st, seed=7)
    st.set_clustering({"T": ["K", "nope"], "missing": ["k"]})  # any case; unknowns ignored
    assert st.clustering("t") == ("k",)
    # LSNs that stay readable after compaction (horizon = last - 20), and the last one.
    probe = [lsns[-20], lsns[-11], lsns[-1]]
    before = {lsn: rows_at(st, lsn) for lsn in probe}
    report = st.compact("t")
    assert report["segments_after"] == 1
    assert st.stats()["clustering"] == {"t": ["k"]}

    path = the_segment(st)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups >= 5, meta.num_row_groups  # ~2700 rows in groups of <= 200
    assert all(meta.row_group(g).num_rows <= 200 for g in range(meta.num_row_groups))
    keys = pq.read_table(path, columns=["k"])["k"]
    assert keys.to_pylist() == sorted(keys.to_pylist()), "segment not sorted by k"
    # Rows older than the horizon were consolidated, newer ones kept with their own _lsn.
    lsn_col = pq.read_table(path, columns=["_lsn"])["_lsn"]
    assert pc.max(lsn_col).as_py() == lsns[-1]

    for lsn, rows in before.items():
        assert rows_at(st, lsn) == rows, f"rows changed at LSN {lsn}"


def test_footprint_smaller_when_clustered(make_store, tmp_path) -> None:
    clustered = make_store(tmp_path / "c", row_group_rows=200)
    plain = make_store(tmp_path / "p", row_group_rows=200)
    for st in (clustered, plain):
        build(st, seed=11)
    clustered.set_clustering({"t": ["k"]})
    for st in (clustered, plain):
        st.compact("t")
    with clustered.snapshot() as a, plain.snapshot() as b:
        # The same data: same totals, same answer.
        assert Counter(tuple(r) for r in a.table_df("t").collect()) == Counter(
            tuple(r) for r in b.table_df("t").collect())
        fa = a.footprint("t", {"k": [42]})
        fb = b.footprint("t", {"k": [42]})
        assert fa.row_groups_total == fb.row_groups_total >= 5
        # Sorted, key 42 lies in one or two row groups; unsorted, nearly every group's
        # min/max spans it.
        assert fa.row_groups_scanned <= 2
        assert fb.row_groups_scanned > fa.row_groups_scanned
        assert fb.row_groups_scanned >= fb.row_groups_total - 1
        assert fa.bytes_scanned < fb.bytes_scanned <= fb.bytes_total
        # No filter: every row group.
        assert a.footprint("t").row_groups_scanned == fa.row_groups_total


def test_flush_sorts_its_segment(make_store, tmp_path) -> None:
    st = make_store(tmp_path / "f", row_group_rows=100)
    st.create_table(BAG)
    st.set_clustering({"t": ["s", "k"]})
    rng = random.Random(5)
    rows = [(rng.randrange(50), rng.choice(["b", "a", None]), 1.0, True) for _ in range(450)]
    st.write("t", rows, [])
    lsn = st.write("t", [], rows[:30])
    st.flush()
    path = the_segment(st)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 5  # 480 rows in groups of 100
    t = pq.read_table(path, columns=["s", "k"])
    pairs = list(zip(t["s"].to_pylist(), t["k"].to_pylist(), strict=True))
    # Sorted by s (NULLs last), then k.
    assert pairs == sorted(pairs, key=lambda p: (p[0] is None, p[0] or "", p[1]))
    assert rows_at(st, lsn) == Counter(rows[30:])


def test_new_clustering_resorts_a_compacted_segment(make_store, tmp_path) -> None:
    st = make_store(tmp_path / "r", row_group_rows=200)
    lsns = build(st, seed=3)
    st.compact("t")  # no views yet: merged, not sorted
    before = rows_at(st, lsns[-1])
    first = the_segment(st)
    assert st.compact("t")["segments_before"] == 1  # nothing to do: left alone
    assert the_segment(st) == first
    st.set_clustering({"t": ["k"]})  # a view now keys on k: the next compaction sorts
    st.compact("t")
    path = the_segment(st)
    assert path != first
    keys = pq.read_table(path, columns=["k"])["k"].to_pylist()
    assert keys == sorted(keys)
    assert rows_at(st, lsns[-1]) == before
    # The order is recorded in the manifest: after a restart with the same clustering,
    # the segment is not rewritten again.
    st.close()
    st = make_store(tmp_path / "r", row_group_rows=200)
    st.set_clustering({"t": ["k"]})
    st.compact("t")
    assert the_segment(st) == path
    assert rows_at(st, lsns[-1]) == before


def test_tiered_compaction_leaves_the_big_sorted_segment_and_keeps_rows(make_store,
                                                                        tmp_path) -> None:
    st = make_store(tmp_path / "t", row_group_rows=200, retention_lsns=20)
    lsns = build(st, seed=11)
    st.set_clustering({"t": ["k"]})
    st.compact("t")  # one big segment, sorted by k
    big = the_segment(st)
    rng = random.Random(3)
    for _ in range(4):  # small flushed segments beside it
        lsns.append(st.write("t", [(rng.randrange(200), "c", 1.0, True)] * 5, []))
        st.flush()
    probe = [lsns[-20], lsns[-6], lsns[-1]]
    before = {lsn: rows_at(st, lsn) for lsn in probe}
    assert st.stats()["segments"]["t"] == 5
    compactions = st.stats()["compactions"]
    st.max_segments = 4  # the background compactor's turn: it compacts tiered
    st.wake_background()
    deadline = time.monotonic() + 60
    while st.stats()["compactions"] == compactions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert st.stats()["segments"]["t"] == 2, st.stats()
    with st.snapshot() as snap:
        paths = snap.table_view("t").paths()
    assert big in paths, "the big sorted segment was rewritten"
    for lsn, rows in before.items():
        assert rows_at(st, lsn) == rows, f"rows changed at LSN {lsn}"
    # A full compaction (what compact() does) still merges everything into one segment.
    assert st.compact("t")["segments_after"] == 1
    for lsn, rows in before.items():
        assert rows_at(st, lsn) == rows, f"rows changed at LSN {lsn}"


def test_tier_inputs_picks_all_unless_the_big_segment_is_sorted_and_the_rest_small() -> None:
    from partialflow.server.storage.catalog import SegmentMeta
    from partialflow.server.storage.maintenance import tier_inputs

    def seg(rows: int, sorted_by: tuple = ("k",)) -> SegmentMeta:
        return SegmentMeta(f"s{rows}-{len(sorted_by)}.parquet", 1, 2, rows, 0, 1, sorted_by)

    big, a, b = seg(1000), seg(30), seg(40)
    assert tier_inputs((big, a, b), ("k",)) == (a, b)
    assert tier_inputs((big, a, b), ("v",)) == (big, a, b)  # clustering changed: re-sort
    assert tier_inputs((big, a, b), ()) == (big, a, b)
    assert tier_inputs((big, a), ("k",)) == (big, a)
    assert tier_inputs((seg(100), a, b), ("k",)) == (seg(100), a, b)  # the rest not small
    unsorted = seg(1000, ())
    assert tier_inputs((unsorted, a, b), ("k",)) == (unsorted, a, b)
