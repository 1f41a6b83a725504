"""Partial state: holes, one key per read, coalesced upqueries, ordering against writes
that arrive while a Spark scan is running, failing scans, and the memory limit."""

from __future__ import annotations

import random
import threading
import time

import pytest
from helpers import InProcessServer
from oracle import assert_matches, check_results

from partialflow.client import Unavailable

COUNT_SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM {t} WHERE k = ? GROUP BY k"


def _table(c, name, n_keys=200, per_key=3, seed=1):
    rng = random.Random(seed)
    c.execute(f"CREATE TABLE {name} (k BIGINT, v BIGINT)")
    rows = [(k, rng.randrange(100)) for k in range(n_keys) for _ in range(per_key)]
    return c.insert(name, rows)


def _jobs(c) -> int:
    return c.stats()["spark_jobs"]


def test_new_view_is_empty_and_one_read_fills_one_key(server, uniq):
    t = f"{uniq}t"
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS " + COUNT_SQL.format(t=t))
        view = f"{uniq}v"
        assert c.stats()["views"][view]["keys_filled"] == 0
        r = c.lookup(view, 7)
        assert_matches(c, COUNT_SQL.format(t=t), (7,), r)
        s = c.stats()["views"][view]
        assert s["keys_filled"] == 1 and s["misses"] == 1 and s["upqueries"] == 1
        c.lookup(view, 7)
        s = c.stats()["views"][view]
        assert s["keys_filled"] == 1 and s["hits"] == 1 and s["upqueries"] == 1


def test_lookup_many_of_100_cold_keys_is_one_spark_job(server, uniq):
    t = f"{uniq}t"
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS " + COUNT_SQL.format(t=t))
        view = f"{uniq}v"
        before = _jobs(c)
        results = c.lookup_many(view, list(range(100)))
        assert _jobs(c) - before == 1
        assert c.stats()["views"][view]["keys_filled"] == 100
        assert not check_results(c, COUNT_SQL.format(t=t), results, sample=12)


def test_concurrent_cold_reads_share_a_few_upqueries(server, uniq):
    """32 readers miss on 32 distinct keys at once: the misses that arrive while the first
    upquery runs gather into a few more, not one Spark job per read (and all are exact)."""
    t = f"{uniq}t"
    sql = COUNT_SQL.format(t=t)
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS {sql}")
        view = f"{uniq}v"
        before = _jobs(c)
        results: dict = {}
        barrier = threading.Barrier(32)

        def read(k: int) -> None:
            barrier.wait()
            results[k] = c.lookup(view, k)

        threads = [threading.Thread(target=read, args=(k,)) for k in range(32)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        jobs = _jobs(c) - before
        assert len(results) == 32 and c.stats()["views"][view]["keys_filled"] == 32
        assert jobs <= 8, f"32 concurrent cold reads ran {jobs} Spark jobs"
        assert not check_results(c, sql, results, sample=8)


def test_writes_during_a_held_scan_are_neither_lost_nor_doubled(server, uniq):
    """Hold the upquery's Spark scan open while writes to the same key arrive; the filled
    key must reflect the snapshot plus exactly the writes after it."""
    t = f"{uniq}t"
    sql = COUNT_SQL.format(t=t)
    faults = server.engine.dataflow.runner.faults
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS {sql}")
        view = f"{uniq}v"
        out: dict = {}
        faults.mode = "slow:2"
        try:
            reader = threading.Thread(target=lambda: out.setdefault("r", c.lookup(view, 5)))
            reader.start()
            time.sleep(0.5)  # the fill is issued at the current LSN and its scan sleeps
            lsns = [c.insert(t, [(5, 1000 + i)]) for i in range(5)]
            lsns.append(c.delete(t, [(5, 1000)]))
            lsns.append(c.update(t, [(5, 1001)], [(5, 2001)]))
            reader.join()
        finally:
            faults.mode = ""
        first = out["r"]
        assert_matches(c, sql, (5,), first)
        latest = c.lookup(view, 5, min_lsn=lsns[-1])
        assert latest.lsn >= lsns[-1]
        assert_matches(c, sql, (5,), latest)
        assert latest.rows[0][1] == 3 + 5 - 1


def test_failed_scan_errors_cleanly_and_next_read_succeeds(server, uniq):
    t = f"{uniq}t"
    faults = server.engine.dataflow.runner.faults
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS " + COUNT_SQL.format(t=t))
        view = f"{uniq}v"
        faults.mode = "fail"
        try:
            with pytest.raises(Unavailable, match="upquery failed"):
                c.lookup(view, 3)
        finally:
            faults.mode = ""
        assert c.stats()["views"][view]["keys_filled"] == 0
        assert_matches(c, COUNT_SQL.format(t=t), (3,), c.lookup(view, 3))


def test_skewed_10k_keys_under_1mb(spark, tmp_path):
    limit = 1024 * 1024
    srv = InProcessServer(tmp_path / "data", spark, memory_limit=limit).start()
    try:
        rng = random.Random(3)
        with srv.client() as c:
            c.execute("CREATE TABLE ev (k BIGINT, v BIGINT, tag TEXT)")
            n_keys = 12_000
            c.insert(
                "ev",
                [
                    (k, rng.randrange(1000), f"tag-{k % 97}")
                    for k in range(n_keys)
                    for _ in range(2)
                ],
            )
            sql = "SELECT k, tag, COUNT(*) AS n, MAX(v) AS hi FROM ev WHERE k = ? GROUP BY k, tag"
            c.execute(f"CREATE VIEW skew AS {sql}")
            mismatches: list[str] = []
            peak = 0
            for round_ in range(24):
                # Zipf-like skew: a few hot keys, a long tail of cold ones.
                keys = sorted(
                    {min(n_keys - 1, int(rng.paretovariate(0.6))) for _ in range(400)}
                    | {rng.randrange(n_keys) for _ in range(300)}
                )
                results = c.lookup_many("skew", keys)
                if round_ % 6 == 0:
                    mismatches += check_results(c, sql, results, sample=12)
                new = [
                    (rng.choice(keys), rng.randrange(1000), f"tag-{rng.randrange(97)}")
                    for _ in range(50)
                ]
                c.insert("ev", new)
                s = c.stats()
                peak = max(peak, s["memory_bytes"])
                assert s["memory_bytes"] <= limit
            s = c.stats()
            assert s["views"]["skew"]["evictions"] > 0
            assert s["views"]["skew"]["hits"] > 0
            assert not mismatches, "\n".join(mismatches[:5])
    finally:
        srv.stop()


def test_view_whose_full_state_cannot_fit_is_refused(spark, tmp_path):
    from partialflow.client import ResourceExhausted

    srv = InProcessServer(tmp_path / "data", spark, memory_limit=8 * 1024).start()
    try:
        with srv.client() as c:
            c.execute("CREATE TABLE a (k BIGINT, s TEXT)")
            c.execute("CREATE TABLE b (k BIGINT, w BIGINT)")
            c.insert("a", [(i, f"name-{i}") for i in range(2000)])
            c.insert("b", [(i % 50, i) for i in range(100)])
            # The key (a.s) is not the join key and b's rows can't compute it, so a's join
            # index must be full: 2000 rows do not fit in 8 KB.
            with pytest.raises(ResourceExhausted, match="full state"):
                c.execute(
                    "CREATE VIEW too_big AS SELECT a.s, b.w FROM a JOIN b ON a.k = b.k WHERE a.s = "
                    "?"
                )
            assert "too_big" not in c.stats()["views"]
            assert c.stats()["full_bytes"] == 0
            # A view that needs no full state is fine under the same limit.
            c.execute("CREATE VIEW fits AS SELECT k, COUNT(*) AS n FROM b WHERE k = ? GROUP BY k")
            assert c.lookup("fits", 3).rows == [(3, 2)]
    finally:
        srv.stop()


JOIN_SQL = (
    "SELECT {v}.product, {v}.user_name, {v}.length, {i}.category FROM {v} "
    "JOIN {i} ON {v}.product = {i}.product WHERE {v}.product = ?"
)


def _join_view(c, uniq):
    v, i = f"{uniq}visit", f"{uniq}info"
    c.execute(f"CREATE TABLE {v} (product TEXT, user_name TEXT, length BIGINT)")
    c.execute(f"CREATE TABLE {i} (product TEXT, category TEXT)")
    c.insert(i, [("p1", "c1"), ("p2", "c2")])
    c.insert(v, [("p1", "u1", 10), ("p1", "u2", 20), ("p2", "u3", 30)])
    sql = JOIN_SQL.format(v=v, i=i)
    c.execute(f"CREATE VIEW {uniq}pv AS {sql}")
    return v, i, sql, f"{uniq}pv"


@pytest.mark.parametrize("how", ["cancelled", "timed_out"])
def test_join_index_stays_exact_when_a_fill_of_the_other_side_is_abandoned(server, uniq, how):
    """A join's own-side index is filled while the other side's key is being filled; a
    write to the own side meets that pending key and is held. If the fill is then given
    up (its key evicted, or its scan timing out), the own side must still get the write —
    found by `partialflow stress`: a deleted visit came back once the key was read again."""
    df = server.engine.dataflow
    ex, faults = df.executor, df.runner.faults
    with server.client() as c:
        visit, info, sql, view = _join_view(c, uniq)
        assert_matches(c, sql, ("p1",), c.lookup(view, "p1"))
        reader = df.reader(view).state
        join = reader.below[0].node
        visit_side, info_side = join.sides[0], join.sides[1]
        assert visit_side.is_filled(("p1",)) and info_side.is_filled(("p1",))
        # Make only the info side (and the reader above it) a hole at p1.
        ex.call(lambda: ex.evictor.evict(info_side, ("p1",))).result()
        assert visit_side.is_filled(("p1",)) and not reader.is_filled(("p1",))
        out: dict = {}
        old_timeout = ex.fills.upquery_timeout
        faults.mode = "hang" if how == "timed_out" else "slow:30"
        if how == "timed_out":
            ex.fills.upquery_timeout = 2.0

        def read() -> None:
            try:
                out["r"] = c.lookup(view, "p1")
            except Exception as e:  # the timed-out variant expects DeadlineExceeded
                out["e"] = e

        try:
            t = threading.Thread(target=read)
            t.start()
            deadline = time.monotonic() + 10
            while not info_side.is_pending(("p1",)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert info_side.is_pending(("p1",))
            # Held by the fill: the visit index is filled, the info index pending.
            lsn = c.delete(visit, [("p1", "u1", 10)])
            ex.wait_for(lsn, time.monotonic() + 10)
            if how == "cancelled":
                ex.call(lambda: ex.evictor.evict(reader, ("p1",))).result()
                faults.mode = ""
            t.join(timeout=30)
            assert not t.is_alive()
        finally:
            faults.mode = ""
            ex.fills.upquery_timeout = old_timeout
        if how == "timed_out":
            assert "e" in out and "exceeded" in str(out["e"])
        else:
            assert_matches(c, sql, ("p1",), out["r"])
        after = c.lookup(view, "p1", min_lsn=lsn)
        assert_matches(c, sql, ("p1",), after)
        assert sorted(r[1] for r in after.rows) == ["u2"]
        # The reader was refilled from Spark, so only a later delta joined against the
        # visit index shows whether that index kept the delete.
        lsn = c.update(info, [("p1", "c1")], [("p1", "c9")])
        after = c.lookup(view, "p1", min_lsn=lsn)
        assert_matches(c, sql, ("p1",), after)
        assert sorted(after.rows) == [("p1", "u2", 20, "c9")]


def test_join_fill_orders_writes_to_both_sides(server, uniq):
    """The visit index of a join is filled, the info index is being filled, and writes land
    on both sides meanwhile: a visit, then a change of its product's category. The filled
    key must hold the visit with the new category (once) — found by `partialflow stress`
    as a retraction of a row the reader did not hold."""
    df = server.engine.dataflow
    ex, faults = df.executor, df.runner.faults
    with server.client() as c:
        visit, info, sql, view = _join_view(c, uniq)
        c.lookup(view, "p1")
        join = df.reader(view).state.below[0].node
        info_side = join.sides[1]
        ex.call(lambda: ex.evictor.evict(info_side, ("p1",))).result()
        out: dict = {}
        faults.mode = "slow:3"
        try:
            t = threading.Thread(target=lambda: out.setdefault("r", c.lookup(view, "p1")))
            t.start()
            deadline = time.monotonic() + 10
            while not info_side.is_pending(("p1",)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert info_side.is_pending(("p1",))
            c.insert(visit, [("p1", "u9", 5)])
            lsn = c.update(info, [("p1", "c1")], [("p1", "c7")])
            t.join(timeout=60)
        finally:
            faults.mode = ""
        assert_matches(c, sql, ("p1",), out["r"])
        after = c.lookup(view, "p1", min_lsn=lsn)
        assert_matches(c, sql, ("p1",), after)
        assert ("p1", "u9", 5, "c7") in after.rows
        anomalies = c.stats()["state_anomalies"]
        lsn = c.delete(visit, [("p1", "u9", 5)])
        after = c.lookup(view, "p1", min_lsn=lsn)
        assert_matches(c, sql, ("p1",), after)
        assert c.stats()["state_anomalies"] == anomalies


def test_lookup_many_mixing_derivable_and_cold_keys_counts_each_write_once(server, uniq):
    """One lookup_many asks for a key whose aggregate is filled (only the reader above it was
    evicted: derivable without Spark) and a cold key (a Spark scan). Writes to the first key
    land while the scan runs; each must count once — found by the stress tests as a wrong
    average and a top-k reader retracting a row it never held."""
    t = f"{uniq}t"
    sql = COUNT_SQL.format(t=t)
    df = server.engine.dataflow
    ex, faults = df.executor, df.runner.faults
    with server.client() as c:
        _table(c, t)
        c.execute(f"CREATE VIEW {uniq}v AS {sql}")
        view = f"{uniq}v"
        c.lookup(view, 1)
        reader = df.reader(view).state
        ex.call(lambda: ex.evictor.evict(reader, (1,))).result()  # the aggregate below stays filled
        assert reader.source[0].is_filled((1,)) and not reader.is_filled((1,))
        out: dict = {}
        faults.mode = "slow:3"
        try:
            th = threading.Thread(target=lambda: out.setdefault("r", c.lookup_many(view, [1, 2])))
            th.start()
            deadline = time.monotonic() + 10
            while not ex.fills.active and time.monotonic() < deadline:
                time.sleep(0.05)
            lsn = c.insert(t, [(1, 500), (1, 501)])
            th.join(timeout=60)
        finally:
            faults.mode = ""
        assert not check_results(c, sql, out["r"])
        after = c.lookup(view, 1, min_lsn=lsn)
        assert_matches(c, sql, (1,), after)
        assert after.rows[0][1] == 3 + 2
