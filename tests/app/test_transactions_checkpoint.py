"""Checkpoints taken while transactions over two tables stream in, then a restart that
recovers from the last one and replays the transactions after it from the log: every key
of a view joining and summing both tables is exact against Spark at its LSN, and the money
moved between the tables adds up at every key."""

from __future__ import annotations

import random
import threading

from helpers import InProcessServer
from oracle import check_results

GROUPS, PER_GROUP, START = 4, 5, 100
TOTAL = PER_GROUP * 2 * START
VIEW = ("SELECT a.grp, SUM(a.bal + b.bal) AS total FROM a JOIN b ON a.id = b.id "
        "WHERE a.grp = ? GROUP BY a.grp")


def test_checkpoint_while_transactions_stream_then_restart(tmp_path, spark) -> None:
    srv = InProcessServer(tmp_path / "data", spark, checkpoint_interval=3600).start()
    groups = list(range(GROUPS))
    with srv.client(timeout=120) as c:
        c.execute("CREATE TABLE a (id BIGINT PRIMARY KEY, grp BIGINT, bal BIGINT)")
        c.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, bal BIGINT)")
        ids = range(GROUPS * PER_GROUP)
        c.insert("a", [(i, i % GROUPS, START) for i in ids])
        c.insert("b", [(i, START) for i in ids])
        c.execute(f"CREATE VIEW totals AS {VIEW}")
        assert all(r.rows == [(g, TOTAL)] for g, r in c.lookup_many("totals", groups).items())
        a = dict.fromkeys(ids, START)
        b = dict.fromkeys(ids, START)
        stop = threading.Event()
        lsns: list[int] = []

        def transfers() -> None:
            rng = random.Random(5)
            with srv.client(timeout=120) as w:
                while not stop.is_set() or len(lsns) < 40:
                    x = rng.choice(list(ids))
                    y = rng.choice([i for i in ids if i % GROUPS == x % GROUPS])
                    amount = rng.randint(1, 9)
                    with w.transaction() as tx:
                        tx.update("a", [(x, x % GROUPS, a[x])], [(x, x % GROUPS, a[x] - amount)])
                        tx.update("b", [(y, b[y])], [(y, b[y] + amount)])
                    a[x] -= amount
                    b[y] += amount
                    lsns.append(tx.lsn or 0)

        writer = threading.Thread(target=transfers)
        writer.start()
        taken = []
        try:
            for _ in range(3):  # checkpoints between transactions that keep coming
                taken.append(c.checkpoint())
        finally:
            stop.set()
            writer.join(60)
        assert taken[-1]["lsn"] < max(lsns), "no transaction after the last checkpoint"
    srv.engine.dataflow.executor.checkpointer.enabled = False  # as a crash would leave it
    srv.stop()

    srv = InProcessServer(tmp_path / "data", spark, checkpoint_interval=3600).start()
    try:
        with srv.client(timeout=120) as c:
            info = c.stats()["checkpoint"]
            assert info["recovered_from"] == taken[-1]["seq"]
            assert info["replayed_writes"] == max(lsns) - taken[-1]["lsn"]
            got = c.lookup_many("totals", groups, min_lsn=max(lsns))
            assert {g: r.rows for g, r in got.items()} == {g: [(g, TOTAL)] for g in groups}
            assert check_results(c, VIEW, {(g,): r for g, r in got.items()}) == []
            # The next transaction after recovery goes through the restored state.
            with c.transaction() as tx:
                tx.update("a", [(0, 0, a[0])], [(0, 0, a[0] - 1)])
                tx.update("b", [(GROUPS, b[GROUPS])], [(GROUPS, b[GROUPS] + 1)])
            assert c.lookup("totals", 0, min_lsn=tx.lsn).rows == [(0, TOTAL)]
    finally:
        srv.stop()
