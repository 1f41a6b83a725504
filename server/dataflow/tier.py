"""The disk tier: keys evicted for memory kept on local disk, exact, instead of holes.

Under a memory limit the evictor *shelves* a cold key (``State.shelve``): its contents
are pickled into this store and the key leaves memory, but it stays *filled*. Any access
to it (a write's delta, a join lookup, a read) brings it back first (``State`` does it on
the executor thread, under its lock), so a shelved key is kept fresh exactly as a key in
memory is: the ordering rules don't change, a shelved key is just a filled key that is
slower to touch. Beyond ``limit`` bytes the least recently shelved keys become holes, as
every evicted key did before the tier.

Why SQLite (the standard library's ``sqlite3``), not RocksDB or LMDB:

* transactions whose boundaries we choose. The store's one write transaction stays open
  between dataflow checkpoints and commits at each checkpoint's cut (``commit``), so what
  is committed on disk is exactly the shelved keys the checkpoint names, with no copy;
  after a crash, SQLite rolls the file back to that commit. (RocksDB would need its
  checkpoint directories of hard links for the same; LMDB's write transaction can't
  leave the thread that began it, and its dirty pages live in process memory.)
* a big uncommitted transaction spills to the write-ahead log on disk, not to memory;
* a full disk is an error (``SQLITE_FULL``), not the SIGBUS an mmap'd store gets;
* it is already here (storage's row index uses it), so no new dependency.

Checkpoints reuse the tier: a checkpoint records a shelved key as ``("T", fk, ref)`` (where
its pickle is, its size and its item count), commits the store at the cut and writes the
commit's number into the manifest. Recovery keeps the store if its last commit is the
manifest's, and empties it otherwise (a crash between the commit and the manifest, or a
failed checkpoint): shelved keys then start as holes, which is always safe.

Any SQLite error (a full disk above all) breaks the tier for the rest of the run: SQLite
may have rolled back the open transaction, so every shelved key is made a hole
(``Evictor``) and eviction makes holes from then on.
"""

from __future__ import annotations

import logging
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partialflow.server.checkpoint.merge import Shelved, load_value

if TYPE_CHECKING:
    from partialflow.operators.base import Row
    from partialflow.server.dataflow.state import State

log = logging.getLogger("partialflow.tier")


class TierError(Exception):
    """The tier can't store or give back a key (the disk is full, the file is damaged)."""


class Tier:
    """One SQLite file under the data directory, used on the executor thread only (under
    its lock). ``limit``: bytes of pickled keys it holds at most."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread off: reads under the executor's lock come from reading threads.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit is not fsynced, but the file stays consistent; a power loss may
        # roll back the last commits, and then the manifest's commit number no longer
        # matches and recovery empties the tier (never a wrong key).
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA cache_size=-8192")  # 8 MiB; more spills to the WAL
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (id INTEGER PRIMARY KEY, v BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER)")
        row = self._db.execute("SELECT v FROM meta WHERE k = 'commit'").fetchone()
        self.committed = row[0] if row else 0  # the number of the last commit
        row = self._db.execute("SELECT max(id) FROM kv").fetchone()
        self._next = (row[0] or 0) + 1
        self.bytes = 0  # pickled bytes of the keys shelved now
        self.keys = 0
        self.broken = ""  # why the tier stopped (a SQLite error), or ""
        # Called (state, fill key, by a read?) when a key comes back into memory: the
        # evictor puts it in its LRU then (a read's at the recent end).
        self.on_unshelve: Callable[[State, Row, bool], None] = _nobody
        self.counters = {"shelved": 0, "unshelved": 0, "tier_evictions": 0, "commits": 0}
        self._db.execute("BEGIN")

    # -- keys --------------------------------------------------------------------------
    def put(self, value: Any, items: int) -> Shelved:
        """Store a key's contents; TierError if the store refuses (the tier is broken)."""
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        ref = self._next
        self._run("INSERT INTO kv (id, v) VALUES (?, ?)", (ref, blob))
        self._next += 1
        self.bytes += len(blob)
        self.keys += 1
        self.counters["shelved"] += 1
        return Shelved(ref, len(blob), items)

    def take(self, where: Shelved) -> Any:
        """A shelved key's contents, removed from the store (the key is in memory again)."""
        row = self._run("SELECT v FROM kv WHERE id = ?", (where.ref,)).fetchone()
        if row is None:
            self._fail(f"key {where.ref} is missing from {self.path}")
        self._run("DELETE FROM kv WHERE id = ?", (where.ref,))
        self.bytes -= where.nbytes
        self.keys -= 1
        self.counters["unshelved"] += 1
        return load_value(row[0])

    def peek(self, where: Shelved) -> Any:
        """A shelved key's contents, left where they are (for checks)."""
        row = self._run("SELECT v FROM kv WHERE id = ?", (where.ref,)).fetchone()
        return None if row is None else load_value(row[0])

    def stored(self) -> int:
        """Keys the store holds now (for checks: ``keys`` must equal it)."""
        return self._run("SELECT count(*) FROM kv").fetchone()[0]

    def drop(self, where: Shelved) -> None:
        """A shelved key became a hole: its contents are not needed any more."""
        self.bytes -= where.nbytes
        self.keys -= 1
        if not self.broken:
            self._run("DELETE FROM kv WHERE id = ?", (where.ref,))

    def adopt(self, where: Shelved) -> None:
        """Recovery: a key the checkpoint names as shelved is shelved again."""
        self.bytes += where.nbytes
        self.keys += 1

    # -- commits (checkpoint cuts) -------------------------------------------------------
    def commit(self) -> int:
        """Commit what is stored now (a checkpoint's cut); returns the commit's number,
        for the manifest. TierError if it can't (the tier is broken)."""
        n = self.committed + 1
        self._run("INSERT OR REPLACE INTO meta (k, v) VALUES ('commit', ?)", (n,))
        self._run("COMMIT")
        self._run("BEGIN")
        self.committed = n
        self.counters["commits"] += 1
        return n

    def usable_from(self, commit: int | None) -> bool:
        """Recovery from a checkpoint whose manifest names ``commit``: whether the store
        holds exactly what that checkpoint's shelved keys refer to. If not, it is emptied
        (its keys start as holes)."""
        if commit is not None and commit == self.committed and not self.broken:
            return True
        self.clear()
        return False

    def keep_only(self, refs: set[int]) -> None:
        """Recovery is over: delete what no restored key refers to (keys of views dropped
        or planned differently since)."""
        gone = [(r,) for (r,) in self._db.execute("SELECT id FROM kv") if r not in refs]
        if gone:
            self._db.executemany("DELETE FROM kv WHERE id = ?", gone)
        log.info("disk tier: %d keys restored (%d bytes), %d dropped", len(refs),
                 self.bytes, len(gone))

    def clear(self) -> None:
        """Empty the store (a cold start: nothing refers to what it holds)."""
        if self.broken:
            return
        self._run("DELETE FROM kv")
        self.bytes = self.keys = 0

    def close(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")  # only a checkpoint's commit is kept
            self._db.close()
        except sqlite3.Error:
            pass

    # -- failures ------------------------------------------------------------------------
    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        if self.broken:
            raise TierError(f"the disk tier is off: {self.broken}")
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as e:
            self._fail(f"{type(e).__name__}: {e}")
            raise AssertionError("unreachable") from e

    def _fail(self, why: str) -> None:
        self.broken = why
        log.error("disk tier failed (%s): its keys become holes; eviction makes holes "
                  "until the server restarts", why)
        raise TierError(why)

    def stats(self) -> dict[str, Any]:
        return {"disk_limit": self.limit, "disk_bytes": self.bytes, "disk_keys": self.keys,
                "disk_commits": self.committed, "disk_broken": self.broken,
                **{f"disk_{k}": v for k, v in self.counters.items()}}


def _nobody(st: State, fk: Row, read: bool) -> None:
    pass
