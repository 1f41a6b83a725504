"""A Python model of the base tables: the fake storage of the JVM-free dataflow tests.

The tables are one list of deltas ``(lsn, table, row, +1/-1)``; a table *as of LSN V* is
the bag of rows whose deltas up to V sum to a positive count, exactly storage's
definition. It offers the part of storage's interface the dataflow uses (``last_lsn``,
``subscribe``, ``table``, the persisted views) and hands every write to the subscribers
synchronously, in LSN order, as storage does.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.storage.record import TxRecord

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # BIGINT / DOUBLE / TEXT / BOOLEAN


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class Record:
    """What storage hands its subscribers (storage's WriteRecord)."""

    lsn: int
    table: str
    rows: tuple[Row, ...]
    diffs: tuple[int, ...]


class Model:
    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}
        self.history: list[tuple[int, str, Row, int]] = []
        self.lsn = 0
        self._live: dict[str, Counter] = {}
        self._subscribers: list[Callable[[Record | TxRecord], None]] = []
        self._tx: set[int] = set()  # LSNs of writes over several tables (TxRecords)
        self._views: dict[str, str] = {}
        self._at: dict[tuple[str, int], list[Row]] = {}

    # -- what the dataflow uses of storage ---------------------------------------------
    @property
    def last_lsn(self) -> int:
        return self.lsn

    def subscribe(self, fn: Callable[[Record | TxRecord], None]) -> None:
        self._subscribers.append(fn)

    def table(self, name: str) -> Table:
        try:
            return self.tables[name.lower()]
        except KeyError:
            raise NotFound(f"unknown table {name!r}") from None

    def views(self) -> list[tuple[str, str]]:
        return list(self._views.items())

    def save_view(self, name: str, sql: str) -> None:
        self._views[name] = sql

    def drop_view(self, name: str) -> None:
        self._views.pop(name, None)

    # -- what recovery from a checkpoint uses ----------------------------------------------
    def table_ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.tables, 1)}

    def log_start(self) -> int:
        return 1

    def log_records(self, after: int, upto: int) -> list[Record | TxRecord]:
        """The writes after ``after`` up to ``upto``, as they were delivered."""
        out: list[Record] = []
        for lsn, table, row, d in self.history:
            if after < lsn <= upto:
                if out and out[-1].lsn == lsn and out[-1].table == table:
                    last = out[-1]
                    out[-1] = Record(lsn, table, last.rows + (row,), last.diffs + (d,))
                else:
                    out.append(Record(lsn, table, (row,), (d,)))
        merged: list[Record | TxRecord] = []
        for r in out:
            if r.lsn not in self._tx:
                merged.append(r)
            elif merged and merged[-1].lsn == r.lsn:
                last_tx = merged[-1]
                assert isinstance(last_tx, TxRecord)
                merged[-1] = TxRecord(r.lsn, last_tx.changes + (r,))  # type: ignore[arg-type]
            else:
                merged.append(TxRecord(r.lsn, (r,)))  # type: ignore[arg-type]
        return merged

    # -- writing -----------------------------------------------------------------------
    def create_table(self, name: str, columns: Sequence[tuple[str, str]]) -> None:
        self.tables[name] = Table(name, tuple(Column(n, t) for n, t in columns))
        self._live[name] = Counter()

    def write(self, table: str, inserts: Sequence[Row] = (), deletes: Sequence[Row] = ()) -> int:
        """One atomic write (deletes, then inserts); returns its LSN. Deleting a row that
        is not there is refused and changes nothing, as storage does."""
        live = self._live[table]
        need = Counter(tuple(r) for r in deletes)
        for row, n in need.items():
            if live[row] < n:
                raise NotFound(f"row {row!r} is not in table {table!r}")
        self.lsn += 1
        rows = tuple(tuple(r) for r in deletes) + tuple(tuple(r) for r in inserts)
        diffs = (-1,) * len(deletes) + (1,) * len(inserts)
        for row, d in zip(rows, diffs, strict=True):
            live[row] += d
            if not live[row]:
                del live[row]
            self.history.append((self.lsn, table, row, d))
        rec = Record(self.lsn, table, rows, diffs)
        for fn in self._subscribers:
            fn(rec)
        return self.lsn

    def write_many(self, changes: Sequence[tuple[str, Sequence[Row], Sequence[Row]]]) -> int:
        """One transaction: (table, inserts, deletes) changes applied in order at one LSN,
        each checked against the tables as the earlier ones leave them; refused whole.
        Delivered as storage delivers it: one TxRecord of each table's net change."""
        trial = {t: Counter(c) for t, c in self._live.items()}
        net: dict[str, Counter] = {}
        for table, inserts, deletes in changes:
            live, delta = trial[table], net.setdefault(table, Counter())
            for row, n in Counter(tuple(r) for r in deletes).items():
                if live[row] < n:
                    raise NotFound(f"row {row!r} is not in table {table!r}")
                live[row] -= n
                delta[row] -= n
            for r in inserts:
                live[tuple(r)] += 1
                delta[tuple(r)] += 1
        self.lsn += 1
        self._tx.add(self.lsn)
        parts = []
        for table, delta in net.items():
            rows = [r for r, n in delta.items() if n < 0 for _ in range(-n)]
            ins = [r for r, n in delta.items() if n > 0 for _ in range(n)]
            live = self._live[table]
            diffs = (-1,) * len(rows) + (1,) * len(ins)
            for row, d in zip(rows + ins, diffs, strict=True):
                live[row] += d
                if not live[row]:
                    del live[row]
                self.history.append((self.lsn, table, row, d))
            parts.append(Record(self.lsn, table, tuple(rows + ins), diffs))
        rec = TxRecord(self.lsn, tuple(parts))  # type: ignore[arg-type]
        for fn in self._subscribers:
            fn(rec)
        return self.lsn

    def live(self, table: str) -> list[Row]:
        return list(self._live[table].elements())

    # -- reading -----------------------------------------------------------------------
    def rows_at(self, table: str, lsn: int) -> list[Row]:
        """The table as of ``lsn`` (a bag: duplicates repeated)."""
        if lsn > self.lsn:
            raise InvalidArgument(f"LSN {lsn} is in the future (last: {self.lsn})")
        key = (table, lsn)
        rows = self._at.get(key)
        if rows is None:
            counts: Counter = Counter()
            for at, t, row, d in self.history:
                if at > lsn:
                    break
                if t == table:
                    counts[row] += d
            rows = self._at[key] = list(counts.elements())
        return rows


class SqliteOracle:
    """The independent answer: the view's SQL run by sqlite over the model's tables as of
    an LSN (views over views become sqlite views too)."""

    def __init__(self, model: Model, views: Sequence[tuple[str, str]], cache: int = 8) -> None:
        self.model = model
        self.views = list(views)
        self._dbs: dict[int, sqlite3.Connection] = {}
        self._cache = cache

    def answer(self, sql: str, key: Row, lsn: int) -> list[Row]:
        return self._db(lsn).execute(sql, tuple(key)).fetchall()

    def _db(self, lsn: int) -> sqlite3.Connection:
        db = self._dbs.get(lsn)
        if db is not None:
            return db
        db = sqlite3.connect(":memory:")
        for t in self.model.tables.values():
            cols = ", ".join(f"{c.name} {c.type}" for c in t.columns)
            db.execute(f"CREATE TABLE {t.name} ({cols})")
            marks = ", ".join("?" * len(t.columns))
            db.executemany(
                f"INSERT INTO {t.name} VALUES ({marks})", self.model.rows_at(t.name, lsn)
            )
        for name, sql in self.views:
            if "?" not in sql:  # only views without parameters can be used by others
                db.execute(f"CREATE VIEW {name} AS {sql}")
        if len(self._dbs) >= self._cache:
            old = min(self._dbs)
            self._dbs.pop(old).close()
        self._dbs[lsn] = db
        return db
