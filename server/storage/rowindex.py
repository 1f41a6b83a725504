"""The row index: per table, how many copies of each row exist, and which primary keys exist.

It lets ``write`` refuse a delete of an absent row or a duplicate key without a Spark job.
One sqlite file holds, per table id, ``r_<id>(h BLOB PRIMARY KEY, n INTEGER)`` (h = 16-byte
blake2b of the row's repr, n = copies) and ``k_<id>(h BLOB PRIMARY KEY)`` for primary keys,
plus ``meta(lsn)``: the LSN the index reflects, committed in the same transaction as the rows.

The index only ever contains *durable* writes: the committer applies a group after its WAL
fsync. Writes accepted but not yet applied live in an in-memory overlay kept by the Storage;
checks add the two. Because the WAL is the source of truth, sqlite runs with synchronous=OFF;
before WAL files are deleted, ``make_durable`` checkpoints and fsyncs the database file.

Two connections: ``reader`` is used by writers (under the storage lock) and sees only
committed data; ``writer`` is used by the committer (under the index lock) for the open
transaction of a group. WAL journal mode lets the reader proceed while the writer applies.
"""

from __future__ import annotations

import os
import sqlite3
from hashlib import blake2b
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

_CHUNK = 500  # bound on bound parameters per IN (...) query


def row_hashes(rows: Iterable[tuple[Any, ...]]) -> list[bytes]:
    """16-byte digest of each typed row; repr is canonical once values are coerced to the
    column types (floats repr round-trip exactly, bool/int/str/None are unambiguous)."""
    return [blake2b(repr(r).encode(), digest_size=16).digest() for r in rows]


def key_hashes(rows: Sequence[tuple[Any, ...]], pk: Sequence[int]) -> list[bytes]:
    """Digest of each row's primary-key tuple."""
    if len(pk) == 1:
        i = pk[0]
        return [blake2b(repr((r[i],)).encode(), digest_size=16).digest() for r in rows]
    return [blake2b(repr(tuple(r[i] for i in pk)).encode(), digest_size=16).digest() for r in rows]


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-65536")  # 64 MB: random 16-byte keys defeat a small cache
    return conn


class RowIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer = _connect(path)
        self.writer.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER)")
        self.writer.execute("INSERT OR IGNORE INTO meta VALUES ('lsn', 0)")
        self.reader = _connect(path)
        self._in_tx = False

    # -- schema -------------------------------------------------------------------------------
    def table_ids(self) -> set[int]:
        rows = self.writer.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'r\\_%' ESCAPE '\\'"
        ).fetchall()
        return {int(name[2:]) for (name,) in rows}

    def create(self, table_id: int, has_pk: bool) -> None:
        tid = int(table_id)
        self.writer.execute(
            f"CREATE TABLE IF NOT EXISTS r_{tid} (h BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID"
        )
        if has_pk:
            self.writer.execute(f"CREATE TABLE IF NOT EXISTS k_{tid} (h BLOB PRIMARY KEY) WITHOUT ROWID")

    def drop(self, table_id: int) -> None:
        tid = int(table_id)
        self.writer.execute(f"DROP TABLE IF EXISTS r_{tid}")
        self.writer.execute(f"DROP TABLE IF EXISTS k_{tid}")

    @property
    def lsn(self) -> int:
        return int(self.writer.execute("SELECT v FROM meta WHERE k='lsn'").fetchone()[0])

    # -- reads (writers, under the storage lock) --------------------------------------------------
    def counts(self, table_id: int, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Committed copy counts of the given rows (absent rows are left out)."""
        out: dict[bytes, int] = {}
        q = f"SELECT h, n FROM r_{int(table_id)} WHERE h IN "
        for i in range(0, len(hashes), _CHUNK):
            chunk = hashes[i : i + _CHUNK]
            out.update(self.reader.execute(q + "(" + ",".join("?" * len(chunk)) + ")", chunk))
        return out

    def keys_present(self, table_id: int, hashes: Sequence[bytes]) -> set[bytes]:
        """Which of the given primary-key digests are committed."""
        out: set[bytes] = set()
        q = f"SELECT h FROM k_{int(table_id)} WHERE h IN "
        for i in range(0, len(hashes), _CHUNK):
            chunk = hashes[i : i + _CHUNK]
            out.update(h for (h,) in self.reader.execute(q + "(" + ",".join("?" * len(chunk)) + ")", chunk))
        return out

    # -- writes (committer, under the index lock) -------------------------------------------------
    def begin(self) -> None:
        if not self._in_tx:
            self.writer.execute("BEGIN")
            self._in_tx = True

    def apply(
        self, table_id: int, row_delta: Mapping[bytes, int], key_delta: Mapping[bytes, int] | None
    ) -> None:
        """Add copy-count deltas (and +1/-1 key deltas) inside the open transaction."""
        tid = int(table_id)
        if row_delta:
            self.writer.executemany(
                f"INSERT INTO r_{tid}(h, n) VALUES (?, ?) "
                "ON CONFLICT(h) DO UPDATE SET n = n + excluded.n",
                row_delta.items(),
            )
            gone = [(h,) for h, k in row_delta.items() if k < 0]
            if gone:
                self.writer.executemany(f"DELETE FROM r_{tid} WHERE h = ? AND n <= 0", gone)
        if key_delta:
            adds = [(h,) for h, k in key_delta.items() if k > 0]
            rems = [(h,) for h, k in key_delta.items() if k < 0]
            if rems:
                self.writer.executemany(f"DELETE FROM k_{tid} WHERE h = ?", rems)
            if adds:
                self.writer.executemany(f"INSERT OR REPLACE INTO k_{tid}(h) VALUES (?)", adds)

    def commit(self, lsn: int) -> None:
        """Record that the index reflects every write up to ``lsn`` and commit atomically."""
        self.begin()
        self.writer.execute("UPDATE meta SET v = ? WHERE k = 'lsn'", (int(lsn),))
        self.writer.execute("COMMIT")
        self._in_tx = False

    def rollback(self) -> None:
        if self._in_tx:
            self.writer.execute("ROLLBACK")
            self._in_tx = False

    def make_durable(self) -> None:
        """Checkpoint sqlite's own WAL into the database file and fsync it, so the index
        survives a power loss even with synchronous=OFF (called before log files are deleted)."""
        self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.rollback()
        try:
            self.make_durable()
        finally:
            self.reader.close()
            self.writer.close()
