"""Index fills queued for one join index are answered together (server/upquery/runner.py):
one scan of the base table's stored changes, consolidated per fill at its own snapshot.
Each fill's rows must equal what the fill alone gets from its own snapshot's plan."""

from __future__ import annotations

from collections import Counter

from partialflow.server.dataflow.fill import Fill


def test_a_batch_of_index_fills_answers_each_at_its_own_snapshot(server, uniq):
    info, visit = f"{uniq}info", f"{uniq}visit"
    with server.client() as c:
        c.execute(f"CREATE TABLE {info} (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, user TEXT, length BIGINT)")
        c.insert(info, [(f"p{i}", f"c{i % 3}") for i in range(9)])
        c.execute(
            f"CREATE VIEW {uniq}m AS SELECT category, MAX(length) AS m FROM {info} JOIN {visit} "
            f"ON {info}.product = {visit}.product WHERE category = ? GROUP BY category")
        lsns = [c.insert(visit, [(f"p{i % 4}", "u", i)]) for i in range(6)]
        c.flush()  # some changes in segments, some in the memtable
        lsns.append(c.delete(visit, [("p1", "u", 1)]))
        lsns.append(c.insert(visit, [("p1", "u", 1), ("p1", "u", 1), ("p2", "w", 70)]))
        lsns.append(c.update(visit, [("p2", "u", 2)], [("p2", "u", 20)]))
    df = server.engine.dataflow
    join = df._reader(f"{uniq}m").state.below[0].node.parents[0]  # through π, γ
    while not join.sides:
        join = join.parents[0]
    index = next(st for st in join.sides.values() if st.mode == "miss")
    runner, storage = df.runner, server.engine.storage
    fills = []
    for lsn, keys in [(lsns[2], {("p0",), ("p1",)}), (lsns[6], {("p1",), ("p2",)}),
                      (lsns[8], {("p1",), ("p2",), ("p3",), ("p9",)})]:
        fill = Fill(requester=index, lsn=lsn, started=0.0, index=True)
        fill.keys[index] = keys
        fill.roots = [index]
        fills.append(fill)
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
