"""Fills of many keys at once (more than upquery.MANY_KEYS): the keys reach Spark as one
Arrow batch and a semi-join instead of a filter of literals; the answers must not change."""

from __future__ import annotations

import random

from oracle import check_results

from partialflow.server.upquery import MANY_KEYS

N = MANY_KEYS * 2 + 50


def test_many_cold_keys_one_bigint_parameter(server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    sql = f"SELECT k, COUNT(*) AS n, SUM(x) AS s FROM {t} WHERE k = ? GROUP BY k"
    with server.client(timeout=180) as c:  # a loaded machine runs first Spark jobs slowly
        c.execute(f"CREATE TABLE {t} (k BIGINT, x DOUBLE)")
        rng = random.Random(3)
        c.insert(t, [(k, rng.random()) for k in range(N) for _ in range(2)])
        c.execute(f"CREATE VIEW {v} AS {sql}")
        keys = list(range(-20, N + 20))  # some keys have no rows
        results = c.lookup_many(v, keys)
        assert c.stats()["views"][v]["keys_filled"] == len(keys)
        assert all(len(results[k].rows) == (1 if 0 <= k < N else 0) for k in keys)
        assert not check_results(c, sql, results, sample=15)


def test_many_cold_keys_text_parameter_through_a_join(server, uniq):
    info, visit, v = f"{uniq}info", f"{uniq}visit", f"{uniq}v"
    sql = (f"SELECT category, MAX(length) AS m FROM {info} JOIN {visit} "
           f"ON {info}.product = {visit}.product WHERE category = ? GROUP BY category")
    with server.client(timeout=180) as c:  # a loaded machine runs first Spark jobs slowly
        c.execute(f"CREATE TABLE {info} (product TEXT PRIMARY KEY, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, length BIGINT)")
        c.insert(info, [(f"p{i}", f"c'{i % N}\\") for i in range(2 * N)])  # quote, backslash
        rng = random.Random(4)
        c.insert(visit, [(f"p{rng.randrange(2 * N)}", rng.randrange(1000)) for _ in range(4 * N)])
        c.execute(f"CREATE VIEW {v} AS {sql}")
        keys = [f"c'{i}\\" for i in range(N)] + ["nope"]
        results = c.lookup_many(v, keys)
        assert not check_results(c, sql, results, sample=15)


def test_many_cold_keys_two_parameters(server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    sql = f"SELECT a, b, COUNT(*) AS n FROM {t} WHERE a = ? AND b = ? GROUP BY a, b"
    with server.client(timeout=180) as c:  # a loaded machine runs first Spark jobs slowly
        c.execute(f"CREATE TABLE {t} (a BIGINT, b TEXT, x BIGINT)")
        c.insert(t, [(i % 37, f"b{i % 23}", i) for i in range(3 * N)])
        c.execute(f"CREATE VIEW {v} AS {sql}")
        keys = [(a, f"b{b}") for a in range(37) for b in range(23)][: N]
        results = c.lookup_many(v, keys)
        assert len(results) == len(keys)
        assert not check_results(c, sql, results, sample=15)


def test_many_cold_keys_key_not_the_first_column(server, uniq):
    # A join USING the key columns would move them to the front: the columns must keep
    # their order whatever position the key has.
    t, v = f"{uniq}t", f"{uniq}v"
    sql = f"SELECT x, k, COUNT(*) AS n, MAX(y) AS m FROM {t} WHERE k = ? GROUP BY x, k"
    with server.client(timeout=180) as c:  # a loaded machine runs first Spark jobs slowly
        c.execute(f"CREATE TABLE {t} (x BIGINT, y TEXT, k BIGINT)")
        c.insert(t, [(i // N, f"y{i}", 1000 + i % N) for i in range(3 * N)])
        c.execute(f"CREATE VIEW {v} AS {sql}")
        results = c.lookup_many(v, [1000 + i for i in range(N)])
        assert all(len(r.rows) == 3 for r in results.values())
        assert not check_results(c, sql, results, sample=15)
