"""Kept upquery plans (server/upquery/plan_cache.py): a state's plan built once per base
data, each fill's keys bound as one SQL filter. The rows must be exactly those of the
plan built for the fill alone (``state_frame``), at every snapshot, and the SQL key
literals must compare exactly as ``F.lit`` values do."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from pyspark.sql import types as T

from partialflow.server.upquery.plan_cache import PlanCache, key_filter_sql
from partialflow.server.upquery.state_plans import key_filter, state_frame

STRINGS = ["", "a", "a'b", "'", "back\\slash", "\\'", "\\\\", "new\nline", "tab\t", "Ä",
           "\\u0041", "%_", "😀", "x\\", "it''s", "\\n"]
INTS = [0, -1, 7, 2**31 - 1, 2**31, -(2**31) - 1, -(2**63), 2**63 - 1]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e-300, 1e300, 0.1, float("nan"), float("inf"),
          float("-inf")]
SCHEMA = T.StructType([
    T.StructField("_c0", T.StringType()), T.StructField("_c1", T.LongType()),
    T.StructField("_c2", T.DoubleType()), T.StructField("_c3", T.BooleanType()),
])


def _norm(rows) -> Counter:
    return Counter(tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r)
                   for r in rows)


def test_key_literals_compare_as_lit_values(spark):
    rng = random.Random(5)
    rows = [(rng.choice(STRINGS + [None]), rng.choice(INTS + [None]),
             rng.choice(FLOATS + [None]), rng.choice([True, False, None])) for _ in range(300)]
    df = spark.createDataFrame(rows, SCHEMA)
    cases = [
        ([0], {(s,) for s in STRINGS}), ([0], {("a'b",), ("\\'",)}), ([0], {(None,)}),
        ([1], {(i,) for i in INTS}), ([1], {(7,), (None,)}),
        ([2], {(f,) for f in FLOATS}), ([2], {(float("nan"),)}), ([2], {(-0.0,)}),
        ([3], {(True,)}), ([3], {(False,), (None,)}),
        ([0, 1], {(s, i) for s in STRINGS[:6] for i in INTS[:4]}),
        ([2, 3], {(f, b) for f in FLOATS for b in (True, False)}),
        ([1], {("7",)}), ([0], {(7,)}),  # a key of another type: Spark coerces alike
    ]
    for cols, keys in cases:
        text = key_filter_sql(cols, keys)
        assert text is not None
        want = _norm(df.filter(key_filter(cols, keys)).collect())
        assert _norm(df.filter(text).collect()) == want, (cols, keys, text)


def _rows(df) -> Counter:
    """A frame's rows as a multiset (its MIN/MAX candidate lists made hashable)."""
    def value(v):
        return tuple(value(x) for x in v) if isinstance(v, (list, tuple)) else v
    return Counter(value(r) for r in df.collect())


def _info_visit(server, uniq) -> tuple[str, str, str, str]:
    """Tables info and visit, a MAX over their join and a self-join of visit (flushed)."""
    info, visit = f"{uniq}info", f"{uniq}visit"
    agg, pairs = f"{uniq}agg", f"{uniq}pairs"
    with server.client() as c:
        c.execute(f"CREATE TABLE {info} (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, user TEXT, length BIGINT)")
        c.insert(info, [(f"p{i}", f"c{i % 3}") for i in range(9)])
        c.insert(visit, [(f"p{i % 9}", f"u{i % 4}", i) for i in range(60)])
        c.execute(f"CREATE VIEW {agg} AS SELECT category, MAX(length) AS m, SUM(length) AS s, "
                  f"COUNT(*) AS n FROM {info} JOIN {visit} ON {info}.product = "
                  f"{visit}.product WHERE category = ? GROUP BY category")
        c.execute(f"CREATE VIEW {pairs} AS SELECT a.user AS u, b.product AS p FROM {visit} a "
                  f"JOIN {visit} b ON a.product = b.product WHERE a.user = ?")
        c.flush()
    return info, visit, agg, pairs


def _check_fills(c, cache, snap, lsn, cases, spark) -> int:
    """Each case's keys through ``cache`` at ``snap``: equal to the fill's own plan and
    (a grouped state's groups) to Spark SQL at ``lsn``; returns the fills checked."""
    n = 0
    for st, sql, keys in cases:
        for k in keys:
            got = _rows(cache.frame(st, {(k,)}, snap, spark=spark))
            # A grouped state's rows hold MAX as a candidate list: compared with the
            # fill's own plan, and the group's presence with Spark SQL.
            assert got == _rows(state_frame(st, {(k,)}, snap, {})), (lsn, k)
            if st.kind == "grouped":
                got = Counter((r[0],) for r in got)
            want = c.query(sql.format(k=k), as_of=lsn).rows
            if st.kind == "grouped":
                want = [(r[0],) for r in want]
            assert got == Counter(tuple(r) for r in want), (lsn, k)
            n += 1
    return n


def _grouped_state(server, view):
    return server.engine.dataflow.reader(view).state.below[0]


def test_a_kept_plan_answers_as_the_fills_own_plan_at_each_snapshot(server, uniq):
    info, visit, view = f"{uniq}info", f"{uniq}visit", f"{uniq}m"
    with server.client() as c:
        c.execute(f"CREATE TABLE {info} (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, user TEXT, length BIGINT)")
        c.insert(info, [(f"p{i}", f"c{i % 3}") for i in range(9)] + [("q", "it's")])
        c.execute(
            f"CREATE VIEW {view} AS SELECT category, MAX(length) AS m, COUNT(*) AS n "
            f"FROM {info} JOIN {visit} ON {info}.product = {visit}.product "
            "WHERE category = ? GROUP BY category")
        old = c.insert(visit, [(f"p{i % 9}", "u", i) for i in range(40)] + [("q", "u", 5)])
        c.flush()
        new = c.delete(visit, [("p1", "u", 1)])
        c.insert(visit, [("p2", "u", 99)])
        c.flush()
    st = _grouped_state(server, view)
    storage, cache = server.engine.storage, PlanCache()
    key_sets = [{("c0",)}, {("c1",), ("c2",)}, {("it's",)}, {("nope",)}, {(None,)}]

    def check(lsn: int) -> None:
        with storage.snapshot(lsn) as snap:
            for keys in key_sets:
                want = _rows(state_frame(st, keys, snap, {}))
                got = _rows(cache.frame(st, keys, snap))
                assert got == want, (lsn, keys)
                assert want or keys in ({("nope",)}, {(None,)})

    check(storage.last_lsn)
    assert cache.stats()["plan_cache_misses"] == 1
    assert cache.stats()["plan_cache_hits"] == len(key_sets) - 1
    check(old)  # before the delete: the newer segment's rows are cut at this LSN
    check(new)
    assert cache.stats()["plan_cache_misses"] == 3  # one plan per distinct cut
    with server.client() as c:
        c.insert(visit, [("p0", "u", 1000)])  # unflushed: not kept without the session
    before = cache.stats()
    check(storage.last_lsn)
    assert cache.stats()["plan_cache_misses"] == before["plan_cache_misses"]
    assert cache.stats()["plan_cache_hits"] == before["plan_cache_hits"]

    # A plan belongs to the Spark session it was built on: a new session (a restarted
    # driver, server/spark_supervisor.py) never reuses one, and clear() drops them all.
    with server.client() as c:
        c.flush()
    with storage.snapshot(storage.last_lsn) as snap:
        keys = {("c0",)}
        want = _rows(state_frame(st, keys, snap, {}))
        assert _rows(cache.frame(st, keys, snap, generation=1)) == want
        misses = cache.stats()["plan_cache_misses"]
        assert _rows(cache.frame(st, keys, snap, generation=2)) == want
        assert cache.stats()["plan_cache_misses"] == misses + 1
    cache.clear()
    assert cache.stats()["plans_cached"] == 0


@pytest.mark.parametrize("n", [3, 250])
def test_many_keys_and_multi_column_keys(server, uniq, n):
    t, view = f"{uniq}t", f"{uniq}v"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (a BIGINT, b TEXT, x DOUBLE)")
        c.insert(t, [(i % 300, f"b{i % 7}", i / 4) for i in range(2000)])
        c.execute(f"CREATE VIEW {view} AS SELECT a, b, SUM(x) AS s FROM {t} "
                  "WHERE a = ? AND b = ? GROUP BY a, b")
        c.flush()
    st = _grouped_state(server, view)
    keys = {(i, f"b{i % 7}") for i in range(n)} | {(1, "b2")}
    with server.engine.storage.snapshot(server.engine.storage.last_lsn) as snap:
        want = _rows(state_frame(st, keys, snap, {}))
        got = _rows(PlanCache().frame(st, keys, snap))
    assert got == want and len(want) >= n


def test_kept_plans_with_unflushed_rows_answer_as_spark_sql_at_each_lsn(server, uniq, spark):
    """A plan kept with a stand-in for unflushed rows, reused by fills whose snapshots hold
    different unflushed rows (inserts, deletes, a self-join reaching one table twice), gives
    the rows of the fill's own plan and of Spark SQL over the tables at that LSN."""
    info, visit, agg, pairs = _info_visit(server, uniq)
    # No background flush meanwhile: the rows written now stay unflushed in every snapshot.
    storage = server.engine.storage
    interval, storage.flush_interval = storage.flush_interval, 3600.0
    try:
        _check_unflushed(server, spark, storage, info, visit, agg, pairs)
    finally:
        storage.flush_interval = interval


def _check_unflushed(server, spark, storage, info, visit, agg, pairs) -> None:
    with server.client() as c:
        lsns = [
            c.insert(visit, [("p0", "u9", 500), ("p3", "u1", 7)]),
            c.delete(visit, [("p0", "u0", 0)]),  # deletes a flushed row: consolidated
            c.insert(info, [("p9", "c0")]),
            c.insert(visit, [("p9", "u0", 1000), ("p1", "u9", 3)]),
            c.delete(visit, [("p9", "u0", 1000)]),  # deletes an unflushed row
        ]
    sql_agg = (f"SELECT category, MAX(length), SUM(length), COUNT(*) FROM {info} JOIN {visit} "
               f"ON {info}.product = {visit}.product WHERE category = '{{k}}' GROUP BY category")
    sql_pairs = (f"SELECT a.user, b.product FROM {visit} a JOIN {visit} b "
                 "ON a.product = b.product WHERE a.user = '{k}'")
    cache = PlanCache()
    cases = [(_grouped_state(server, agg), sql_agg, ["c0", "none"]),
             (server.engine.dataflow.reader(pairs).state, sql_pairs, ["u0", "u9"])]
    with server.client() as c:
        for lsn in lsns:
            with storage.snapshot(lsn) as snap:
                assert snap.table_view(visit).mem  # the case under test
                _check_fills(c, cache, snap, lsn, cases, spark)
    stats = cache.stats()
    # One plan per state and kind of unflushed rows (with or without deletes, per table),
    # not one per fill: the rest were kept plans with the fill's rows swapped in.
    assert stats["plan_cache_misses"] <= 5
    assert stats["plan_cache_hits"] >= len(lsns) * 4 - 5


def test_kept_plans_read_the_snapshots_segments_after_flushes_and_a_compaction(
        server, uniq, spark):
    """A plan kept over one set of segment files, reused by fills whose snapshots have
    others (each flush adds one, a compaction merges them and removes the old files), gives
    the rows of the fill's own plan and of Spark SQL at that LSN, for a join with a MAX and
    a self-join (one table scanned twice): the new files are swapped into the kept plan,
    not the plan rebuilt per flush."""
    info, visit, agg, pairs = _info_visit(server, uniq)
    storage = server.engine.storage
    with server.client() as c:
        sql_agg = (f"SELECT category, MAX(length), SUM(length), COUNT(*) FROM {info} JOIN "
                   f"{visit} ON {info}.product = {visit}.product WHERE category = '{{k}}' "
                   "GROUP BY category")
        sql_pairs = (f"SELECT a.user, b.product FROM {visit} a JOIN {visit} b "
                     "ON a.product = b.product WHERE a.user = '{k}'")
        cases = [(_grouped_state(server, agg), sql_agg, ["c0", "c1"]),
                 (server.engine.dataflow.reader(pairs).state, sql_pairs, ["u0", "u9"])]
        cache = PlanCache()
        checks = 0

        def check(lsn: int) -> None:
            nonlocal checks
            with storage.snapshot(lsn) as snap:
                checks += _check_fills(c, cache, snap, lsn, cases, spark)

        check(c.flush())

        def segments() -> int:
            with storage.snapshot(storage.last_lsn) as snap:
                return len(snap.table_view(visit).segments)

        files = {segments()}
        for i in range(4):  # a segment per flush: inserts, then a delete of a flushed row
            c.insert(visit, [(f"p{i}", "u9", 100 + i), (f"p{i + 1}", "u0", 200 + i)])
            c.delete(visit, [(f"p{i % 9}", f"u{i % 4}", i)])
            check(c.flush())
            files.add(segments())
        assert len(files) > 1, "each flush should have added a segment"
        c.compact(visit)  # the files the kept plans were built over are gone
        check(c.flush())
        assert segments() == 1
    stats = cache.stats()
    # One plan per state and shape of segments (deletes or not), not one per flush.
    assert stats["plan_cache_misses"] <= 4, stats
    assert stats["plan_cache_hits"] >= checks - 4, stats
