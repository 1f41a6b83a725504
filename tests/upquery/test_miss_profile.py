"""The upquery profile (server/upquery/profile.py) and what it shows of a miss: phases per
upquery, Spark's own figures, and one compiled stage serving every key."""

from __future__ import annotations


def test_misses_record_their_phases_and_reuse_one_compiled_stage(server, uniq, spark):
    t, view = f"{uniq}t", f"{uniq}v"
    runner = server.engine.dataflow.runner
    with server.client(timeout=300) as c:  # a loaded machine, and Spark jobs with figures
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT, s TEXT)")
        c.insert(t, [(i % 20, i, f"s{i % 3}") for i in range(400)])
        c.execute(f"CREATE VIEW {view} AS SELECT k, s, SUM(v) AS total FROM {t} "
                  "WHERE k = ? AND s = ? GROUP BY k, s")
        c.flush()
        runner.profiler.clear()
        runner.profiler.detail = True
        try:
            got = [(k, c.lookup(view, (k, f"s{k % 3}")).rows) for k in range(6)]
        finally:
            runner.profiler.detail = False
        for k, rows in got:  # the answers themselves, against Spark SQL
            want = c.query(f"SELECT k, s, SUM(v) FROM {t} WHERE k = {k} AND s = 's{k % 3}' "
                           "GROUP BY k, s").rows
            assert sorted(map(tuple, rows)) == sorted(map(tuple, want))
    recs = runner.profiler.records(spark)  # one per miss (a fill may hold several states)
    assert len(recs) >= 6
    for r in recs:
        assert {"queued", "plan", "collect", "convert", "total"} <= set(r.seconds)
        assert r.seconds["total"] >= r.seconds["collect"] > 0
        assert "spark_optimization" in r.seconds and r.tasks >= 1
    assert sum(r.plan_cached for r in recs) >= len(recs) - 1  # built once, then kept
    # Each key is bound as a set the generated code reads, not inlined into it: after the
    # first, a new key compiles no new class (with "=" literals every key compiled again).
    assert min(r.compiles for r in recs[1:]) == 0
    summary = runner.profiler.summary()
    assert summary["upqueries"] >= 6 and summary["collect_p50_ms"] > 0
