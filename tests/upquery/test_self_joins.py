"""A self-join reads one base table on both sides of a join. A miss pushes the key down to
the base scans as a filter (``state_plans._base_filters``), but the scan is compiled once
for both sides: the key may filter it only if it filters every path to that table.
(Found by tests/sql/test_generated_queries.py: the key's filter on one side dropped the
other side's rows, so a keyed self-join missed rows on its very first read.)"""

from __future__ import annotations

from oracle import check_results


def test_keyed_self_join_fills_the_other_side_unfiltered(server, uniq):
    p = f"{uniq}p"
    rows_sql = (f"SELECT {p}.b, {p}.t AS lt, p2.t AS rt FROM {p} JOIN {p} p2 "
                f"ON {p}.b = p2.b WHERE p2.t = ?")
    agg_sql = (f"SELECT p2.t, COUNT(*) AS n FROM {p} JOIN {p} AS p2 ON {p}.b = p2.b "
               f"WHERE p2.t = ? GROUP BY p2.t")
    with server.client() as c:
        c.execute(f"CREATE TABLE {p} (b BIGINT, t TEXT)")
        c.insert(p, [(2, "m"), (2, None), (2, "n"), (5, "n")])
        c.execute(f"CREATE VIEW {uniq}rows AS {rows_sql}")
        c.execute(f"CREATE VIEW {uniq}agg AS {agg_sql}")
        assert sorted(c.lookup(f"{uniq}rows", "m").rows, key=repr) == sorted(
            [(2, "m", "m"), (2, None, "m"), (2, "n", "m")], key=repr)
        assert c.lookup(f"{uniq}agg", "n").rows == [("n", 4)]  # (2: 3 rows) + (5: 1 row)
        keys = [("m",), ("n",), ("x",)]
        bad = []
        for step in range(3):
            lsn = c.insert(p, [(2, "x"), (5, None)])
            if step == 1:
                lsn = c.delete(p, [(2, "m")])
                c.evict(f"{uniq}rows", ("n",))
                c.evict(f"{uniq}agg", ("m",))
            for sql, view in ((rows_sql, "rows"), (agg_sql, "agg")):
                bad += check_results(c, sql, c.lookup_many(f"{uniq}{view}", keys, min_lsn=lsn))
        assert not bad, "\n".join(bad)
