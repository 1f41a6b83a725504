"""The committer: group commit of admitted writes, then delivery.

Its thread takes everything admission queued, appends it to the log with one write() and
one fdatasync(), appends it to the memtable, calls the subscribers (LSN order), wakes the
writers and hands the group to the row indexer. It owns the acknowledged LSN, the largest
committed upstream LSN and the subscriber list; they are guarded by the storage lock
(shared, see ``memtable.py``).

A failed fsync is fatal (log, then os._exit): acknowledging a write that may not be durable
would be worse than a restart, which replays the log. A write() that hits ENOSPC is undone
by the log and its group, with every write queued after it, refused (``Admission.
refuse_locked``): nothing refused was acknowledged or delivered.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from partialflow.server.storage.admitter import Admission
from partialflow.server.storage.ddl import TableCatalog
from partialflow.server.storage.indexer import RowIndexer
from partialflow.server.storage.memtable import Memtable
from partialflow.server.storage.record import Pending, TxRecord, WriteRecord
from partialflow.server.storage.wal import Wal, WalFull, encode_frame

log = logging.getLogger(__name__)

Subscriber = Callable[[WriteRecord | TxRecord], None]


class Committer:
    def __init__(self, lock: threading.Lock, wal: Wal, *, admission: Admission,
                 memtable: Memtable, indexer: RowIndexer, catalog: TableCatalog,
                 upstream_lsn: int | None, subscribers: list[Subscriber],
                 on_grown: Callable[[], None]) -> None:
        self._lock = lock  # the storage lock (shared)
        self._wal = wal
        self._admission = admission
        self._memtable = memtable
        self._indexer = indexer
        self._catalog = catalog
        self._on_grown = on_grown  # the memtable grew (called under the lock)
        self._subscribers = list(subscribers)
        self._upstream_lsn = upstream_lsn
        self._acked_lsn = memtable.lsn  # writers up to here have been woken
        self._ack_cv = threading.Condition(lock)  # writers wait for their LSN to commit

    @property
    def upstream_lsn(self) -> int | None:
        return self._upstream_lsn

    def subscribe(self, fn: Subscriber) -> None:
        with self._lock:
            self._subscribers = self._subscribers + [fn]

    def wait(self, lsn: int, last: Pending) -> int:
        """Wait until the write at ``lsn`` (``last``: its last queue entry) is acknowledged;
        raise the error that refused it."""
        with self._lock:
            while self._acked_lsn < lsn and last.error is None:
                self._ack_cv.wait()
            if last.error is not None:
                raise last.error
        return lsn

    def run(self) -> None:
        admission, memtable = self._admission, self._memtable
        while True:
            group = admission.take()
            if group is None:
                return
            subscribers = self._subscribers
            parts: list[Any] = []
            for p in group:
                parts.extend(encode_frame(p.lsn, p.table_id, p.ndel, p.body, p.more))
            last = group[-1].lsn
            try:
                self._wal.append(b"".join(parts), last + 1)
            except WalFull as err:  # undone: the log ends where it did, refuse the writes
                with self._lock:
                    admission.refuse_locked(group, err)
                    self._ack_cv.notify_all()
                continue
            except BaseException:  # never acknowledge a write that may not be durable
                log.critical("WAL append/fsync failed; exiting so no lost write is acknowledged",
                             exc_info=True)
                os._exit(70)
            with self._lock:
                rows = memtable.append(group, self._catalog.live_locked(), last)
                admission.appended_locked(group)
                for p in group:
                    if p.upstream is not None:
                        self._upstream_lsn = max(self._upstream_lsn or 0, p.upstream)
                self._on_grown()
            for p in group:
                if p.record is None:
                    continue  # not the last part of its write: the last carries its record
                for fn in subscribers:
                    try:
                        fn(p.record)
                    except Exception:
                        log.exception("storage subscriber %r failed on LSN %d", fn, p.lsn)
            with self._lock:
                self._acked_lsn = last
                self._indexer.enqueue_locked(group, last, rows)
                self._ack_cv.notify_all()
            try:
                self._wal.maybe_rotate()
            except OSError:  # e.g. disk full: keep appending to the current file, retry later
                log.error("could not start a new WAL file; will retry after the next group",
                          exc_info=True)


class WriteTicket:
    """A write given its LSN by ``Storage.submit_many`` and committed in the background."""

    __slots__ = ("_committer", "_last", "lsn")

    def __init__(self, committer: Committer, lsn: int, last: Pending) -> None:
        self._committer = committer
        self._last = last
        self.lsn = lsn

    @property
    def last(self) -> Pending:
        """The write's last queue entry (its ``error`` is set if it is refused)."""
        return self._last

    def wait(self) -> int:
        """The LSN, once the write is durable and delivered to subscribers; raises the
        error that refused it (e.g. ResourceExhausted when the log ran out of space)."""
        return self._committer.wait(self.lsn, self._last)
