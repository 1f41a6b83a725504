"""Cross products maintained: a join with no equality is a join on a constant key, exact
under inserts and deletes on both sides (checked against Spark SQL over the base tables at
each result's LSN, and sqlite over the live rows), with full indexes that ``explain`` names
and sizes, refused only when that state would not fit in the memory limit."""

from __future__ import annotations

import random

import pytest
from helpers import InProcessServer

from partialflow.client import PartialflowError

VIEWS = [
    # comma join, no WHERE at all
    ("SELECT {a}.k, {a}.v, {b}.w FROM {a}, {b}", None),
    # CROSS JOIN keyed on one side
    ("SELECT {a}.k, {b}.w, {b}.t FROM {a} CROSS JOIN {b} WHERE {a}.k = ?", "k"),
    # a theta join: the only predicate is a non-equality (cross product + filter)
    ("SELECT {a}.k, {a}.v, {b}.w FROM {a} JOIN {b} ON {a}.v < {b}.w WHERE {a}.k = ?", "k"),
    ("SELECT {a}.k, {b}.t FROM {a}, {b} WHERE {a}.v > {b}.w OR {b}.t IS NULL", None),
    # two tables joined on a key on one side, crossed with a third
    ("SELECT {a}.k, {b}.w, {c}.z FROM {a} JOIN {b} ON {a}.k = {b}.k, {c} "
     "WHERE {c}.z <> 'q' AND {a}.k = ?", "k"),
    # three units, no equality anywhere, grouped on the key
    ("SELECT {b}.t, COUNT(*) AS n, SUM({a}.v) AS s FROM {a}, {b}, {c} "
     "WHERE {a}.v + {c}.x > {b}.w AND {b}.t = ? GROUP BY {b}.t", "t"),
    # a cross product of a table with itself
    ("SELECT x.k, y.k AS k2 FROM {a} x, {a} y WHERE x.v > y.v AND x.k = ?", "k"),
]
KEYS = {"k": [(k,) for k in range(5)], "t": [("p",), ("q",), (None,)]}


def _row(table: str, rng: random.Random) -> tuple:
    if table == "a":
        return (rng.randrange(5), rng.choice([*range(8), None]))
    if table == "b":
        return (rng.randrange(5), rng.randrange(8), rng.choice(["p", "q", None]))
    return (rng.randrange(4), rng.choice(["p", "q", "r"]))


def test_cross_products_stay_exact_under_writes_on_both_sides(maintained):
    m = maintained({"a": "k BIGINT, v BIGINT", "b": "k BIGINT, w BIGINT, t TEXT",
                    "c": "x BIGINT, z TEXT"}, _row,
                   [(sql, KEYS[key] if key else [()]) for sql, key in VIEWS], seed=33)
    for step in range(4):
        # sqlite after every round (the fills included: every view and key at step 0); Spark
        # (a query per view) after the last, when writes on every side, an eviction and its
        # refill and an emptied side are behind every view. Spark after the first round
        # too checked what sqlite already had: every key at the latest LSN, by an engine
        # that agrees on these forms.
        m.check(spark=False, sqlite=True)
        m.write_round()  # deletes and inserts on every side
        if step == 1:
            m.evict(0)
        if step == 2:  # every row of a side gone, then back
            rows = m.empty("c")
            m.check(spark=False, sqlite=True)
            m.refill("c", rows)
    m.check(sqlite=True)
    m.assert_exact()


def test_explain_says_a_cross_product_is_full_and_how_large(server, uniq):
    a, b = f"{uniq}a", f"{uniq}b"
    with server.client(timeout=300) as c:  # full state loads by Spark at CREATE VIEW
        c.execute(f"CREATE TABLE {a} (k BIGINT, v BIGINT)")
        c.execute(f"CREATE TABLE {b} (w BIGINT)")
        c.insert(a, [(1, 2), (2, 3), (3, 4)])
        c.insert(b, [(5,), (6,)])
        sql = f"SELECT {a}.k, {b}.w FROM {a}, {b} WHERE {a}.v < {b}.w AND {a}.k = ?"
        dry = c.execute(f"EXPLAIN CREATE VIEW {uniq}v AS {sql}").rows
        text = "\n".join(str(r[0]) for r in dry)
        assert "cross product" in text and "full" in text, text
        assert "left rows x right rows" in text, text
        c.execute(f"CREATE VIEW {uniq}v AS {sql}")
        live, _ = c.explain(f"{uniq}v")
        assert "left 3 rows" in live and "right 2 rows" in live and "= 6 rows out" in live, live
        assert sorted(c.lookup(f"{uniq}v", 1).rows) == [(1, 5), (1, 6)]


def test_a_cross_product_too_big_for_the_memory_limit_is_refused_naming_sizes(
        spark, tmp_path):
    srv = InProcessServer(tmp_path / "data", spark, memory_limit=64 * 1024).start()
    try:
        with srv.client(timeout=300) as c:
            c.execute("CREATE TABLE a (k BIGINT, s TEXT)")
            c.execute("CREATE TABLE b (w BIGINT)")
            c.insert("a", [(i, "x" * 200) for i in range(400)])
            c.insert("b", [(i,) for i in range(300)])
            with pytest.raises(PartialflowError) as err:
                c.execute("CREATE VIEW v AS SELECT a.k, b.w FROM a, b")
            message = str(err.value)
            assert "memory limit" in message and "cross product" in message, message
            assert "left 400 rows" in message and "right 300 rows" in message, message
            assert "v" not in c.stats()["views"]
            # A small one fits, and is maintained.
            c.execute("CREATE VIEW small AS SELECT a.k, b.w FROM a, b WHERE a.k < 3 AND b.w < 2")
            assert sorted(c.lookup("small", ()).rows) == [(k, w) for k in range(3)
                                                          for w in range(2)]
    finally:
        srv.stop()
