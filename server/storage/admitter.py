"""Admission: a write checked against its tables, given the next LSN and queued for commit.

``Admission`` owns LSN assignment, the queue of accepted writes waiting for the committer
and their log bytes. Its data is guarded by the storage lock (shared, see ``memtable.py``).
A writer validates and encodes its batch without any lock (``admission.prepare`` etc.) and
reads the committed row index entries its checks need (its own sqlite connection); then,
under the storage lock, it re-reads if the indexer committed meanwhile, checks against the
index plus the overlay of accepted writes (the indexer's), takes the LSN and queues.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from partialflow.server.errors import FailedPrecondition
from partialflow.server.storage import admission
from partialflow.server.storage.ddl import TableCatalog
from partialflow.server.storage.indexer import RowIndexer
from partialflow.server.storage.memtable import Memtable
from partialflow.server.storage.record import Pending, TableChange
from partialflow.server.storage.space import DiskSpace
from partialflow.server.storage.wal import FRAME_OVERHEAD


class BacklogLimit(Protocol):
    """The storage's tuning, as admission reads it per write (a setting changed while
    running applies to the next write)."""

    max_index_backlog: int


class Admission:
    def __init__(self, lock: threading.Lock, next_lsn: int, *, catalog: TableCatalog,
                 indexer: RowIndexer, memtable: Memtable, space: DiskSpace,
                 tuning: BacklogLimit, check_open: Callable[[], None],
                 is_open: Callable[[], bool]) -> None:
        self._lock = lock  # the storage lock (shared)
        # The storage's state (its facade's): FailedPrecondition unless open / whether open.
        # Given once here, not with every write.
        self._check_open = check_open
        self._is_open = is_open
        self._catalog = catalog
        self._indexer = indexer
        self._memtable = memtable
        self._space = space
        self._tuning = tuning
        self._next_lsn = next_lsn
        self._pending: list[Pending] = []
        self._pending_bytes = 0  # log bytes of accepted writes not yet appended
        self._stop = False
        self._work_cv = threading.Condition(lock)  # the committer waits for pending records

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def check_space_locked(self) -> None:
        """Refuse a definition on a full disk as a write is refused."""
        space = self._space
        space.check(space.free_bytes(), 0, self._pending_bytes, self._memtable.nbytes)

    def submit(self, changes: Sequence[TableChange], upstream_lsn: int | None,
               after: Pending | None = None) -> Pending:
        """Check ``changes`` as one write, give it the next LSN and queue it; returns its
        last queue entry (its ``lsn`` is the write's; the committer sets its ``error`` if the
        write is refused later). Any error refuses the whole write and consumes no LSN. ``after``:
        the last entry of a write this one must follow; if that one was refused (and its
        LSN handed back), this one is refused too rather than stored in its place."""
        changes = admission.checked_changes(changes, upstream_lsn)
        catalog, indexer = self._catalog, self._indexer
        with self._lock:
            entries = [catalog.entry_locked(c.table) for c in changes]
        many = len(changes) > 1
        parts = [
            admission.prepare(e, c.inserts, c.deletes, f"change {i}: " if many else "")
            for i, (e, c) in enumerate(zip(entries, changes, strict=True))
        ]
        # Read the committed index state the checks need *before* taking the lock, so writers
        # query sqlite in parallel; if the indexer commits meanwhile, read again under the lock
        # (the overlay only covers writes the index had not seen at the time of the read).
        seen_lsn = indexer.lsn
        for part in parts:
            if part.needs_index:
                part.committed = indexer.read(part)
        by_table: dict[int, list[admission.Part]] = {}
        for part in parts:
            by_table.setdefault(part.entry.id, []).append(part)
        # One frame per table: several changes to one table become their net effect.
        nets = [(n, *admission.encode(n)) for n in map(admission.net, by_table.values())]
        space = self._space
        free = space.free_bytes()
        max_backlog = self._tuning.max_index_backlog
        with self._lock:
            # Backpressure: bound the rows accepted but not yet indexed (the overlay's size).
            if indexer.wait_for_room_locked(max_backlog, self._is_open):
                free = space.free_bytes()  # waited: measure again (a statvfs, cheap)
            self._check_open()
            if after is not None and after.error is not None:
                # Checked under the lock that refuse_locked sets errors under: a write
                # submitted after that moment cannot take the refused one's LSN.
                raise FailedPrecondition(
                    f"the write this one must follow (LSN {after.lsn}) was refused: "
                    f"{after.error}; nothing was written")
            catalog.check_live_locked(entries)
            local = admission.Local() if len(by_table) < len(parts) else None
            reread = indexer.lsn != seen_lsn  # it only moves under the storage lock
            for part in parts:
                if reread and part.needs_index:
                    part.committed = indexer.read(part)
                indexer.check_locked(part, local)
            lsn = self._next_lsn
            pendings = admission.queue_entries(lsn, nets, upstream_lsn)
            frames = sum(len(p.body) + FRAME_OVERHEAD for p in pendings)
            # Last, so a bad write is told what is wrong with it; before the LSN, so a
            # refused write leaves no trace.
            space.check(free, frames, self._pending_bytes, self._memtable.nbytes)
            self._next_lsn += 1
            indexer.accept_locked(pendings)
            self._pending.extend(pendings)
            self._pending_bytes += frames
            self._work_cv.notify()
        return pendings[-1]

    # ------------------------------------------------------------------ committer's side
    def take(self) -> list[Pending] | None:
        """Everything queued, waiting for some; None once stopped with nothing queued."""
        with self._lock:
            while not self._pending and not self._stop:
                self._work_cv.wait()
            if not self._pending:
                return None
            group, self._pending = self._pending, []
            return group

    def appended_locked(self, group: Sequence[Pending]) -> None:
        """``group`` is in the log: its bytes no longer wait."""
        self._pending_bytes -= sum(len(p.body) + FRAME_OVERHEAD for p in group)

    def refuse_locked(self, group: list[Pending], err: OSError) -> None:
        """The log ran out of space appending ``group`` and was cut back: refuse the group
        and every write queued after it with RESOURCE_EXHAUSTED, and hand their LSNs back,
        so the log stays contiguous and nothing refused was ever acknowledged or delivered."""
        refused = group + self._pending
        self._pending = []
        self._pending_bytes = 0
        first = group[0].lsn
        self._next_lsn = first  # nothing at or after ``first`` reached the log
        error = self._space.refuse_group(len(refused), err)
        self._indexer.refuse_locked({p.table_id for p in refused}, first)
        for p in refused:  # one exception per writer: each raises it on its own thread
            p.error = type(error)(str(error))

    def stop(self) -> None:
        """The committer drains what is queued, then ends."""
        with self._lock:
            self.stop_locked()

    def stop_locked(self) -> None:
        self._stop = True
        self._work_cv.notify_all()
