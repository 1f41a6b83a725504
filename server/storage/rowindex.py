"""The row index: per table, how many copies of each row exist, and which primary keys exist.

It lets ``write`` refuse a delete of an absent row or a duplicate key without a Spark job.
One sqlite file holds, per table id, either ``r_<id>(h BLOB PRIMARY KEY, n INTEGER)`` for a bag
table (h = 16-byte blake2b of the row's repr, n = copies) or ``k_<id>(h BLOB PRIMARY KEY,
r BLOB)`` for a table with a PRIMARY KEY (h = digest of the key, r = digest of the whole row:
one B-tree answers both "does this key exist" and "is this exact row there"), plus
``meta(lsn)``: the LSN the index reflects, committed in the same transaction as the rows.

The index only ever contains *durable* writes: the committer applies a group after its WAL
fsync. Writes accepted but not yet applied live in an in-memory overlay kept by the Storage;
checks add the two. Because the WAL is the source of truth, sqlite runs with synchronous=OFF;
before WAL files are deleted, ``make_durable`` checkpoints and fsyncs the database file.

Connections: ``writer`` is used by the indexer thread (under the DDL lock) for the open
transaction of a batch of groups; each writer thread has its own ``reader``, which sees only
committed data. WAL journal mode lets readers proceed while the writer applies.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from hashlib import blake2b
from pathlib import Path
from typing import Any

from partialflow.server.storage.schema import TableSchema

# i = 0 .. ?2-1, and the ?2 16-byte digests packed in blob ?1.
_SEQ = (
    "WITH RECURSIVE s(i) AS (SELECT 0 WHERE ?2 > 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?2) "
    "SELECT i FROM s"
)
_SPLIT = f"SELECT substr(?1, i * 16 + 1, 16) FROM ({_SEQ})"


def row_hashes(rows: Iterable[tuple[Any, ...]]) -> list[bytes]:
    """16-byte digest of each typed row; repr is canonical once values are coerced to the
    column types (floats repr round-trip exactly, bool/int/str/None are unambiguous)."""
    return [blake2b(repr(r).encode(), digest_size=16).digest() for r in rows]


def key_hashes(rows: Sequence[tuple[Any, ...]], schema: TableSchema) -> list[bytes]:
    """16-byte digest of each row's primary key (only ever compared within one table).

    A single BIGINT key is encoded as itself (16-byte big-endian, injective, no hashing):
    increasing ids then land next to each other in sqlite's B-tree, so inserting and probing
    them touches the same few pages instead of random ones.
    """
    pk = schema.primary_key
    if len(pk) == 1:
        i = pk[0]
        ctype = schema.columns[i].type
        if ctype == "BIGINT":
            return [r[i].to_bytes(16, "big", signed=True) for r in rows]
        if ctype == "TEXT":
            return [
                blake2b(r[i].encode(), digest_size=16, person=b"pf-text-key").digest() for r in rows
            ]
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
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._in_tx = False

    @property
    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (a connection must not be shared between threads
        that query at the same time, and writers read concurrently, outside the lock)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self.path)
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    # -- schema -------------------------------------------------------------------------------
    def table_ids(self) -> set[int]:
        rows = self.writer.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        return {int(n[2:]) for (n,) in rows if n[:2] in ("r_", "k_") and n[2:].isdigit()}

    def create(self, table_id: int, has_pk: bool) -> None:
        tid = int(table_id)
        if has_pk:
            self.writer.execute(
                f"CREATE TABLE IF NOT EXISTS k_{tid} (h BLOB PRIMARY KEY, r BLOB NOT NULL) WITHOUT "
                "ROWID"
            )
        else:
            self.writer.execute(
                f"CREATE TABLE IF NOT EXISTS r_{tid} (h BLOB PRIMARY KEY, n INTEGER NOT NULL) "
                "WITHOUT ROWID"
            )

    def drop(self, table_id: int) -> None:
        tid = int(table_id)
        self.writer.execute(f"DROP TABLE IF EXISTS r_{tid}")
        self.writer.execute(f"DROP TABLE IF EXISTS k_{tid}")

    @property
    def lsn(self) -> int:
        return int(self.writer.execute("SELECT v FROM meta WHERE k='lsn'").fetchall()[0][0])

    # -- reads (writer threads, each on its own connection) ---------------------------------------
    # Every statement takes all its hashes as ONE blob (16 bytes each) split by a recursive CTE,
    # and returns at most one row: one sqlite3_step per call, during which the GIL is released.
    # executemany or a multi-row result would re-acquire the GIL per row and convoy behind the
    # writer threads.
    def counts(self, table_id: int, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Committed copy counts of the given rows (absent rows are left out)."""
        if not hashes:
            return {}
        blob = b"".join(hashes)
        ((res,),) = self.reader.execute(
            f"SELECT group_concat(hex(h) || n) FROM r_{int(table_id)} WHERE h IN ({_SPLIT})",
            (blob, len(hashes)),
        ).fetchall()  # step to the end: the read transaction must not outlive the call
        if not res:
            return {}
        return {bytes.fromhex(item[:32]): int(item[32:]) for item in res.split(",")}

    def key_rows(self, table_id: int, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """For a PRIMARY KEY table: committed key digest -> row digest, for the given keys."""
        if not keys:
            return {}
        ((res,),) = self.reader.execute(
            f"SELECT group_concat(hex(h) || hex(r)) FROM k_{int(table_id)} WHERE h IN ({_SPLIT})",
            (b"".join(keys), len(keys)),
        ).fetchall()  # step to the end: the read transaction must not outlive the call
        if not res:
            return {}
        return {bytes.fromhex(x[:32]): bytes.fromhex(x[32:]) for x in res.split(",")}

    # -- writes (indexer thread, under the storage's DDL lock) ------------------------------------
    def begin(self) -> None:
        if not self._in_tx:
            self.writer.execute("BEGIN")
            self._in_tx = True

    def apply(self, table_id: int, inserted: Sequence[bytes], deleted: Sequence[bytes]) -> None:
        """Bag table, inside the open transaction: +1 copy per inserted row digest, -1 per
        deleted one (duplicates allowed; counts are additive, so order does not matter)."""
        tid = int(table_id)
        w = self.writer
        upsert = (
            f"INSERT INTO r_{tid}(h, n) SELECT substr(?1, i * 16 + 1, 16), ?3 FROM ({_SEQ}) "
            "WHERE true ON CONFLICT(h) DO UPDATE SET n = n + excluded.n"
        )
        if inserted:
            w.execute(upsert, (b"".join(inserted), len(inserted), 1))
        if deleted:
            blob = b"".join(deleted)
            w.execute(upsert, (blob, len(deleted), -1))
            w.execute(f"DELETE FROM r_{tid} WHERE n <= 0 AND h IN ({_SPLIT})", (blob, len(deleted)))

    def apply_keys(
        self, table_id: int, put: Sequence[tuple[bytes, bytes]], removed: Sequence[bytes]
    ) -> None:
        """PRIMARY KEY table, inside the open transaction: net effect of a run of writes,
        ``put`` = (key digest, row digest) now present, ``removed`` = key digests now absent."""
        tid = int(table_id)
        w = self.writer
        if removed:
            w.execute(
                f"DELETE FROM k_{tid} WHERE h IN ({_SPLIT})", (b"".join(removed), len(removed))
            )
        if put:
            w.execute(
                f"INSERT OR REPLACE INTO k_{tid}(h, r) "
                f"SELECT substr(?1, i * 16 + 1, 16), substr(?3, i * 16 + 1, 16) FROM ({_SEQ})",
                (b"".join(k for k, _ in put), len(put), b"".join(r for _, r in put)),
            )

    def commit(self, lsn: int) -> None:
        """Record that the index reflects every write up to ``lsn`` and commit atomically."""
        self.begin()
        self.writer.execute("UPDATE meta SET v = ? WHERE k = 'lsn'", (int(lsn),))
        self.writer.execute("COMMIT")
        self._in_tx = False

    def rollback(self) -> None:
        # sqlite may have rolled the transaction back by itself (it does on SQLITE_FULL
        # in some statements): ROLLBACK would then fail with "no transaction is active".
        if self._in_tx and self.writer.in_transaction:
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
            with self._readers_lock:
                for conn in self._readers:
                    conn.close()
                self._readers.clear()
            self.writer.close()
