"""Index fills queued for one join index are answered together (server/upquery/runner.py):
one scan of the base table's stored changes, consolidated per fill at its own snapshot.
Each fill's rows must equal what the fill alone gets from its own snapshot's plan."""

from __future__ import annotations

from collections import Counter

from partialflow.server.dataflow.fill import Fill
from partialflow.server.dataflow.state import State


def _visits_index(server, uniq: str) -> tuple[str, State]:
    """The visits MAX view over fresh tables; returns the visit table's name and the
    view's evict-on-miss join index on it (whose fills are index fills)."""
    info, visit = f"{uniq}info", f"{uniq}visit"
    with server.client() as c:
        c.execute(f"CREATE TABLE {info} (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, user TEXT, length BIGINT)")
        c.insert(info, [(f"p{i}", f"c{i % 3}") for i in range(9)])
        c.execute(
            f"CREATE VIEW {uniq}m AS SELECT category, MAX(length) AS m FROM {info} JOIN {visit} "
            f"ON {info}.product = {visit}.product WHERE category = ? GROUP BY category")
    join = server.engine.dataflow.reader(f"{uniq}m").state.below[0].node.parents[0]  # π, γ
    while not join.sides:
        join = join.parents[0]
    return visit, next(st for st in join.sides.values() if st.mode == "miss")


def _index_fill(index: State, lsn: int, keys: set) -> Fill:
    fill = Fill(requester=index, lsn=lsn, started=0.0, index=True)
    fill.keys[index] = set(keys)
    fill.roots = [index]
    return fill


def test_a_batch_of_index_fills_answers_each_at_its_own_snapshot(server, uniq):
    visit, index = _visits_index(server, uniq)
    with server.client() as c:
        lsns = [c.insert(visit, [(f"p{i % 4}", "u", i)]) for i in range(6)]
        c.flush()  # some changes in segments, some in the memtable
        lsns.append(c.delete(visit, [("p1", "u", 1)]))
        lsns.append(c.insert(visit, [("p1", "u", 1), ("p1", "u", 1), ("p2", "w", 70)]))
        lsns.append(c.update(visit, [("p2", "u", 2)], [("p2", "u", 20)]))
    runner, storage = server.engine.dataflow.runner, server.engine.storage
    fills = [_index_fill(index, lsn, keys) for lsn, keys in [
        (lsns[2], {("p0",), ("p1",)}), (lsns[6], {("p1",), ("p2",)}),
        (lsns[8], {("p1",), ("p2",), ("p3",), ("p9",)})]]
    snaps = [storage.snapshot(f.lsn) for f in fills]
    try:
        together = runner._run_batch(list(zip(fills, snaps, strict=True)))
        for fill, snap in zip(fills, snaps, strict=True):
            alone = runner.run(fill, snap)
            got = Counter(together[fill.fid][index.sid])
            assert got == Counter(alone[index.sid]), f"fill at LSN {fill.lsn}"
        assert Counter(together[fills[2].fid][index.sid])[("p1", "u", 1)] == 2
    finally:
        for snap in snaps:
            snap.close()


def test_one_scan_serves_snapshots_pinned_across_flushes_and_a_compaction(server, uniq):
    """Fills queued at different times see different segment files: flushes and a
    compaction ran between them. The newest snapshot's changes still answer the older
    fills exactly (compaction's horizon stays at or below every pinned snapshot), and the
    batch takes one scan instead of one per set of files."""
    visit, index = _visits_index(server, uniq)
    runner, storage = server.engine.dataflow.runner, server.engine.storage
    keys = {("p1",), ("p2",), ("p5",)}
    fills, snaps = [], []
    with server.client() as c:
        for step in range(3):
            c.insert(visit, [(f"p{i % 6}", "u", 10 * step + i) for i in range(12)])
            lsn = c.delete(visit, [("p1", "u", 10 * step + 1)])
            fills.append(_index_fill(index, lsn, keys))
            snaps.append(storage.snapshot(lsn))  # pinned, as a queued index fill is
            c.flush()
            if step == 1:
                c.compact(visit)  # horizon held at the first pinned snapshot
    try:
        first, last = (s.table_view(visit).segments for s in (snaps[0], snaps[2]))
        assert first != last, "the snapshots should see different segment files"
        scans = runner.scan_stats().get("upqueries", 0)
        together = runner._run_batch(list(zip(fills, snaps, strict=True)))
        assert runner.scan_stats()["upqueries"] == scans + 1  # one scan for all three
        for fill, snap in zip(fills, snaps, strict=True):
            alone = runner.run(fill, snap)
            got = Counter(together[fill.fid][index.sid])
            assert got == Counter(alone[index.sid]), f"fill at LSN {fill.lsn}"
            assert got, "each fill has rows for its keys"
    finally:
        for snap in snaps:
            snap.close()
