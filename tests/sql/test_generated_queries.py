"""Random queries over the grammar, maintained under writes and evictions, checked against
two independent answers.

A seeded generator writes SELECTs over three small tables: filters with AND/OR/NULL tests,
joins of 2 and 3 tables (INNER, LEFT, comma), aggregates with HAVING, DISTINCT, IN, NOT IN,
[NOT] EXISTS and scalar subqueries, set operations, top-k, and a few constructs the server refuses
(each refusal must be InvalidArgument naming it: anything else fails). Every accepted view
is read after every round of random inserts, deletes and evictions, and each key's rows are
compared with Spark SQL over the base tables at the result's LSN (``oracle.check_results``)
and, where the dialects agree, with Python's sqlite3 over a mirror of the tables.

The CI slice is small; a long run is on demand:

    PARTIALFLOW_GENERATED_QUERIES=400 PARTIALFLOW_GENERATED_ROUNDS=5 \\
        scripts/test.sh -q tests/sql/test_generated_queries.py

The counts (generated, accepted, refused, key checks against Spark and sqlite) are printed.
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

import sqlglot
from oracle import check_results, norm
from sqlglot import exp

from partialflow.client import InvalidArgument, NotFound

QUERIES = int(os.environ.get("PARTIALFLOW_GENERATED_QUERIES", "20"))
ROUNDS = int(os.environ.get("PARTIALFLOW_GENERATED_ROUNDS", "3"))
SEED = int(os.environ.get("PARTIALFLOW_GENERATED_SEED", "20261125"))

SCHEMA = {
    "r": [("k", "BIGINT"), ("a", "BIGINT"), ("s", "TEXT")],
    "q": [("k", "BIGINT"), ("b", "BIGINT"), ("u", "TEXT")],
    "w": [("a", "BIGINT"), ("c", "DOUBLE")],
}
KEYS = {"k": list(range(7)), "s": ["x", "y", "z"], "a": list(range(10)), "u": ["p", "q"]}


def _row(table: str, rng: random.Random) -> tuple:
    if table == "r":
        return (rng.randrange(6), rng.choice([*range(10), None]), rng.choice("xyz") if
                rng.random() > 0.15 else None)
    if table == "q":
        return (rng.randrange(7), rng.randrange(8), rng.choice(["p", "q", None]))
    return (rng.randrange(10), rng.choice([0.5, 1.25, 2.0, None]))


@dataclass
class Query:
    sql: str  # with {r}, {q}, {w} for the table names
    key: str | None  # the parameter's column (its values from KEYS), or None: no parameter
    sqlite: bool = True  # the dialects agree on it
    refused: str | None = None  # expected refusal (words of the message)


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pred_r(self, t: str = "{r}") -> str:
        rng = self.rng
        n = rng.randrange(10)
        return rng.choice([
            f"{t}.a > {n}", f"{t}.a <= {n}", f"{t}.s = '{rng.choice('xyz')}'", f"{t}.s IS NULL",
            f"{t}.a IS NOT NULL", f"({t}.a > {n} OR {t}.s = 'y')",
            f"{t}.a BETWEEN {n} AND {n + 3}", f"COALESCE({t}.a, 0) < {n}",
            f"{t}.a + {t}.k > {n}", f"NOT ({t}.s = 'x')", f"{t}.s IN ('x', 'z')",
        ])

    def pred_q(self, t: str = "{q}") -> str:
        rng = self.rng
        n = rng.randrange(8)
        return rng.choice([f"{t}.b > {n}", f"{t}.u = 'p'", f"{t}.u IS NOT NULL",
                           f"({t}.b < {n} OR {t}.u IS NULL)", f"{t}.k <> {n % 7}"])

    def where(self, preds: list[str], key: str | None) -> str:
        parts = list(preds)
        if key is not None:
            parts.append(f"{key} = ?")
        return f" WHERE {' AND '.join(parts)}" if parts else ""

    def maybe(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def query(self) -> Query:
        kind = self.rng.choice([
            "filter", "join", "join3", "comma", "aggregate", "join_aggregate", "distinct",
            "in", "not_in", "exists", "scalar", "setop", "topk", "refused",
        ])
        return getattr(self, f"_{kind}")()

    def _filter(self) -> Query:
        key = "{r}.k" if self.maybe() else None
        preds = [self.pred_r() for _ in range(self.rng.randrange(3))]
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}}{self.where(preds, key)}",
                     "k" if key else None)

    def _join(self) -> Query:
        kind = self.rng.choice(["JOIN", "LEFT JOIN"])
        key = self.rng.choice([None, ("{r}.k", "k"), ("{r}.s", "s")])
        preds = [self.pred_r()] if self.maybe() else []
        sql = (f"SELECT {{r}}.k, {{r}}.s, {{r}}.a, {{q}}.b FROM {{r}} {kind} {{q}} ON "
               f"{{r}}.k = {{q}}.k{self.where(preds, key[0] if key else None)}")
        return Query(sql, key[1] if key else None)

    def _join3(self) -> Query:
        key = self.rng.choice([None, ("{r}.k", "k")])
        preds = [self.pred_q()] if self.maybe() else []
        sql = (f"SELECT {{r}}.k, {{q}}.b, {{w}}.c FROM {{r}} JOIN {{q}} ON {{r}}.k = {{q}}.k "
               f"JOIN {{w}} ON {{r}}.a = {{w}}.a{self.where(preds, key[0] if key else None)}")
        return Query(sql, key[1] if key else None)

    def _comma(self) -> Query:
        key = "{q}.u" if self.maybe() else None
        sql = (f"SELECT {{q}}.u, {{q}}.b, {{w}}.c FROM {{q}}, {{w}} WHERE {{q}}.b = {{w}}.a AND "
               f"{self.pred_q()}" + (f" AND {key} = ?" if key else ""))
        return Query(sql, "u" if key else None)

    def _aggregates(self, x: str) -> str:
        picks = self.rng.sample(
            ["COUNT(*) AS n", f"SUM({x}) AS total", f"MIN({x}) AS lo", f"MAX({x}) AS hi",
             f"AVG({x}) AS mean", f"COUNT({x}) AS cnt"], self.rng.randrange(1, 4))
        return ", ".join(picks)

    def _aggregate(self) -> Query:
        g = self.rng.choice(["k", "s"])
        key = g if self.maybe(0.7) else None
        preds = [self.pred_r()] if self.maybe() else []
        having = f" HAVING COUNT(*) > {self.rng.randrange(3)}" if self.maybe(0.3) else ""
        sql = (f"SELECT {{r}}.{g}, {self._aggregates('{r}.a')} FROM {{r}}"
               f"{self.where(preds, f'{{r}}.{g}' if key else None)} GROUP BY {{r}}.{g}{having}")
        return Query(sql, key)

    def _join_aggregate(self) -> Query:
        key = "k" if self.maybe(0.7) else None
        sql = (f"SELECT {{r}}.k, {self._aggregates('{q}.b')} FROM {{r}} JOIN {{q}} ON "
               f"{{r}}.k = {{q}}.k{self.where([], '{r}.k' if key else None)} GROUP BY {{r}}.k")
        return Query(sql, key)

    def _distinct(self) -> Query:
        key = "s" if self.maybe() else None
        preds = [self.pred_r()] if self.maybe() else []
        return Query(f"SELECT DISTINCT {{r}}.s, {{r}}.a FROM {{r}}"
                     f"{self.where(preds, '{r}.s' if key else None)}", key)

    def _in(self) -> Query:
        key = "k" if self.maybe() else None
        sub = f"SELECT {{q}}.b FROM {{q}} WHERE {self.pred_q()}"
        return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                     f"{self.where([f'{{r}}.a IN ({sub})'], '{r}.k' if key else None)}", key)

    def _not_in(self) -> Query:
        key = "k" if self.maybe() else None
        value = self.rng.choice(["{q}.b", "CASE WHEN {q}.b > 5 THEN NULL ELSE {q}.b END"])
        sub = f"SELECT {value} FROM {{q}} WHERE {self.pred_q()}"
        return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                     f"{self.where([f'{{r}}.a NOT IN ({sub})'], '{r}.k' if key else None)}", key)

    def _scalar(self) -> Query:
        key = "k" if self.maybe() else None
        agg = self.rng.choice(["MAX(z.b)", "AVG(z.b)", "COUNT(*)", "SUM(z.b)", "MIN(z.b)"])
        link = self.rng.choice(["", "z.k = {r}.k AND "])
        sub = f"(SELECT {agg} FROM {{q}} z WHERE {link}{self.pred_q('z')})"
        if self.maybe():
            return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                         f"{self.where([f'{{r}}.a >= {sub}'], '{r}.k' if key else None)}", key)
        return Query(f"SELECT {{r}}.k, {{r}}.s, {sub} AS x FROM {{r}}"
                     f"{self.where([], '{r}.k' if key else None)}", key)

    def _exists(self) -> Query:
        key = "k" if self.maybe() else None
        neg = "NOT " if self.maybe() else ""
        link = self.rng.choice(["z.k = {r}.k", "z.b = {r}.a", "z.k = {r}.k AND z.b = {r}.a"])
        sub = f"SELECT 1 FROM {{q}} z WHERE {link} AND {self.pred_q('z')}"
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}}"
                     f"{self.where([f'{neg}EXISTS ({sub})'], '{r}.k' if key else None)}", key)

    def _setop(self) -> Query:
        op = self.rng.choice(["UNION", "UNION ALL", "EXCEPT", "INTERSECT", "EXCEPT ALL",
                              "INTERSECT ALL"])
        left = f"SELECT {{r}}.k, {{r}}.a FROM {{r}} WHERE {self.pred_r()}"
        right = f"SELECT {{q}}.k, {{q}}.b FROM {{q}} WHERE {self.pred_q()}"
        # sqlite has no EXCEPT ALL / INTERSECT ALL.
        return Query(f"{left} {op} {right}", None, sqlite=not op.endswith(" ALL")
                     or op == "UNION ALL")

    def _topk(self) -> Query:
        n = self.rng.randrange(1, 4)
        # Selected columns are the key and the order columns: ties are identical rows.
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}} WHERE {{r}}.k = ? AND "
                     f"{{r}}.a IS NOT NULL ORDER BY {{r}}.a DESC, {{r}}.s LIMIT {n}", "k")

    def _refused(self) -> Query:
        sql, why = self.rng.choice([
            ("SELECT {r}.k, COUNT(*) AS n FROM {r} GROUP BY {r}.k HAVING COUNT(*) > "
             "(SELECT COUNT(*) FROM {q})", "scalar subquery"),
            ("SELECT {r}.k FROM {r} WHERE {r}.a = 1 OR {r}.a NOT IN (SELECT {q}.b FROM {q})",
             "NOT IN"),
            ("SELECT {r}.k, ROW_NUMBER() OVER (ORDER BY {r}.a) AS n FROM {r}", "window"),
            ("SELECT {r}.k FROM {r} RIGHT JOIN {q} ON {r}.k = {q}.k", "RIGHT JOIN"),
        ])
        return Query(sql, None, refused=why)


def _sqlite_sql(sql: str, key: tuple) -> str:
    values = list(key)

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            return exp.convert(values.pop(0))
        return node

    return sqlglot.parse_one(sql).transform(swap).sql(dialect="sqlite")


def test_generated_queries_match_spark_and_sqlite(server, uniq, capsys):
    rng = random.Random(SEED)
    names = {t: f"{uniq}{t}" for t in SCHEMA}
    live: dict[str, list[tuple]] = {t: [_row(t, rng) for _ in range(n)]
                                    for t, n in (("r", 30), ("q", 20), ("w", 15))}
    gen = Generator(rng)
    counts: Counter = Counter()
    mismatches: list[str] = []
    with server.client() as c:
        for t, cols in SCHEMA.items():
            c.execute(f"CREATE TABLE {names[t]} ({', '.join(f'{n} {ty}' for n, ty in cols)})")
            c.insert(names[t], live[t])
        views: list[tuple[str, str, Query]] = []
        for i in range(QUERIES):
            query = gen.query()
            sql = query.sql.format(**names)
            view = f"{uniq}g{i}"
            counts["generated"] += 1
            try:
                c.execute(f"CREATE VIEW {view} AS {sql}")
            except (InvalidArgument, NotFound) as err:
                counts["refused"] += 1
                assert query.refused is not None, f"refused: {sql}\n{err}"
                assert query.refused.lower() in str(err).lower(), f"{sql}\n{err}"
                continue
            assert query.refused is None, f"accepted, but should be refused: {sql}"
            counts["accepted"] += 1
            views.append((view, sql, query))
        lsn = c.stats()["lsn"]
        for rnd in range(ROUNDS + 1):
            mirror = sqlite3.connect(":memory:")
            for t, cols in SCHEMA.items():
                mirror.execute(f"CREATE TABLE {names[t]} ({', '.join(n for n, _ in cols)})")
                marks = ", ".join("?" * len(cols))
                mirror.executemany(f"INSERT INTO {names[t]} VALUES ({marks})", live[t])
            for view, sql, query in views:
                pool = KEYS[query.key] if query.key else []
                keys = [(k,) for k in rng.sample(pool, min(3, len(pool)))] if pool else [()]
                results = c.lookup_many(view, keys, min_lsn=lsn)
                bad = check_results(c, sql, results)
                mismatches += [f"{sql}: {b}" for b in bad]
                counts["spark_checks"] += len(keys)
                if not query.sqlite:
                    continue
                for key, res in results.items():
                    if res.lsn != lsn:
                        continue  # the mirror is the latest state only
                    want = mirror.execute(_sqlite_sql(sql, key)).fetchall()
                    if norm(res.rows) != norm(want):
                        mismatches.append(f"{sql} key {key!r} at LSN {lsn}: view "
                                          f"{sorted(map(repr, res.rows))} != sqlite "
                                          f"{sorted(map(repr, want))}")
                    counts["sqlite_checks"] += 1
            mirror.close()
            if ROUNDS > 3:  # a long run: show progress (the counts so far) after each round
                with capsys.disabled():
                    print(f"\nround {rnd}: {dict(counts)}, mismatches {len(mismatches)}",
                          flush=True)
            if rnd == ROUNDS:
                break
            lsn = _write_round(c, rng, names, live)
            for view, _, query in rng.sample(views, len(views) // 4):
                c.evict(view, (rng.choice(KEYS[query.key]),) if query.key else ())
    with capsys.disabled():
        print(f"\ngenerated queries (seed {SEED}): {dict(counts)}")
    assert not mismatches, "\n".join(mismatches[:20])
    assert counts["accepted"] >= QUERIES // 2, counts  # the generator is not all refusals


def _write_round(c: Any, rng: random.Random, names: dict[str, str],
                 live: dict[str, list[tuple]]) -> int:
    """Deletes of live rows and inserts on every table; the last write's LSN."""
    lsn = 0
    for t in SCHEMA:
        gone = rng.sample(live[t], min(len(live[t]), rng.randrange(1, 5)))
        for row in gone:
            live[t].remove(row)
        if gone:
            lsn = c.delete(names[t], gone)
        new = [_row(t, rng) for _ in range(rng.randrange(2, 7))]
        live[t] += new
        lsn = c.insert(names[t], new)
    return lsn
