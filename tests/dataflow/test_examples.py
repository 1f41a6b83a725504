"""The docs' running examples (the visits view, Nexmark Q4), end to end through the
client, checked against Spark."""

from __future__ import annotations

import random

from oracle import assert_matches

VISITS_VIEW = (
    "SELECT category, MAX(length) AS max_length FROM {p}info JOIN {p}visit "
    "ON {p}info.product = {p}visit.product WHERE category = ? GROUP BY category"
)


def test_visits_max_after_delete(server, uniq):
    p = uniq
    with server.client() as c:
        c.execute(f"CREATE TABLE {p}info (product TEXT PRIMARY KEY, category TEXT)")
        c.execute(f"CREATE TABLE {p}visit (product TEXT, user TEXT, length BIGINT)")
        c.insert(
            f"{p}info",
            [
                ("Apple", "Fruit"),
                ("Banana", "Fruit"),
                ("Carrot", "Vegetable"),
                ("Potato", "Vegetable"),
            ],
        )
        c.insert(
            f"{p}visit",
            [
                ("Apple", "Alice", 10),
                ("Apple", "Bob", 20),
                ("Carrot", "Bob", 50),
                ("Banana", "Alice", 40),
                ("Potato", "Eve", 60),
            ],
        )
        c.execute(f"CREATE VIEW {p}maxlen AS " + VISITS_VIEW.format(p=p))
        assert c.lookup(f"{p}maxlen", "Fruit").rows == [("Fruit", 40)]
        assert c.lookup(f"{p}maxlen", "Vegetable").rows == [("Vegetable", 60)]
        lsn = c.delete(f"{p}visit", [("Potato", "Eve", 60)])
        r = c.lookup(f"{p}maxlen", "Vegetable", min_lsn=lsn)
        assert r.rows == [("Vegetable", 50)] and r.lsn >= lsn
        # A new product in a filled category, then visits of it: the join keeps up.
        c.insert(f"{p}info", [("Cherry", "Fruit")])
        lsn = c.insert(f"{p}visit", [("Cherry", "Carol", 70)])
        r = c.lookup(f"{p}maxlen", "Fruit", min_lsn=lsn)
        assert r.rows == [("Fruit", 70)]
        assert_matches(c, VISITS_VIEW.format(p=p), ("Fruit",), r)
        assert c.lookup(f"{p}maxlen", "Meat").rows == []


def test_nexmark_q4(server, uniq):
    p = uniq
    rng = random.Random(4)
    with server.client() as c:
        c.execute(
            f"CREATE TABLE {p}auction (id BIGINT PRIMARY KEY, category BIGINT, seller BIGINT, "
            "start_time BIGINT, expires BIGINT)"
        )
        c.execute(
            f"CREATE TABLE {p}bid (bidder BIGINT, auction BIGINT, bid_time BIGINT, price DOUBLE)"
        )
        c.insert(f"{p}auction", [(i, i % 3, 100 + i, i, i + 1000) for i in range(12)])
        bids = [
            (rng.randrange(50), rng.randrange(12), t, float(rng.randrange(1, 500)))
            for t in range(200)
        ]
        c.insert(f"{p}bid", bids)
        winning = (
            f"SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
            f"FROM {p}auction a JOIN {p}bid b ON a.id = b.auction GROUP BY a.id, a.category"
        )
        c.execute(f"CREATE VIEW {p}winning AS {winning}")
        avg_sql = (
            f"SELECT category, AVG(price) AS avg_price FROM {p}winning WHERE category = ? "
            "GROUP BY category"
        )
        c.execute(f"CREATE VIEW {p}avg_winning AS {avg_sql}")
        hot_sql = (
            f"SELECT auction, COUNT(*) AS bids FROM {p}bid GROUP BY auction HAVING COUNT(*) > 10"
        )
        c.execute(f"CREATE VIEW {p}hot AS {hot_sql}")
        # The oracle for a view over a view inlines the inner view as a subquery.
        avg_oracle = avg_sql.replace(f"FROM {p}winning", f"FROM ({winning}) w")
        live = list(bids)
        for step in range(6):
            for cat in range(3):
                assert_matches(c, avg_oracle, (cat,), c.lookup(f"{p}avg_winning", cat))
            assert_matches(c, hot_sql, (), c.lookup(f"{p}hot", ()))
            gone = rng.sample(live, 15)
            for g in gone:
                live.remove(g)
            c.delete(f"{p}bid", gone)
            new = [
                (
                    rng.randrange(50),
                    rng.randrange(12),
                    1000 + step * 100 + i,
                    float(rng.randrange(1, 900)),
                )
                for i in range(20)
            ]
            live += new
            lsn = c.insert(f"{p}bid", new)
            c.lookup(f"{p}hot", (), min_lsn=lsn)
