"""The shared setup of the maintained-SQL tests (cross products, subqueries anywhere): a
few small tables with random rows, views over them, rounds of deletes and inserts on every
table, and each view's keys compared with Spark SQL at the result's LSN and, optionally,
with sqlite over a mirror of the live rows."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from oracle import check_results, norm

Row = tuple
RowMaker = Callable[[str, random.Random], Row]


class Maintained:
    """Tables ``{name: "k BIGINT, v BIGINT"}`` filled by ``make_row``, and views ``[(sql
    with {table} placeholders, keys)]`` over them, on one client."""

    def __init__(self, c: Any, uniq: str, tables: dict[str, str], make_row: RowMaker,
                 views: list[tuple[str, list[tuple]]], seed: int, rows: int) -> None:
        self.c, self.rng, self.make_row = c, random.Random(seed), make_row
        self.names = {t: f"{uniq}{t}" for t in tables}
        self.columns = {t: [d.split()[0] for d in cols.split(",")] for t, cols in tables.items()}
        for t, cols in tables.items():
            c.execute(f"CREATE TABLE {self.names[t]} ({cols})")
        self.live = {t: [make_row(t, self.rng) for _ in range(rows)] for t in tables}
        for t, live in self.live.items():
            c.insert(self.names[t], live)
        self.views: list[tuple[str, str, list[tuple]]] = []
        for i, (sql, keys) in enumerate(views):
            text = sql.format(**self.names)
            c.execute(f"CREATE VIEW {uniq}v{i} AS {text}")
            self.views.append((f"{uniq}v{i}", text, keys))
        self.bad: list[str] = []
        self.checks = 0

    def check(self, spark: bool = True, sqlite: bool = False,
              not_spark: Callable[[str], bool] = lambda _sql: False) -> None:
        """Reads every view's keys at the latest LSN; compares them, if ``spark``, with
        Spark (but views ``not_spark`` picks) and, if ``sqlite``, with sqlite over the live
        rows."""
        lsn = self.c.stats()["lsn"]
        mirror = self._mirror() if sqlite else None
        for view, text, keys in self.views:
            results = self.c.lookup_many(view, keys, min_lsn=lsn)
            if spark and not not_spark(text):
                self.bad += [f"{text}: {b}" for b in check_results(self.c, text, results)]
            for key, res in results.items() if mirror is not None else ():
                if res.lsn == lsn:  # the mirror holds the latest rows only
                    want = mirror.execute(_bound(text, key)).fetchall()
                    if norm(res.rows) != norm(want):
                        self.bad.append(f"{text} {key}: {res.rows} != sqlite {want}")
            self.checks += len(keys)
        if mirror is not None:
            mirror.close()

    def write_round(self, deletes: int = 3, inserts: int = 3) -> None:
        """Deletes some live rows of every table, then inserts new ones."""
        for t, rows in self.live.items():
            gone = self.rng.sample(rows, min(deletes, len(rows)))
            for r in gone:
                rows.remove(r)
            if gone:
                self.c.delete(self.names[t], gone)
            new = [self.make_row(t, self.rng) for _ in range(inserts)]
            rows.extend(new)
            self.c.insert(self.names[t], new)

    def empty(self, table: str) -> list[Row]:
        """Deletes every row of ``table``; returns them."""
        rows, self.live[table] = self.live[table], []
        if rows:
            self.c.delete(self.names[table], rows)
        return rows

    def refill(self, table: str, rows: list[Row]) -> None:
        self.live[table] += rows
        self.c.insert(self.names[table], rows)

    def evict(self, which: int) -> None:
        """Evicts key ``keys[which]`` of every view (its next read refills it by Spark)."""
        for view, _, keys in self.views:
            self.c.evict(view, keys[which])

    def assert_exact(self) -> None:
        assert not self.bad, "\n".join(self.bad[:10])
        assert self.c.stats()["state_anomalies"] == 0

    def _mirror(self) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:")
        for t, rows in self.live.items():
            cols = self.columns[t]
            db.execute(f"CREATE TABLE {self.names[t]} ({', '.join(cols)})")
            db.executemany(f"INSERT INTO {self.names[t]} VALUES ({', '.join('?' * len(cols))})",
                           rows)
        return db


def _bound(sql: str, key: tuple) -> str:
    for v in key:
        sql = sql.replace("?", "NULL" if v is None else repr(v), 1)
    return sql


@pytest.fixture
def maintained(server: Any, uniq: str) -> Iterator[Callable[..., Maintained]]:
    """``maintained(tables, make_row, views, seed=..., rows=...)``: a ``Maintained`` on a
    client of the shared server (a long timeout: full state loads by Spark at CREATE VIEW
    on a busy machine)."""
    with server.client(timeout=300) as c:
        def make(tables: dict[str, str], make_row: RowMaker,
                 views: list[tuple[str, list[tuple]]], seed: int = 33,
                 rows: int = 8) -> Maintained:
            return Maintained(c, uniq, tables, make_row, views, seed, rows)

        yield make
