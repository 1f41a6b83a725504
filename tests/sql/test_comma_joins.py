"""Comma joins: WHERE equalities between FROM items become the joins, in whatever order
they link the items, and the view stays exact under writes and evictions (checked against
Spark SQL over the base tables at each result's LSN)."""

from __future__ import annotations

import random

from oracle import check_results


def test_three_way_comma_join_joined_out_of_from_order(server, uniq):
    # FROM a, c, b: c links only to b, so the planner joins a-b first, then c, and puts
    # the columns back in FROM order (SELECT * must mean a, c, b).
    a, b, c_ = f"{uniq}a", f"{uniq}b", f"{uniq}c"
    sql = (
        f"SELECT * FROM {a}, {c_}, {b} WHERE {a}.k = {b}.k AND {b}.w = {c_}.w "
        f"AND {c_}.z <> 'q' AND {a}.k = ?"
    )
    rng = random.Random(14)

    def row_a():
        return (rng.randrange(5), rng.randrange(10))

    def row_b():
        return (rng.randrange(5), rng.randrange(4))

    def row_c():
        return (rng.randrange(4), rng.choice(["p", "q", "r", None]))

    with server.client() as c:
        c.execute(f"CREATE TABLE {a} (k BIGINT, v BIGINT)")
        c.execute(f"CREATE TABLE {b} (k BIGINT, w BIGINT)")
        c.execute(f"CREATE TABLE {c_} (w BIGINT, z TEXT)")
        live = {a: [row_a() for _ in range(15)], b: [row_b() for _ in range(10)],
                c_: [row_c() for _ in range(6)]}
        make = {a: row_a, b: row_b, c_: row_c}
        for t, rows in live.items():
            c.insert(t, rows)
        c.execute(f"CREATE VIEW {uniq}v AS {sql}")
        text, _ = c.explain(f"{uniq}v")
        assert text.count("⋈") == 2, text
        keys = [(k,) for k in range(5)]
        bad = check_results(c, sql, c.lookup_many(f"{uniq}v", keys))
        for step in range(3):
            for t, rows in live.items():
                gone = rng.sample(rows, 2)
                for r in gone:
                    rows.remove(r)
                c.delete(t, gone)
                new = [make[t]() for _ in range(3)]
                rows.extend(new)
                c.insert(t, new)
            if step == 1:
                c.evict(f"{uniq}v", (2,))
            bad += check_results(c, sql, c.lookup_many(f"{uniq}v", keys))
        assert not bad, "\n".join(bad)
        assert c.stats()["state_anomalies"] == 0
