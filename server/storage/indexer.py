"""The row indexer: the row index as writers' checks see it, and the thread that fills it.

It owns the sqlite row index (``rowindex.py``), the overlay of accepted writes the index has
not seen yet (per table id), the queue of durable groups waiting to be applied, and the LSN
the index reflects. Its lock (``_index_lock``) serializes sqlite write transactions and
schema changes; it is taken after the catalog's and the file set's locks and before the
storage lock. Its queue, backlog, overlay and LSN are guarded by the storage lock (shared,
see ``memtable.py``): ``_locked`` methods are called with it held.

The indexer thread applies durable groups to sqlite in batches (<= INDEX_DELAY seconds or
INDEX_BATCH_ROWS rows), then retires them from the overlay in the same step as the index
commit, under the storage lock, so a writer's check never counts a write twice (index and
overlay) or not at all. sqlite's random-key B-tree inserts cost several microseconds per row;
running them here, GIL released inside sqlite, lets them overlap with the writers' Python
work instead of delaying acknowledgements.

A failed index update is fatal (log, then os._exit: checking later writes against an index
missing earlier ones would be worse than a restart, which replays the WAL), except on a full
disk: then the transaction is rolled back and retried with backoff, the overlay still
covering the batch.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from partialflow.server.errors import NotFound
from partialflow.server.storage import admission
from partialflow.server.storage.catalog import TableEntry
from partialflow.server.storage.record import Overlay, Pending, net_keys
from partialflow.server.storage.rowindex import RowIndex
from partialflow.server.storage.space import Backoff, is_space_error
from partialflow.server.storage.wal import META_TABLE

log = logging.getLogger(__name__)

INDEX_DELAY = 0.25  # seconds a durable group may wait before it is applied to the row index
INDEX_BATCH_ROWS = 100_000  # ...unless this many rows are waiting


class RowIndexer:
    def __init__(self, lock: threading.Lock, index: RowIndex, lsn: int, retry: Backoff,
                 is_live: Callable[[int], bool], keyed_ids: Callable[[], set[int]]) -> None:
        self._lock = lock  # the storage lock (shared)
        self._index_lock = threading.Lock()  # sqlite write transactions and schema changes
        self._index = index
        self._retry = retry
        self._is_live = is_live
        self._keyed_ids = keyed_ids
        # The index holds every durable write up to here. Read by anyone (a writer reads
        # it per write: a plain attribute, not a property), set only by this object's
        # thread, under the storage lock.
        self.lsn = lsn
        self._overlays: dict[int, Overlay] = {}  # per table id: accepted, not yet indexed
        self._queue: list[tuple[list[Pending], int, int]] = []  # (group, last LSN, rows)
        self._backlog = 0  # rows durable but not yet in the row index
        self._stop = False
        self._work_cv = threading.Condition(lock)  # the indexer waits for durable groups
        self._room_cv = threading.Condition(lock)  # writers wait for the backlog to shrink

    # ------------------------------------------------------------------ writers' side
    def read(self, part: admission.Part) -> dict[bytes, Any]:
        """Committed index entries a change's checks need (no lock: each thread reads with
        its own connection): row digest -> copies for a bag table, key digest -> row digest
        for a keyed table."""
        entry: TableEntry = part.entry
        try:
            if entry.schema.primary_key:
                return self._index.key_rows(entry.id, list(set(part.del_k).union(part.ins_k)))
            return self._index.counts(entry.id, list(set(part.del_h)))
        except sqlite3.OperationalError:
            if not self._is_live(entry.id):  # dropped while we read
                raise NotFound(f"table '{entry.schema.name}' was dropped") from None
            raise

    def check_locked(self, part: admission.Part, local: admission.Local | None) -> None:
        """Check a change against the committed entries it read and the overlay."""
        admission.check(self._overlays, part, local)

    def accept_locked(self, pendings: Sequence[Pending]) -> None:
        """An admitted write: later writes' checks count it until it is indexed."""
        for p in pendings:
            ov = self._overlays.get(p.table_id)
            if ov is None and p.table_id != META_TABLE:
                ov = self._overlays[p.table_id] = Overlay()
            if ov is not None:
                ov.add(p)

    def refuse_locked(self, table_ids: set[int], first: int) -> None:
        """Writes from LSN ``first`` on were refused: forget them."""
        for tid in table_ids:
            ov = self._overlays.get(tid)
            if ov is not None:
                ov.drop_from(first)
                if not len(ov):
                    del self._overlays[tid]

    def wait_for_room_locked(self, limit: int, is_open: Callable[[], bool]) -> bool:
        """Backpressure: wait while more than ``limit`` durable rows are not yet indexed (the
        overlay's size). Returns whether it waited."""
        waited = False
        while self._backlog > limit and is_open():
            self._room_cv.wait()
            waited = True
        return waited

    def wake_writers_locked(self) -> None:
        """Closing: writers held back by the backlog limit give up."""
        self._room_cv.notify_all()

    # ------------------------------------------------------------------ committer's side
    def enqueue_locked(self, group: list[Pending], last: int, rows: int) -> None:
        # The backlog only grows here: writers waiting for room are woken when it shrinks.
        self._queue.append((group, last, rows))
        self._backlog += rows
        self._work_cv.notify()

    # ------------------------------------------------------------------ schema, files
    def create(self, tid: int, keyed: bool) -> None:
        with self._index_lock:
            self._index.create(tid, keyed)

    def drop(self, tid: int) -> None:
        with self._index_lock:
            self._index.drop(tid)

    def make_durable(self) -> None:
        """Checkpoint and fsync sqlite (before the log files it covers are deleted)."""
        with self._index_lock:
            self._index.make_durable()

    def close(self) -> None:
        with self._index_lock:
            try:
                self._index.close()
            except sqlite3.Error as err:  # e.g. a full disk: the next open catches it up
                log.warning("closing the row index failed (%s)", err)

    def count_rows(self, tid: int, keyed: bool) -> int:
        """Entries in a table's index (committed): distinct rows of a bag table, keys of a
        keyed one. For tests and checks."""
        table = f"{'k' if keyed else 'r'}_{int(tid)}"
        return int(self._index.reader.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    # ------------------------------------------------------------------ the thread
    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._work_cv.notify_all()

    def run(self) -> None:
        index = self._index
        while True:
            with self._lock:
                while not self._queue and not self._stop:
                    self._work_cv.wait()
                if not self._queue:
                    return
                # Batch groups into fewer, larger sqlite transactions: each commit rewrites
                # every page it dirtied, and those writes also slow down the WAL's fdatasync
                # (ext4 ordered mode flushes them together). The overlay covers the delay.
                deadline = time.monotonic() + INDEX_DELAY
                while (
                    self._backlog < INDEX_BATCH_ROWS
                    and not self._stop
                    and (left := deadline - time.monotonic()) > 0
                ):
                    self._work_cv.wait(timeout=left)
                batch, self._queue = self._queue, []
            last = batch[-1][1]
            rows = sum(b[2] for b in batch)
            keyed = self._keyed_ids()
            by_table: dict[int, list[Pending]] = {}
            for group, _, _ in batch:
                for p in group:
                    by_table.setdefault(p.table_id, []).append(p)
            try:
                with self._index_lock:
                    index.begin()
                    for tid, ps in by_table.items():
                        if not self._is_live(tid):
                            continue  # dropped meanwhile; its index tables are gone
                        # (No sorting here: it would hold the GIL for tens of milliseconds
                        # and delay the committer, for little gain in sqlite at large sizes.)
                        if tid in keyed:
                            put, removed = net_keys(ps)
                            index.apply_keys(tid, put, removed)
                        else:
                            index.apply(tid, [h for p in ps for h in p.ins_h],
                                        [h for p in ps for h in p.del_h])
                    with self._lock:
                        # Commit and retire the overlay atomically w.r.t. writers' checks, so
                        # a write is never counted twice (index + overlay) or not at all.
                        index.commit(last)
                        for tid in by_table:
                            ov = self._overlays.get(tid)
                            if ov is not None:
                                ov.retire(last)
                                if not len(ov):
                                    del self._overlays[tid]
                        self.lsn = last
                        self._backlog -= rows
                        self._room_cv.notify_all()  # writers held back by the backlog limit
            except BaseException as err:
                if not is_space_error(err) or not self._rolled_back():
                    log.critical(
                        "row index update failed; exiting (restart replays the WAL)",
                        exc_info=True,
                    )
                    os._exit(71)
                with self._lock:
                    self._queue = batch + self._queue
                    if self._stop:
                        # Closing on a full disk: leave the index behind the log; the next
                        # open re-applies the log records after the index's LSN.
                        log.warning("row index left at LSN %d on a full disk; the next open "
                                    "catches it up from the log", self.lsn)
                        return
                delay = self._retry.failed(err)
                with self._lock:
                    self._work_cv.wait_for(lambda: self._stop, timeout=delay)
                continue
            self._retry.succeeded()

    def _rolled_back(self) -> bool:
        """Roll back the index transaction a full disk interrupted, so the batch can be
        applied again later: writers' checks stay exact meanwhile (the overlay still holds
        it)."""
        try:
            with self._index_lock:
                self._index.rollback()
            return True
        except Exception:
            log.exception("rolling back the row index after a full disk failed")
            return False
