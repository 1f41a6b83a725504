"""The independent answer for view tests: Spark SQL over the base tables at an LSN.

A view's SQL with its `?` parameters replaced by the key's literals is run through
``Client.query(sql, as_of=lsn)`` — a direct Spark query at that snapshot, sharing no code
with the dataflow — and compared with what the view returned at that LSN.

``check_sqlite`` is the cheap second answer: SQLite over a mirror of the live rows, for
results at the latest LSN of SQL both dialects read alike.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp


def bind_params(sql: str, key: Sequence[Any]) -> str:
    """The view's SQL with each `?` replaced by the matching key value, as a literal."""
    values = list(key)
    tree = sqlglot.parse_one(sql)

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            return exp.convert(values.pop(0))
        return node

    bound = tree.transform(swap)
    assert not values, "more key values than parameters"
    return bound.sql(dialect="spark")


def norm_value(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return float(f"{v:.9g}")  # incremental float sums differ from Spark's in the last bits
    return v


def norm(rows: Sequence[Sequence[Any]]) -> Counter:
    return Counter(tuple(norm_value(v) for v in r) for r in rows)


def oracle(client: Any, sql: str, key: Sequence[Any], lsn: int) -> list[tuple]:
    return client.query(bind_params(sql, key), as_of=lsn).rows


def assert_matches(
    client: Any, sql: str, key: Sequence[Any], result: Any, ordered: bool = False
) -> None:
    """The view's result equals Spark over the base tables at the result's LSN."""
    expected = oracle(client, sql, key, result.lsn)
    if ordered:
        got = [tuple(norm_value(v) for v in r) for r in result.rows]
        want = [tuple(norm_value(v) for v in r) for r in expected]
        assert got == want, f"key {key!r} at LSN {result.lsn}: view {got} != Spark {want}"
    else:
        assert norm(result.rows) == norm(expected), (
            f"key {key!r} at LSN {result.lsn}: view {sorted(map(repr, result.rows))} != Spark "
            f"{sorted(map(repr, expected))}"
        )


def oracle_many(
    client: Any, sql: str, keys: Sequence[Sequence[Any]], lsn: int
) -> list[list[tuple]]:
    """One Spark job answering the view's SQL for several keys at one LSN."""
    parts = [
        f"SELECT {i} AS _pf_key, * FROM ({bind_params(sql, k)}) q{i}" for i, k in enumerate(keys)
    ]
    rows = client.query(" UNION ALL ".join(parts), as_of=lsn).rows
    out: list[list[tuple]] = [[] for _ in keys]
    for r in rows:
        out[r[0]].append(tuple(r[1:]))
    return out


def check_results(
    client: Any, sql: str, results: dict[Any, Any], sample: int | None = None
) -> list[str]:
    """Compare {key: Result} with Spark (one job per distinct LSN); returns mismatches.

    ``sample`` checks only that many keys (spread evenly), since each key is a subquery."""
    items = list(results.items())
    if sample is not None and len(items) > sample:
        step = len(items) / sample
        items = [items[int(i * step)] for i in range(sample)]
    by_lsn: dict[int, list[Any]] = {}
    for key, res in items:
        by_lsn.setdefault(res.lsn, []).append(key)
    bad = []
    for lsn, keys in by_lsn.items():
        tuples = [k if isinstance(k, tuple) else (k,) for k in keys]
        for key, want in zip(keys, oracle_many(client, sql, tuples, lsn), strict=True):
            got = results[key].rows
            if norm(got) != norm(want):
                bad.append(
                    f"key {key!r} at LSN {lsn}: view {sorted(map(repr, got))} != Spark "
                    f"{sorted(map(repr, want))}"
                )
    return bad


def sqlite_sql(sql: str, key: Sequence[Any]) -> str:
    """The view's SQL with its `?` parameters bound to ``key``, in SQLite's dialect."""
    values = list(key)

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            return exp.convert(values.pop(0))
        return node

    return sqlglot.parse_one(sql).transform(swap).sql(dialect="sqlite")


def check_sqlite(
    tables: dict[str, tuple[Sequence[str], Sequence[Sequence[Any]]]],
    sql: str,
    results: dict[Any, Any],
    lsn: int,
) -> tuple[list[str], dict[Any, Any]]:
    """Compare the results answered at ``lsn`` with SQLite over ``tables`` ({name: (columns,
    live rows at ``lsn``)}): a second independent engine, in-process and far cheaper than a
    Spark job, for SQL both dialects read alike. Returns the mismatches and the results
    answered at another LSN (which the mirror cannot answer: check those with Spark)."""
    db = sqlite3.connect(":memory:")
    try:
        for name, (cols, rows) in tables.items():
            db.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
            db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
        bad, other = [], {}
        for key, res in results.items():
            if res.lsn != lsn:
                other[key] = res
                continue
            want = db.execute(sqlite_sql(sql, key if isinstance(key, tuple) else (key,)))
            want = want.fetchall()
            if norm(res.rows) != norm(want):
                bad.append(f"key {key!r} at LSN {lsn}: view {sorted(map(repr, res.rows))} != "
                           f"SQLite {sorted(map(repr, want))}")
        return bad, other
    finally:
        db.close()
