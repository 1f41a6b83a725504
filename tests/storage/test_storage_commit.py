"""Group commit, subscriber ordering, query() behaviour and snapshot filters."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from conftest import BAG, KEYED

from partialflow.server.errors import FailedPrecondition, InvalidArgument, NotFound
from partialflow.server.storage import Storage, WriteRecord


def test_group_commit_orders_lsns_and_shares_fsyncs(store: Storage) -> None:
    store.create_table(BAG)
    seen: list[WriteRecord] = []
    store.subscribe(seen.append)
    fsyncs0 = store.stats()["fsyncs"]
    results: dict[int, list[int]] = {}
    delivered_before_ack: list[bool] = []

    def writer(t: int) -> None:
        lsns = []
        for i in range(50):
            lsn = store.write("t", [(t, f"w{t}", float(i), i % 2 == 0)])
            # Acknowledged only after the subscriber saw it.
            delivered_before_ack.append(any(r.lsn == lsn for r in seen[-64:]) or lsn <= len(seen))
            lsns.append(lsn)
        results[t] = lsns

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    all_lsns = sorted(lsn for lsns in results.values() for lsn in lsns)
    assert all_lsns == list(range(1, 401))
    for lsns in results.values():
        assert lsns == sorted(lsns)  # one writer's LSNs increase
    assert [r.lsn for r in seen] == list(range(1, 401))  # subscribers: every write, LSN order
    assert all(delivered_before_ack)
    assert seen[0].table == "t" and seen[0].diffs == (1,)
    fsyncs = store.stats()["fsyncs"] - fsyncs0
    assert fsyncs < 400, f"{fsyncs} fsyncs for 400 concurrent writes: no group commit"
    assert store.last_lsn == 400


def test_write_record_orders_deletes_first(store: Storage) -> None:
    store.create_table(KEYED)
    seen: list[WriteRecord] = []
    store.subscribe(seen.append)
    store.write("u", [(1, "a")])
    lsn = store.write("u", [(1, "b")], deletes=[(1, "a")])
    assert seen[-1] == WriteRecord(lsn, "u", ((1, "a"), (1, "b")), (-1, 1))


def test_query_sql_handling(store: Storage) -> None:
    store.create_table(BAG)
    store.create_table(KEYED)
    store.write("t", [(1, "a", 1.5, True), (1, "a", 1.5, True), (2, None, None, False)])
    store.write("u", [(1, "one"), (2, "two")])
    cols, rows, lsn = store.query(
        "SELECT u.name, count(*) AS n, sum(t.x) AS sx, avg(k) AS a FROM t JOIN u ON t.k = u.id "
        "GROUP BY u.name ORDER BY u.name"
    )
    assert cols == ["name", "n", "sx", "a"]
    assert rows == [("one", 2, 3.0, 1.0), ("two", 1, None, 2.0)]
    assert lsn == 2
    assert store.query("WITH c AS (SELECT k FROM T) SELECT count(*) FROM c")[1] == [(3,)]
    assert store.query("SELECT s FROM t WHERE s IS NULL")[1] == [(None,)]
    assert store.query("SELECT k FROM t UNION SELECT id FROM u ORDER BY 1")[1] == [(1,), (2,)]
    assert store.query("SELECT 1.5 * 2 AS d")[1] == [(3.0,)]  # decimal -> float
    for bad, err, msg in [
        ("DELETE FROM t", InvalidArgument, "only SELECT is allowed"),
        ("INSERT INTO t VALUES (1, 'a', 1.0, true)", InvalidArgument, "only SELECT is allowed"),
        ("DROP TABLE t", InvalidArgument, "only SELECT is allowed"),
        ("SELECT 1; SELECT 2", InvalidArgument, "only SELECT is allowed"),
        ("SELEC k FROM t", InvalidArgument, "only SELECT|malformed"),
        ("SELECT k FROM", InvalidArgument, "malformed SQL"),
        ("SELECT * FROM nope", NotFound, "unknown table 'nope'; tables are: t, u"),
        ("SELECT * FROM parquet.`/etc`", NotFound, "unknown table"),
        ("SELECT * FROM range(3)", InvalidArgument, "only base tables"),
        ("SELECT reflect('java.lang.System', 'exit', 0)", InvalidArgument, "not allowed"),
        ("SELECT nosuchcol FROM t", InvalidArgument, "nosuchcol"),
    ]:
        with pytest.raises(err, match=msg):
            store.query(bad)
    # Nothing leaked: no temp views left, the store still answers.
    assert not [t for t in store.spark.catalog.listTables() if t.name.startswith("pf_q")]
    assert store.query("SELECT count(*) FROM t")[1] == [(3,)]


def test_snapshot_filters_nulls_and_empty_tables(store: Storage) -> None:
    store.create_table(BAG)
    with store.snapshot() as snap:
        empty = snap.table_df("t")
        assert empty.schema == BAG.spark_schema()
        assert empty.count() == 0
    store.write("t", [(1, "a", 1.0, True), (None, "b", 2.0, False), (3, "c", None, None)])
    store.flush()
    store.write("t", [(1, "a", 1.0, True), (None, "z", 0.0, True)], deletes=[(3, "c", None, None)])
    with store.snapshot() as snap:
        df = snap.table_df("T", {"k": [1, None]})
        assert df.columns == ["k", "s", "x", "b"]
        assert Counter(tuple(r) for r in df.collect()) == Counter(
            [
                (1, "a", 1.0, True),
                (1, "a", 1.0, True),
                (None, "b", 2.0, False),
                (None, "z", 0.0, True),
            ]
        )
        assert snap.table_df("t", {"k": []}).count() == 0
        assert snap.table_df("t", {"x": [2]}).count() == 1  # int filter on DOUBLE column
        with pytest.raises(InvalidArgument, match="has no column 'nope'"):
            snap.table_df("t", {"nope": [1]})
        with pytest.raises(InvalidArgument, match="expects BIGINT"):
            snap.table_df("t", {"k": ["x"]})
        with pytest.raises(NotFound, match="unknown table 'zz'"):
            snap.table_df("zz")
    with pytest.raises(FailedPrecondition, match="closed"):
        snap.table_df("t")
    with pytest.raises(InvalidArgument):
        store.snapshot(-1)


def test_concurrent_updates_race_indexer_and_flusher(make_store) -> None:
    """Updates of keyed rows and deletes of bag rows from 8 threads, while the indexer commits,
    the flusher flushes and the WAL rotates: no spurious refusal, final state exact."""
    st = make_store(flush_rows=500, flush_interval=0.05, wal_rotate_bytes=64 << 10)
    st.create_table(KEYED)
    st.create_table(BAG)
    errors: list[BaseException] = []
    final: dict[int, str] = {}

    def worker(t: int) -> None:
        try:
            keys = list(range(t * 10, t * 10 + 10))
            st.write("u", [(k, "v0") for k in keys])
            for i in range(1, 40):
                st.write(
                    "u", [(k, f"v{i}") for k in keys], deletes=[(k, f"v{i - 1}") for k in keys]
                )
                st.write("t", [(t, "x", float(i), True)] * 2)
                st.write("t", deletes=[(t, "x", float(i), True)])
            final.update(dict.fromkeys(keys, "v39"))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert st.stats()["flushes"] > 0
    assert dict(st.query("SELECT id, name FROM u")[1]) == final
    want = Counter((t, "x", float(i), True) for t in range(8) for i in range(1, 40))
    assert Counter(st.query("SELECT * FROM t")[1]) == want


def test_key_filter_applied_to_memtable_before_spark(store: Storage, monkeypatch) -> None:
    store.create_table(BAG)
    store.write("t", [(i % 10, "m", float(i), True) for i in range(100)])  # memtable only
    shipped: list[int] = []
    original = store.spark.createDataFrame

    def spy(data, *args, **kwargs):
        shipped.append(getattr(data, "num_rows", -1))
        return original(data, *args, **kwargs)

    monkeypatch.setattr(store.spark, "createDataFrame", spy)
    with store.snapshot() as snap:
        assert snap.table_df("t", {"k": [3]}).count() == 10
    assert shipped == [10]  # only the matching unflushed rows went to Spark
