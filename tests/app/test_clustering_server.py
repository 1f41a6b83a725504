"""Clustering through the server: the live views choose each table's clustering columns,
explain shows them, compaction sorts by them without changing any answer, and stats()
reports each upquery's footer-estimated footprint."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow.parquet as pq


def test_views_choose_clustering_and_explain_shows_it(server, uniq):
    p = uniq
    with server.client() as c:
        c.execute(f"CREATE TABLE {p}info (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {p}visit (product TEXT, usr TEXT, length BIGINT)")
        c.execute(f"CREATE VIEW {p}byuser AS SELECT product, length FROM {p}visit WHERE usr = ?")
        c.execute(
            f"CREATE VIEW {p}v AS SELECT category, MAX(length) AS m FROM {p}info JOIN {p}visit "
            f"ON {p}info.product = {p}visit.product WHERE category = ? GROUP BY category"
        )
        text, _ = c.explain(f"{p}v")
        # The join's evict-on-miss index on visit is keyed by product; the reader's key
        # traces to info.category.
        assert f"table {p}visit" in text and "clustered by (" in text, text
        visit_line = next(line for line in text.splitlines() if f"table {p}visit" in line)
        assert "product" in visit_line and "usr" in visit_line, visit_line
        info_line = next(line for line in text.splitlines() if f"table {p}info" in line)
        assert "clustered by (category" in info_line, info_line
        # The EXPLAIN statement shows the same lines.
        plan = [row[0] for row in c.execute(f"EXPLAIN {p}v").rows]
        assert info_line in plan and visit_line in plan
        clustering = c.stats()["storage"]["clustering"]
        assert clustering[f"{p}info"][0] == "category"
        assert set(clustering[f"{p}visit"]) == {"product", "usr"}
        # A dropped view no longer clusters its table.
        c.execute(f"DROP VIEW {p}byuser")
        assert c.stats()["storage"]["clustering"][f"{p}visit"] == ["product"]
        c.execute(f"DROP VIEW {p}v")
        assert f"{p}visit" not in c.stats()["storage"]["clustering"]


def test_clustered_compaction_keeps_answers_and_reports_footprint(server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    rng = random.Random(3)
    engine = server.engine
    old_rows = engine.storage.row_group_rows
    engine.storage.row_group_rows = 300  # small groups, so a few thousand rows make several
    try:
        with server.client() as c:
            c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
            c.execute(f"CREATE VIEW {v} AS SELECT k, v FROM {t} WHERE k = ?")
            lsns = []
            for _ in range(6):
                rows = [(rng.randrange(300), rng.randrange(1000)) for _ in range(500)]
                lsns.append(c.insert(t, rows))
                c.flush()
            lsns.append(c.delete(t, rows[:50]))
            c.flush()
            before = {lsn: Counter(c.query(f"SELECT * FROM {t}", as_of=lsn).rows)
                      for lsn in lsns[-3:]}
            c.compact(t)
            # Same rows at each LSN still readable (the default retention keeps them all).
            for lsn, rows in before.items():
                assert Counter(c.query(f"SELECT * FROM {t}", as_of=lsn).rows) == rows
            with engine.storage.snapshot() as snap:
                (path,) = snap.table_view(t).paths()
            meta = pq.ParquetFile(path).metadata
            assert meta.num_row_groups >= 5
            ks = pq.read_table(path, columns=["k"])["k"].to_pylist()
            assert ks == sorted(ks)

            got = c.lookup(v, (17,))
            want = sorted(r for r in before[lsns[-1]].elements() if r[0] == 17)
            assert sorted(map(tuple, got.rows)) == want
            scan = c.stats()["upquery_scan"]
            assert scan["upqueries"] >= 1
            last = scan["last"]
            assert last["row_groups_total"] == meta.num_row_groups
            assert 1 <= last["row_groups_scanned"] <= 2
            assert 0 < last["bytes_scanned"] < last["bytes_total"]
    finally:
        engine.storage.row_group_rows = old_rows
