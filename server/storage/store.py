"""Storage: durable, LSN-versioned base tables (WAL + memtable + Parquet segments + row index).

Threads and locks (always taken in this order, never the reverse):

- ``_ddl_lock``: serializes catalog changes and sqlite index transactions (the committer holds
  it while it applies a group to the index).
- ``_manifest_lock``: serializes manifest changes (flush, compaction swap, drop).
- ``_lock``: the storage lock. Guards LSN assignment, the pending queue, the memtable, the
  in-memory manifest/catalog, pins and the overlay. Held only for short, non-blocking steps
  (plus the sqlite point reads that validate deletes and primary keys).

Write path: a writer validates and encodes its batch without any lock, then under ``_lock``
checks deletes/keys against the row index plus the overlay of accepted-but-not-yet-indexed
writes, takes the next LSN and queues its record. The committer thread takes everything queued,
appends it to the WAL with one write and one fdatasync, appends it to the memtable, calls the
subscribers, wakes the writers, and then applies the group to the row index.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from partialflow.server.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from partialflow.server.storage import admission, maintenance, pipeline, recovery
from partialflow.server.storage.catalog import Catalog, Manifest
from partialflow.server.storage.ddl import CatalogOps
from partialflow.server.storage.query import parse_select, run_query
from partialflow.server.storage.record import (
    Overlay,
    Pending,
    TableChange,
    TxRecord,
    WriteRecord,
)
from partialflow.server.storage.rowindex import RowIndex
from partialflow.server.storage.segments import ROW_GROUP_ROWS, MemEntry
from partialflow.server.storage.snapshot import Snapshot, TableView
from partialflow.server.storage.space import Backoff, DiskSpace, fmt_bytes, is_space_error
from partialflow.server.storage.wal import FRAME_OVERHEAD, WalWriter, list_wal_files

log = logging.getLogger(__name__)

_lsn_key = attrgetter("lsn")

class Storage(CatalogOps):
    """Durable base tables. See the module docstring and server/storage/README.md.

    ``retention_lsns`` (default 1,000,000): compaction only consolidates rows more than this
    many LSNs older than the flushed LSN (and never past a pinned snapshot), so ``as_of`` reads
    within that window stay exact. Spark is only used by reads and compaction.
    """

    def __init__(
        self,
        data_dir: str | Path,
        spark: SparkSession,
        *,
        flush_rows: int = 20_000,
        flush_interval: float = 1.0,
        retention_lsns: int = 1_000_000,
        max_segments: int = 16,
        wal_rotate_bytes: int = 64 << 20,
        max_index_backlog: int = 2_000_000,
        wal_hold: int | None = None,
        row_group_rows: int = ROW_GROUP_ROWS,
        disk_reserve: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.spark = spark
        self.flush_rows = int(flush_rows)
        self.flush_interval = float(flush_interval)
        self.retention_lsns = int(retention_lsns)
        self.max_segments = int(max_segments)
        self.wal_rotate_bytes = int(wal_rotate_bytes)
        self.max_index_backlog = int(max_index_backlog)
        # Log records after this LSN are kept even once they are in Parquet: dataflow
        # checkpoints recover by replaying them (``hold_wal``). Set before the threads
        # start, so a restart can't truncate what the newest checkpoint needs.
        self.wal_hold = wal_hold
        # Compaction sorts each table's segments by these columns (``set_clustering``), in
        # row groups of at most ``row_group_rows`` rows, so misses skip what cannot match.
        self.row_group_rows = int(row_group_rows)
        self._clustering: dict[str, tuple[str, ...]] = {}
        # Free space kept beyond what the queued writes and the next flush need (None: 64 MiB,
        # or 1/16 of the filesystem when smaller); see space.py.
        self.disk_reserve = disk_reserve
        self._space: DiskSpace | None = None  # made in open(), once the directory exists
        self._pending_bytes = 0  # log bytes of accepted writes not yet appended
        self._mem_bytes = 0  # Arrow bytes in the memtable: about what the next flush writes
        self.retries = {name: Backoff(what) for name, what in (
            ("flush", "background flush"), ("compaction", "background compaction"),
            ("index", "row index update"))}
        self.tables_dir = self.data_dir / "tables"
        self.wal_dir = self.data_dir / "wal"
        self.catalog_path = self.data_dir / "catalog.json"
        self.manifest_path = self.data_dir / "manifest.json"

        self._ddl_lock = threading.Lock()
        self._manifest_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        self._wal_lock = threading.Lock()
        self._lock = threading.Lock()
        self._work_cv = threading.Condition(self._lock)  # committer waits for pending records
        self._ack_cv = threading.Condition(self._lock)  # writers wait for their LSN to commit
        self._bg_cv = threading.Condition(self._lock)  # flusher/compactor wait for work
        self._index_cv = threading.Condition(self._lock)  # indexer waits for durable groups

        self._state = "new"  # new -> open -> closing -> closed
        self._catalog = Catalog()
        self._manifest = Manifest()
        self._live: set[int] = set()
        self._index: RowIndex | None = None
        self._wal: WalWriter | None = None
        self._next_lsn = 1
        self._upstream_lsn: int | None = None  # see the upstream_lsn property
        self._upstream_marks: list[tuple[int, int]] = []  # (LSN, upstream LSN) not flushed
        self._durable_lsn = 0  # in WAL, memtable and delivered to subscribers
        self._acked_lsn = 0  # writers up to here have been woken
        self._index_lsn = 0
        self._pending: list[Pending] = []
        self._overlays: dict[int, Overlay] = {}  # per table id: accepted, not yet indexed
        self._mem: dict[int, list[MemEntry]] = {}
        self._mem_rows = 0
        self._subscribers: list[Callable[[WriteRecord | TxRecord], None]] = []
        self._pins: Counter[int] = Counter()
        self._file_refs: Counter[str] = Counter()
        self._obsolete: set[str] = set()
        self._index_queue: list[tuple[list[Pending], int, int]] = []  # (group, last LSN, rows)
        self._index_backlog = 0  # rows durable but not yet in the row index
        self._threads: dict[str, threading.Thread] = {}
        self._stop_bg = False
        self._stop_commit = False
        self._stop_index = False
        self._last_flush = time.monotonic()
        self.counters: Counter[str] = Counter()
        self._lock_fd = -1
        # Releases of snapshots that were garbage-collected without close(); a finalizer may
        # run while this thread holds the storage lock, so it only appends here.
        self._leaked: deque[tuple[int, list[str]]] = deque()
        self._obsolete_ready: list[str] = []  # unreferenced obsolete files found under the lock

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Create the store or recover it (catalog, manifest, WAL replay); start the threads.

        Replayed WAL records are not delivered to subscribers: after a restart the dataflow
        starts from a checkpoint and asks for the records after it (``log_records``), or
        rebuilds its state from snapshots.
        """
        with self._lock:
            if self._state != "new":
                raise FailedPrecondition(f"storage is {self._state}; open() is called once")
            self._state = "opening"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._space = DiskSpace(self.data_dir, self.disk_reserve)
        self._lock_fd = os.open(self.data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # Two processes on one directory would corrupt it; the kernel drops the lock
            # when the process dies, however it dies.
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._state = "new"
            raise FailedPrecondition(
                f"data directory {self.data_dir} is in use by another process"
            ) from None
        try:
            recovery.recover(self)
        except BaseException:
            self._unlock_dir()
            self._state = "new"
            raise
        self._state = "open"
        for name in ("committer", "indexer", "flusher", "compactor"):
            target = getattr(pipeline, f"{name}_loop")
            t = threading.Thread(
                target=target, args=(self,), name=f"pf-storage-{name}", daemon=True
            )
            t.start()
            self._threads[name] = t

    def close(self) -> None:
        """Stop the threads, flush the memtable, fsync and close files. Idempotent."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "closing"
            self._stop_bg = True
            self._bg_cv.notify_all()
            self._ack_cv.notify_all()  # writers held back by the backlog limit give up
        self._threads["flusher"].join()
        self._threads["compactor"].join()  # waits for a running compaction to finish
        with self._lock:
            self._stop_commit = True
            self._work_cv.notify_all()
        self._threads["committer"].join()  # drains every accepted write
        with self._lock:
            self._stop_index = True
            self._index_cv.notify_all()
        self._threads["indexer"].join()
        try:
            maintenance.flush(self)
            maintenance.truncate_wal(self)
        except Exception as err:  # e.g. no space: the log keeps every write, replayed on open
            log.warning("flush at close failed (%s); the next open replays the log", err)
        assert self._wal is not None and self._index is not None
        with self._wal_lock:
            self._wal.close()
        with self._ddl_lock:
            try:
                self._index.close()
            except sqlite3.Error as err:  # e.g. a full disk: the next open catches it up
                log.warning("closing the row index failed (%s)", err)
        with self._lock:
            self._state = "closed"
        self._unlock_dir()

    def _unlock_dir(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def _halt(self) -> None:
        """Test hook simulating a crash: stop the threads without flushing or syncing anything
        beyond what was acknowledged. The object must not be used afterwards."""
        with self._lock:
            self._state = "closed"
            self._stop_bg = self._stop_commit = self._stop_index = True
            self._bg_cv.notify_all()
            self._work_cv.notify_all()
            self._index_cv.notify_all()
        for t in self._threads.values():
            t.join()
        self._unlock_dir()  # as the kernel would for a dead process

    def _check_open(self) -> None:
        if self._state != "open":
            raise FailedPrecondition(f"storage is {self._state}")

    # ------------------------------------------------------------------ writes
    def subscribe(self, fn: Callable[[WriteRecord | TxRecord], None]) -> None:
        """Call ``fn`` with every new WriteRecord (a TxRecord for a write over several tables
        or none), in LSN order, from the committer thread,
        after the record is durable and before its writer is acknowledged. Keep it fast."""
        with self._lock:
            self._subscribers = self._subscribers + [fn]

    def hold_wal(self, lsn: int | None) -> None:
        """Keep log records with LSN > ``lsn`` (None: no hold) until told otherwise."""
        with self._lock:
            self.wal_hold = lsn

    def log_start(self) -> int:
        """The first LSN the write-ahead log holds (``last_lsn + 1`` when it holds none)."""
        with self._wal_lock:
            files = list_wal_files(self.wal_dir)
        for first, path in files:
            if path.stat().st_size > 0:
                return first
        return self.last_lsn + 1

    def log_records(self, after: int, upto: int) -> Iterator[WriteRecord | TxRecord]:
        """The durable writes with ``after`` < LSN <= ``upto``, in LSN order, read back
        from the log (records of tables dropped since are skipped). FailedPrecondition if
        the log no longer holds all of them."""
        return recovery.log_records(self, after, upto)

    @property
    def last_lsn(self) -> int:
        """Highest durable LSN (0 for a fresh store)."""
        return self._durable_lsn

    @property
    def upstream_lsn(self) -> int | None:
        """The largest ``upstream_lsn`` of any committed write (recovered at open from the
        log and the manifest), None if no write carried one."""
        return self._upstream_lsn

    def write(
        self,
        table: str,
        inserts: Sequence[Sequence[Any]] = (),
        deletes: Sequence[Sequence[Any]] = (),
    ) -> int:
        """Atomically delete then insert rows; returns the write's LSN once it is durable.

        Deletes remove one occurrence per given row (NotFound if absent); with a PRIMARY KEY,
        an insert whose key exists after this batch's deletes is refused (AlreadyExists).
        Any error leaves the table unchanged.
        """
        return self.write_many([TableChange(table, inserts, deletes)])

    def write_many(
        self, changes: Sequence[TableChange], *, upstream_lsn: int | None = None
    ) -> int:
        """Apply ``changes`` as one write and wait for it: ``submit_many(...).wait()``."""
        return self.submit_many(changes, upstream_lsn=upstream_lsn).wait()

    def submit_many(
        self, changes: Sequence[TableChange], *, upstream_lsn: int | None = None
    ) -> WriteTicket:
        """Apply ``changes`` (to any tables, in order) as one write: one new LSN, durable as
        one unit (all or nothing after a crash), delivered as one record. It is checked and
        given its LSN now, in call order, then committed in the background (grouped with
        other writes into one fsync); the returned ticket's ``wait()`` gives the LSN once it
        is durable and delivered, or raises why it was refused. A caller that submits several
        writes before waiting (the follower, applying upstream commits in order) shares
        fsyncs among them.

        Each change is checked as ``write()`` checks it, against the tables as the earlier
        changes leave them; any error refuses the whole write and changes nothing. Messages
        of a write with several changes start "change N: ". ``upstream_lsn`` is stored in
        the same commit (``Storage.upstream_lsn``). A write whose changes name one table
        is delivered as a WriteRecord, any other as a TxRecord.
        """
        self._check_open()
        changes = admission.checked_changes(changes, upstream_lsn)
        with self._lock:
            entries = [self._entry(c.table) for c in changes]
        many = len(changes) > 1
        parts = [
            admission.prepare(e, c.inserts, c.deletes, f"change {i}: " if many else "")
            for i, (e, c) in enumerate(zip(entries, changes, strict=True))
        ]
        # Read the committed index state the checks need *before* taking the lock, so writers
        # query sqlite in parallel; if the indexer commits meanwhile, read again under the lock
        # (the overlay only covers writes the index had not seen at the time of the read).
        seen_lsn = self._index_lsn
        for part in parts:
            if part.needs_index:
                part.committed = self._read_index(part)
        by_table: dict[int, list[admission.Part]] = {}
        for part in parts:
            by_table.setdefault(part.entry.id, []).append(part)
        # One frame per table: several changes to one table become their net effect.
        nets = [(n, *admission.encode(n)) for n in map(admission.net, by_table.values())]
        space = self._space
        assert space is not None
        free = space.free_bytes()
        with self._lock:
            # Backpressure: bound the rows accepted but not yet indexed (the overlay's size).
            while self._index_backlog > self.max_index_backlog and self._state == "open":
                self._ack_cv.wait()
                free = -1
            if free < 0:  # waited: measure again (a statvfs, cheap even under the lock)
                free = space.free_bytes()
            self._check_open()
            for e in entries:
                if e.id not in self._live:
                    raise NotFound(f"table '{e.schema.name}' was dropped")
            local = admission.Local() if len(by_table) < len(parts) else None
            for part in parts:
                if self._index_lsn != seen_lsn and part.needs_index:
                    part.committed = self._read_index(part)
                admission.check(self._overlays, part, local)
            lsn = self._next_lsn
            pendings = admission.queue_entries(lsn, nets, upstream_lsn)
            frames = sum(len(p.body) + FRAME_OVERHEAD for p in pendings)
            # Last, so a bad write is told what is wrong with it; before the LSN, so a
            # refused write leaves no trace.
            space.check(free, frames, self._pending_bytes, self._mem_bytes)
            self._next_lsn += 1
            for p in pendings:
                ov = self._overlays.get(p.table_id)
                if ov is None and p.table_id != admission.META_TABLE:
                    ov = self._overlays[p.table_id] = Overlay()
                if ov is not None:
                    ov.add(p)
            self._pending.extend(pendings)
            self._pending_bytes += frames
            self._work_cv.notify()
        return WriteTicket(self, lsn, pendings[-1])

    def _wait_acked(self, lsn: int, last: Pending) -> int:
        with self._lock:
            while self._acked_lsn < lsn and last.error is None:
                self._ack_cv.wait()
            if last.error is not None:
                raise last.error
        return lsn

    def _read_index(self, part: admission.Part) -> dict[bytes, Any]:
        """Committed index entries the checks need: row digest -> copies for a bag table,
        key digest -> row digest for a keyed table."""
        assert self._index is not None
        entry = part.entry
        try:
            if entry.schema.primary_key:
                return self._index.key_rows(entry.id, list(set(part.del_k).union(part.ins_k)))
            return self._index.counts(entry.id, list(set(part.del_h)))
        except sqlite3.OperationalError:
            with self._lock:
                if entry.id not in self._live:  # dropped while we read
                    raise NotFound(f"table '{entry.schema.name}' was dropped") from None
            raise

    # ------------------------------------------------------------------ reads
    def snapshot(self, lsn: int | None = None) -> Snapshot:
        """A pinned view of every table as of ``lsn`` (default: last_lsn). Use as a context
        manager; InvalidArgument if ``lsn`` is beyond last_lsn."""
        self._check_open()
        if lsn is not None and (isinstance(lsn, bool) or not isinstance(lsn, int)):
            raise InvalidArgument(f"as_of must be an integer LSN, got {lsn!r}")
        with self._lock:
            if self._leaked:
                self._obsolete_ready.extend(self._drain_releases())
            v = self._durable_lsn if lsn is None else lsn
            if v < 0 or v > self._durable_lsn:
                raise InvalidArgument(
                    f"as_of {v} is out of range: the last durable LSN is {self._durable_lsn}"
                )
            views = {}
            for low, e in self._catalog.tables.items():
                tm = self._manifest.tables.get(e.id, _EMPTY)
                mem = self._mem.get(e.id, [])
                cut = (
                    len(mem) if not mem or mem[-1].lsn <= v else bisect_right(mem, v, key=_lsn_key)
                )
                tv = TableView(e.schema, e.id, tm.horizon, self._table_dir(e.schema.name),
                               tm.segments, tuple(mem[:cut]))
                views[low] = tv
                for path in tv.paths():
                    self._file_refs[path] += 1
            self._pins[v] += 1
            return Snapshot(self, v, views)

    def _release_snapshot(self, snap: Snapshot) -> None:
        self._leaked.append((snap.lsn, snap._file_paths()))
        with self._lock:
            doomed = self._drain_releases()
        maintenance.delete_files(self, doomed)

    def _drain_releases(self) -> list[str]:
        """Apply queued snapshot releases (call under the lock); returns files now deletable
        (the caller deletes them after releasing the lock)."""
        while self._leaked:
            lsn, paths = self._leaked.popleft()
            self._pins[lsn] -= 1
            if self._pins[lsn] <= 0:
                del self._pins[lsn]
            for path in paths:
                self._file_refs[path] -= 1
                if self._file_refs[path] <= 0:
                    del self._file_refs[path]
        return self._collect_unreferenced()

    def _collect_unreferenced(self) -> list[str]:
        """Obsolete segment files no open snapshot reads any more (call under the lock)."""
        doomed = [p for p in self._obsolete if p not in self._file_refs] + self._obsolete_ready
        self._obsolete.difference_update(doomed)
        self._obsolete_ready = []
        return doomed

    def query(self, sql: str, as_of: int | None = None) -> tuple[list[str], list[tuple], int]:
        """Run one SELECT over the base tables at a snapshot: (column names, rows, lsn)."""
        parse_select(sql)  # refuse bad SQL before pinning anything
        with self.snapshot(as_of) as snap:
            columns, rows = run_query(snap, sql)
            return columns, rows, snap.lsn

    # ------------------------------------------------------------------ maintenance
    def flush(self) -> None:
        """Write the memtable to Parquet segments now (ResourceExhausted if the disk is
        full: nothing is lost, the log holds every write and a later flush writes them)."""
        self._check_open()
        try:
            maintenance.flush(self)
            maintenance.truncate_wal(self)
        except Exception as err:
            self._raise_space_error("flush", err)
            raise

    def compact(self, table: str | None = None) -> dict:
        """Compact one table (or all) with Spark; returns before/after figures."""
        self._check_open()
        with self._lock:
            entries = (
                [self._entry(table)] if table is not None else list(self._catalog.tables.values())
            )
        t0 = time.monotonic()
        per = {}
        for e in entries:
            try:
                per[e.schema.name] = maintenance.compact_table(self, e)
            except Exception as err:
                self._raise_space_error(f"compaction of {e.schema.name}", err)
                raise
        total = {
            k: sum(f[k] for f in per.values())
            for k in ("segments_before", "segments_after", "rows_before", "rows_after")
        }
        return {**total, "seconds": round(time.monotonic() - t0, 3), "tables": per}

    def _raise_space_error(self, what: str, err: Exception) -> None:
        """Raise ``err`` as ResourceExhausted naming the directory if it says the disk is
        full (the caller re-raises anything else as it is)."""
        if not is_space_error(err) or isinstance(err, ResourceExhausted):
            return
        free = self._space.free_bytes() if self._space is not None else 0
        raise ResourceExhausted(
            f"{what} failed: no space left in {self.data_dir} ({fmt_bytes(free)} free); "
            "nothing was changed, retry once space is freed"
        ) from err

    def set_clustering(self, columns: Mapping[str, Sequence[str]]) -> None:
        """Per table (any case), the columns to cluster its segments by, most used first:
        the engine passes what the live views' misses filter on. Unknown tables and columns
        are ignored; the next compaction of each table sorts by them."""
        with self._lock:
            self._clustering = maintenance.resolve_clustering(self._catalog, columns)

    def clustering(self, table: str) -> tuple[str, ...]:
        """The columns ``table``'s next compaction sorts by (empty: no views key on it)."""
        with self._lock:
            return self._clustering.get(table.lower(), ())

    def stats(self) -> dict:
        """Figures for monitoring and tests."""
        with self._lock:
            if self._leaked:
                self._obsolete_ready.extend(self._drain_releases())
            wal = self._wal
            return {
                "lsn": self._durable_lsn,
                "flushed_lsn": self._manifest.flushed_lsn,
                "index_lsn": self._index_lsn,
                "horizon": {e.schema.name: self._manifest.tables.get(e.id, _EMPTY).horizon
                            for e in self._catalog.tables.values()},
                "segments": {e.schema.name: len(self._manifest.tables.get(e.id, _EMPTY).segments)
                             for e in self._catalog.tables.values()},
                "memtable_rows": self._mem_rows,
                "flushes": self.counters["flushes"],
                "compactions": self.counters["compactions"],
                "fsyncs": wal.fsyncs if wal else 0,
                "wal_bytes": wal.total_bytes if wal else 0,
                "wal_files": wal.file_count if wal else 0,
                "pinned_snapshots": sum(self._pins.values()),
                **(self._space.stats() if self._space is not None else {}),
                **{f"{name}_failures": b.total for name, b in self.retries.items()},
                "clustering": {t: list(c) for t, c in sorted(self._clustering.items()) if c},
            }


class _EmptyTM:
    horizon = 0
    segments: tuple = ()


_EMPTY = _EmptyTM()


class WriteTicket:
    """A write given its LSN by ``Storage.submit_many`` and committed in the background."""

    __slots__ = ("_last", "_storage", "lsn")

    def __init__(self, storage: Storage, lsn: int, last: Pending) -> None:
        self._storage = storage
        self._last = last
        self.lsn = lsn

    def wait(self) -> int:
        """The LSN, once the write is durable and delivered to subscribers; raises the
        error that refused it (e.g. ResourceExhausted when the log ran out of space)."""
        return self._storage._wait_acked(self.lsn, self._last)
