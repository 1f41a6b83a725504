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

Checkpoints reuse the tier: a checkpoint records a shelved key as ``("T", fk, ref)`` (its
row in the store), commits the store at the cut and writes the
commit's number into the manifest. Recovery keeps the store if its last commit is the
manifest's, and empties it otherwise (a crash between the commit and the manifest, or a
failed checkpoint): shelved keys then start as holes, which is always safe.

Bringing a key back only reads the store: its row is deleted later, between packets
(``collect``), with every other write to the store. So a packet never writes to the disk
halfway through a write's propagation, and a full disk can only fail a write made between
packets (shelving, collecting, committing). Such a failure breaks the tier for the rest of
the run: SQLite may have rolled back the open transaction, so every shelved key is made a
hole right then (``on_broken``: the evictor does it, a consistent cut) and eviction makes
holes from then on. A failed *read* of the store is a damaged file or an I/O error, and
the key's contents are gone in the middle of a packet: that is fatal (log, then
``os._exit``), as a failed fsync is in storage; a restart recovers from the checkpoint.

Readers read shelved keys themselves (``peek_many``, shelfreads.py), without a trip
through the executor: a row's contents never change after ``put_many`` wrote them (a key
changed after coming back is shelved again under a new, higher row number), so a row
shelved before the LSN a read answers at holds the key's contents at that LSN for as long
as the key stays shelved under it. The executor's thread and readers' share the one
connection (see ``Tier.__init__``).
"""

from __future__ import annotations

import logging
import marshal
import os
import pickle
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from partialflow.operators.values import NAN
from partialflow.server.checkpoint.merge import load_value

if TYPE_CHECKING:
    from partialflow.operators.base import Row
    from partialflow.server.dataflow.state import State

log = logging.getLogger("partialflow.tier")

COMMIT_EVERY = 10.0  # seconds between commits when no checkpoint commits (commit_if_due)


class TierError(Exception):
    """The tier can't store or give back a key (the disk is full, the file is damaged)."""


class Tier:
    """One SQLite file under the data directory, changed on the executor thread only
    (under its lock) and read by readers too (``peek_many``). ``limit``: bytes of pickled
    keys it holds at most.

    A state keeps only each shelved key's row number in memory (``State._shelved``): the
    row holds the state's id, the key, its contents and its item count, and row numbers
    grow as keys are shelved, so the least recently shelved keys are the lowest rows
    (``victims``) and the evictor keeps no order of its own."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread off: readers' threads read it too. One connection, not one per
        # reader: the executor's open transaction (committed only at checkpoint cuts) is
        # invisible to any other connection. Sharing it needs no lock of ours: SQLite is
        # built serialized here (``sqlite3.threadsafety`` 3: it takes the connection's
        # mutex itself, without the GIL), and only the executor's thread writes. (A Python
        # lock around every call made the executor wait 1.4 ms per take behind readers
        # that held it while waiting for the GIL back from 32 others.)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._count = threading.Lock()  # counters["read"], from readers' threads
        # A SQLite built otherwise: readers leave shelved keys to the executor.
        self._shared = sqlite3.threadsafety == 3
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit is not fsynced, but the file stays consistent; a power loss may
        # roll back the last commits, and then the manifest's commit number no longer
        # matches and recovery empties the tier (never a wrong key).
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA cache_size=-8192")  # 8 MiB; more spills to the WAL
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (id INTEGER PRIMARY KEY, sid INTEGER, "
                         "fk BLOB, items INTEGER, v BLOB)")
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
        # Called once when the tier breaks (between packets): every shelved key must
        # become a hole at once (the evictor's).
        self.on_broken: Callable[[], None] = _nothing
        self._garbage: list[tuple[int]] = []  # rows of keys brought back or dropped
        self.counters = {"shelved": 0, "unshelved": 0, "evictions": 0, "commits": 0,
                         "read": 0}
        self._last_commit = float("-inf")  # (commit_if_due: the clock's time)
        self._db.execute("BEGIN")

    # -- keys --------------------------------------------------------------------------
    def put_many(self, keys: list[tuple[int, Row, Any, int]]) -> list[int]:
        """Store (state id, fill key, contents, items) of each key, in one statement;
        returns their rows. TierError if the store refuses (the tier is broken)."""
        first = self._next
        rows = [(first + i, sid, marshal.dumps(fk),  # plain values: marshal is faster
                 items, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
                for i, (sid, fk, value, items) in enumerate(keys)]
        if self.broken:
            raise TierError(f"the disk tier is off: {self.broken}")
        try:
            self._db.executemany("INSERT INTO kv (id, sid, fk, items, v) VALUES "
                                 "(?, ?, ?, ?, ?)", rows)
        except sqlite3.Error as e:
            self._fail(f"{type(e).__name__}: {e}")
        self._next += len(rows)
        self.bytes += sum([len(r[4]) for r in rows])
        self.keys += len(rows)
        self.counters["shelved"] += len(rows)
        return [r[0] for r in rows]

    def take(self, ref: int) -> tuple[Any, int]:
        """A shelved key's contents and item count (``take_many`` of one)."""
        return self.take_many([ref])[ref]

    def take_many(self, refs: list[int]) -> dict[int, tuple[Any, int]]:
        """Shelved keys' contents and item counts, row -> (contents, items), with one
        statement per 500 (the keys are in memory again; their rows go at the next
        ``collect``). Reads only: a failure is fatal (module docstring)."""
        out: dict[int, tuple[Any, int]] = {}
        for i in range(0, len(refs), 500):
            part = refs[i:i + 500]
            try:
                rows = self._db.execute(
                    f"SELECT id, v, items FROM kv WHERE id IN ({','.join('?' * len(part))})",
                    part).fetchall()
                if len(rows) != len(part):
                    raise sqlite3.DatabaseError(f"{len(part) - len(rows)} rows are missing")
            except Exception as e:
                _fatal(self, e)
                raise
            for ref, blob, items in rows:
                self._garbage.append((ref,))
                self.bytes -= len(blob)
                out[ref] = (_load(self, blob), items)
        self.keys -= len(refs)
        self.counters["unshelved"] += len(refs)
        return out

    def peek_many(self, refs: list[int]) -> dict[int, bytes]:
        """Rows' contents as stored, row -> pickled contents, left where they are (any
        thread: a reader reading shelved keys itself, shelfreads.py). Rows deleted
        meanwhile are absent; so is everything when the tier is broken or can't be read
        (the reader then asks the executor, which treats a failed read as fatal)."""
        out: dict[int, bytes] = {}
        if self.broken or not self._shared:
            return out
        try:
            for i in range(0, len(refs), 500):
                part = refs[i:i + 500]
                out.update(self._db.execute(
                    f"SELECT id, v FROM kv WHERE id IN ({','.join('?' * len(part))})",
                    part).fetchall())
        except sqlite3.Error:
            return {}
        with self._count:
            self.counters["read"] += len(out)
        return out

    @property
    def next_ref(self) -> int:
        """The row the next shelved key gets: every row below it exists already."""
        return self._next

    def drop(self, ref: int) -> None:
        """A shelved key became a hole: its contents are not needed any more."""
        self.keys -= 1
        if not self.broken:
            self.bytes -= self._read("SELECT length(v) FROM kv WHERE id = ?", ref)[0]
            self._garbage.append((ref,))

    def victims(self, after: int, n: int) -> list[tuple[int, int, Row]]:
        """(row, state id, fill key) of up to ``n`` rows after row ``after``, the least
        recently shelved first (the disk limit's victims; rows of keys brought back or
        dropped since the last ``collect`` are among them: the caller checks)."""
        try:
            rows = self._db.execute("SELECT id, sid, fk FROM kv WHERE id > ? ORDER BY "
                                    "id LIMIT ?", (after, n)).fetchall()
        except sqlite3.Error as e:
            self._fail(f"{type(e).__name__}: {e}")
        return [(ref, sid, _key(fk)) for ref, sid, fk in rows]

    def collect(self) -> None:
        """Delete the rows of keys brought back or dropped since the last call (between
        packets: the evictor, and every commit)."""
        if self._garbage and not self.broken:
            garbage, self._garbage = self._garbage, []
            try:
                self._db.executemany("DELETE FROM kv WHERE id = ?", garbage)
            except sqlite3.Error as e:
                self._fail(f"{type(e).__name__}: {e}")

    def adopt(self, ref: int) -> None:
        """Recovery: a key the checkpoint names as shelved is shelved again (its bytes are
        counted by ``keep_only``)."""
        self.keys += 1

    # -- commits (checkpoint cuts) -------------------------------------------------------
    def commit(self) -> int:
        """Commit what is stored now (a checkpoint's cut); returns the commit's number,
        for the manifest. TierError if it can't (the tier is broken)."""
        n = self.committed + 1
        self.collect()
        self._run("INSERT OR REPLACE INTO meta (k, v) VALUES ('commit', ?)", (n,))
        self._run("COMMIT")
        self._run("BEGIN")
        self.committed = n
        self.counters["commits"] += 1
        return n

    def commit_if_due(self, now: float) -> None:
        """Without checkpoints, commit every COMMIT_EVERY seconds anyway: SQLite's log only
        shrinks after a commit. (Nothing refers to these commits: a start without a
        checkpoint empties the store.)"""
        if now - self._last_commit >= COMMIT_EVERY and not self.broken:
            self._last_commit = now
            try:
                self.commit()
            except TierError:  # broken: its keys are holes already (on_broken)
                pass

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
        or planned differently since), and count what stays."""
        stored = self._db.execute("SELECT id FROM kv").fetchall()
        gone = [(r,) for (r,) in stored if r not in refs]
        self._garbage += gone
        self.collect()
        self.keys, self.bytes = self.stored()
        log.info("disk tier: %d keys restored (%d bytes), %d dropped", self.keys,
                 self.bytes, len(gone))

    def clear(self) -> None:
        """Empty the store (a cold start: nothing refers to what it holds)."""
        if self.broken:
            return
        self._run("DELETE FROM kv")
        self._garbage.clear()
        self.bytes = self.keys = 0

    def close(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")  # only a checkpoint's commit is kept
            self._db.close()
        except sqlite3.Error:
            pass

    # -- checks --------------------------------------------------------------------------
    def peek(self, ref: int) -> Any:
        """A shelved key's contents, left where they are (for checks); None if absent."""
        row = self._db.execute("SELECT v FROM kv WHERE id = ?", (ref,)).fetchone()
        return None if row is None else load_value(row[0])

    def stored(self) -> tuple[int, int]:
        """(keys, bytes) the store holds for shelved keys now (``keys`` and ``bytes``
        must equal them)."""
        garbage = {r for (r,) in self._garbage}
        stored = self._db.execute("SELECT id, length(v) FROM kv").fetchall()
        rows = [n for ref, n in stored if ref not in garbage]
        return len(rows), sum(rows)

    # -- failures ------------------------------------------------------------------------
    def _read(self, sql: str, ref: int) -> tuple:
        """A row the tier holds; a failure is fatal: the key's contents are gone in the
        middle of a packet (see the module docstring)."""
        try:
            row = self._db.execute(sql, (ref,)).fetchone()
            if row is None:
                raise sqlite3.DatabaseError(f"row {ref} is missing")
            return row
        except Exception as e:
            _fatal(self, e)
            raise

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        if self.broken:
            raise TierError(f"the disk tier is off: {self.broken}")
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as e:
            self._fail(f"{type(e).__name__}: {e}")
            raise AssertionError("unreachable") from e

    def _fail(self, why: str) -> NoReturn:
        self.broken = why
        self._garbage.clear()
        log.error("disk tier failed (%s): its keys become holes; eviction makes holes "
                  "until the server restarts", why)
        self.on_broken()
        raise TierError(why)

    def stats(self) -> dict[str, Any]:
        return {"tier_limit": self.limit, "tier_bytes": self.bytes, "tier_keys": self.keys,
                "tier_broken": self.broken,
                **{f"tier_{k}": v for k, v in self.counters.items()}}


def _key(blob: bytes) -> Row:
    """A fill key as ``put`` stored it, with NaN the one ``NAN`` object (as in rows)."""
    fk = marshal.loads(blob)
    if any(isinstance(v, float) and v != v for v in fk):
        return tuple(NAN if isinstance(v, float) and v != v else v for v in fk)
    return fk


def _load(tier: Tier, blob: bytes) -> Any:
    try:
        return load_value(blob)
    except Exception as e:
        _fatal(tier, e)
        raise


def _fatal(tier: Tier, e: BaseException) -> None:
    log.critical("the disk tier %s can't give back a key it holds (%s): stopping; a restart "
                 "recovers from the last checkpoint", tier.path, e)
    logging.shutdown()
    os._exit(72)


def _nobody(st: State, fk: Row, read: bool) -> None:
    pass


def _nothing() -> None:
    pass
