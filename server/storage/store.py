"""Storage: durable, LSN-versioned base tables (WAL + memtable + Parquet segments + row index).

A thin facade: ``open()`` recovers the data directory (``recovery.recover`` returns the
opened parts) and wires the objects that own the data, each documented in its module:

- ``TableCatalog`` / ``Ddl`` (ddl.py): tables and views; create/drop across the parts.
- ``Admission`` (admitter.py): checks a write, gives it its LSN, queues it.
- ``Committer`` (committer.py, thread): group commit to the log, memtable, subscribers.
- ``RowIndexer`` (indexer.py, thread): the row index and the overlay of accepted writes.
- ``Memtable`` (memtable.py), ``FileSet`` (files.py: manifest, pins, obsolete files).
- ``Maintenance`` (maintenance.py, flusher and compactor threads): flush, log truncation,
  compaction.

Locks, always taken in this order (server/storage/README.md): the catalog's, the file set's,
the row index's, then the storage lock; the log's lock is never held while taking another.
The storage lock is one lock shared by the parts whose data a reader sees together; it is
held only for short, non-blocking steps.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from partialflow.server.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from partialflow.server.storage.committer import Subscriber, WriteTicket
from partialflow.server.storage.ddl import TableCatalog
from partialflow.server.storage.maintenance import Tuning
from partialflow.server.storage.parts import Parts, wire
from partialflow.server.storage.query import parse_select, run_query
from partialflow.server.storage.record import TableChange, TxRecord, WriteRecord
from partialflow.server.storage.recovery import Layout, log_records, recover
from partialflow.server.storage.schema import TableSchema
from partialflow.server.storage.segments import ROW_GROUP_ROWS
from partialflow.server.storage.snapshot import Snapshot
from partialflow.server.storage.space import Backoff, DiskSpace, fmt_bytes, is_space_error

__all__ = ["Storage", "WriteTicket"]

log = logging.getLogger(__name__)


def _tuned(name: str) -> property:
    def get(self: Storage) -> Any:
        return getattr(self._tuning, name)

    def put(self: Storage, value: Any) -> None:
        setattr(self._tuning, name, value)

    return property(get, put)


class Storage:
    """Durable base tables. See the module docstring and server/storage/README.md.

    ``retention_lsns`` (default 1,000,000): compaction only consolidates rows more than this
    many LSNs older than the flushed LSN (and never past a pinned snapshot), so ``as_of`` reads
    within that window stay exact. Spark is only used by reads and compaction.
    """

    flush_rows = _tuned("flush_rows")
    flush_interval = _tuned("flush_interval")
    retention_lsns = _tuned("retention_lsns")
    max_segments = _tuned("max_segments")
    wal_rotate_bytes = _tuned("wal_rotate_bytes")
    max_index_backlog = _tuned("max_index_backlog")
    row_group_rows = _tuned("row_group_rows")

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
        self._tuning = Tuning(int(flush_rows), float(flush_interval), int(retention_lsns),
                              int(max_segments), int(wal_rotate_bytes), int(max_index_backlog),
                              int(row_group_rows))
        # Log records after this LSN are kept even once they are in Parquet: dataflow
        # checkpoints recover by replaying them (``hold_wal``). Set before the threads
        # start, so a restart can't truncate what the newest checkpoint needs.
        self._wal_hold = wal_hold
        # Free space kept beyond what the queued writes and the next flush need (None: 64 MiB,
        # or 1/16 of the filesystem when smaller); see space.py.
        self.disk_reserve = disk_reserve
        self.retries = {name: Backoff(what) for name, what in (
            ("flush", "background flush"), ("compaction", "background compaction"),
            ("index", "row index update"))}
        self.layout = Layout(self.data_dir)
        self.tables_dir = self.layout.tables_dir
        self.wal_dir = self.layout.wal_dir
        self.catalog_path = self.layout.catalog_path
        self.manifest_path = self.layout.manifest_path
        self.counters: Counter[str] = Counter()

        self._lock = threading.Lock()  # the storage lock, shared by the parts
        self._state = "new"  # new -> opening -> open -> closing -> closed
        self._parts: Parts | None = None
        # Before open() the catalog is empty; subscribers wait to be handed to the committer.
        self._catalog = TableCatalog(self._lock, self.catalog_path, self.tables_dir)
        self._subscribers: list[Subscriber] = []
        self._threads: dict[str, threading.Thread] = {}
        self._lock_fd = -1

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
        space = DiskSpace(self.data_dir, self.disk_reserve)
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
            rec = recover(self.layout, self._tuning.wal_rotate_bytes)
        except BaseException:
            self._unlock_dir()
            self._state = "new"
            raise
        with self._lock:  # subscribe() and hold_wal() before open hand their values over
            p = self._parts = wire(rec, space, self._lock, self._tuning, self.layout,
                                   self.spark, counters=self.counters, retries=self.retries,
                                   wal_hold=self._wal_hold, subscribers=self._subscribers,
                                   check_open=self._check_open, is_open=self._is_open)
            self._catalog = p.catalog
            self._state = "open"
        runs: dict[str, Callable[[], None]] = {
            "committer": p.committer.run, "indexer": p.indexer.run,
            "flusher": p.maintenance.run_flusher, "compactor": p.maintenance.run_compactor}
        for name, target in runs.items():
            t = threading.Thread(target=target, name=f"pf-storage-{name}", daemon=True)
            t.start()
            self._threads[name] = t

    def _opened(self) -> Parts:
        """The parts of an open storage (FailedPrecondition otherwise)."""
        p = self._parts
        if self._state != "open" or p is None:
            raise FailedPrecondition(f"storage is {self._state}")
        return p

    def close(self) -> None:
        """Stop the threads, flush the memtable, fsync and close files. Idempotent."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "closing"
            p = self._parts
            assert p is not None
            p.maintenance.stop_locked()
            p.indexer.wake_writers_locked()  # writers held back by the backlog limit give up
        self._threads["flusher"].join()
        self._threads["compactor"].join()  # waits for a running compaction to finish
        p.admission.stop()
        self._threads["committer"].join()  # drains every accepted write
        p.indexer.stop()
        self._threads["indexer"].join()
        try:
            p.maintenance.flush()
            p.maintenance.truncate_wal()
        except Exception as err:  # e.g. no space: the log keeps every write, replayed on open
            log.warning("flush at close failed (%s); the next open replays the log", err)
        p.wal.close()
        p.indexer.close()
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
            p = self._parts
            if p is not None:
                p.maintenance.stop_locked()
                p.admission.stop_locked()
        if p is not None:
            p.indexer.stop()
        for t in self._threads.values():
            t.join()
        self._unlock_dir()  # as the kernel would for a dead process

    def _check_open(self) -> None:
        if self._state != "open":
            raise FailedPrecondition(f"storage is {self._state}")

    def _is_open(self) -> bool:
        return self._state == "open"

    # ------------------------------------------------------------------ writes
    def subscribe(self, fn: Subscriber) -> None:
        """Call ``fn`` with every new WriteRecord (a TxRecord for a write over several tables
        or none), in LSN order, from the committer thread,
        after the record is durable and before its writer is acknowledged. Keep it fast."""
        with self._lock:
            p = self._parts
            if p is None:
                self._subscribers = self._subscribers + [fn]
                return
        p.committer.subscribe(fn)

    def hold_wal(self, lsn: int | None) -> None:
        """Keep log records with LSN > ``lsn`` (None: no hold) until told otherwise."""
        with self._lock:
            p = self._parts
            if p is None:
                self._wal_hold = lsn
                return
        p.maintenance.hold_wal(lsn)

    @property
    def wal_hold(self) -> int | None:
        p = self._parts
        return p.maintenance.wal_hold if p is not None else self._wal_hold

    def log_start(self) -> int:
        """The first LSN the write-ahead log holds (``last_lsn + 1`` when it holds none)."""
        p = self._parts
        assert p is not None, "storage is not open"
        return p.wal.start(self.last_lsn + 1)

    def log_records(self, after: int, upto: int) -> Iterator[WriteRecord | TxRecord]:
        """The durable writes with ``after`` < LSN <= ``upto``, in LSN order, read back
        from the log (records of tables dropped since are skipped). FailedPrecondition if
        the log no longer holds all of them."""
        return log_records(self.wal_dir, self._catalog.by_id(), after, upto)

    @property
    def last_lsn(self) -> int:
        """Highest durable LSN (0 for a fresh store)."""
        p = self._parts
        return p.memtable.lsn if p is not None else 0

    @property
    def upstream_lsn(self) -> int | None:
        """The largest ``upstream_lsn`` of any committed write (recovered at open from the
        log and the manifest), None if no write carried one."""
        p = self._parts
        return p.committer.upstream_lsn if p is not None else None

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
        self, changes: Sequence[TableChange], *, upstream_lsn: int | None = None,
        after: WriteTicket | None = None,
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
        is delivered as a WriteRecord, any other as a TxRecord. ``after``: a ticket this write
        must follow; if that write is refused, so is this one (FailedPrecondition), so a
        caller submitting in order never has a later write stored in an earlier one's place.
        """
        p = self._parts  # (not ``_opened()``: one call fewer per write)
        if self._state != "open" or p is None:
            raise FailedPrecondition(f"storage is {self._state}")
        last = p.admission.submit(changes, upstream_lsn,
                                  after.last if after is not None else None)
        return WriteTicket(p.committer, last.lsn, last)

    # ------------------------------------------------------------------ reads
    def snapshot(self, lsn: int | None = None) -> Snapshot:
        """A pinned view of every table as of ``lsn`` (default: last_lsn). Use as a context
        manager; InvalidArgument if ``lsn`` is beyond last_lsn."""
        p = self._opened()
        if lsn is not None and (isinstance(lsn, bool) or not isinstance(lsn, int)):
            raise InvalidArgument(f"as_of must be an integer LSN, got {lsn!r}")
        with self._lock:
            v, views = p.snapshot_locked(lsn)
            return Snapshot(self.spark, p.files, v, views)

    def query(self, sql: str, as_of: int | None = None) -> tuple[list[str], list[tuple], int]:
        """Run one SELECT over the base tables at a snapshot: (column names, rows, lsn)."""
        parse_select(sql)  # refuse bad SQL before pinning anything
        with self.snapshot(as_of) as snap:
            columns, rows = run_query(snap, sql)
            return columns, rows, snap.lsn

    # ------------------------------------------------------------------ catalog
    def create_table(self, schema: TableSchema) -> None:
        """Create a table; AlreadyExists for a taken name, InvalidArgument for a bad schema."""
        self._opened().ddl.create_table(schema)

    def drop_table(self, name: str) -> None:
        """Drop a table and (once no snapshot reads them) its files; NotFound if absent."""
        self._opened().ddl.drop_table(name)

    def save_view(self, name: str, sql: str) -> None:
        """Persist a view definition (the dataflow layer re-creates views on restart)."""
        self._opened().ddl.save_view(name, sql)

    def drop_view(self, name: str) -> None:
        self._opened().ddl.drop_view(name)

    def table(self, name: str) -> TableSchema:
        """Schema of a table; NotFound naming it and listing the existing tables."""
        return self._catalog.entry(name).schema

    def table_ids(self) -> dict[str, int]:
        """Each live table's catalog id by lower-cased name: a table dropped and created
        again under its name gets a new id (checkpoints tell the two apart by it)."""
        return {name: e.id for name, e in self._tables().items()}

    def tables(self) -> list[TableSchema]:
        return [e.schema for e in sorted(self._tables().values(), key=lambda e: e.id)]

    def views(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._catalog.current_locked.views)

    def _tables(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._catalog.current_locked.tables)

    def table_dir(self, name: str) -> Path:
        """The directory holding a table's segment files."""
        return self._catalog.table_dir(name)

    # ------------------------------------------------------------------ maintenance
    def flush(self) -> None:
        """Write the memtable to Parquet segments now (ResourceExhausted if the disk is
        full: nothing is lost, the log holds every write and a later flush writes them)."""
        p = self._opened()
        try:
            p.maintenance.flush()
            p.maintenance.truncate_wal()
        except Exception as err:
            self._raise_space_error("flush", err)
            raise

    def compact(self, table: str | None = None) -> dict:
        """Compact one table (or all) with Spark; returns before/after figures."""
        p = self._opened()
        entries = [p.catalog.entry(table)] if table is not None else p.catalog.entries()
        t0 = time.monotonic()
        per = {}
        for e in entries:
            try:
                per[e.schema.name] = p.maintenance.compact_table(e)
            except Exception as err:
                self._raise_space_error(f"compaction of {e.schema.name}", err)
                raise
        total = {
            k: sum(f[k] for f in per.values())
            for k in ("segments_before", "segments_after", "rows_before", "rows_after")
        }
        return {**total, "seconds": round(time.monotonic() - t0, 3), "tables": per}

    def compacting(self) -> bool:
        """Whether a compaction is running now."""
        p = self._parts
        return p is not None and p.maintenance.compacting()

    def wait_for_compaction(self) -> None:
        """Return once no compaction is running (a new one may start right after)."""
        p = self._parts
        if p is not None:
            p.maintenance.wait_for_compaction()

    def wake_background(self) -> None:
        """Make the flusher and the compactor look for work now."""
        p = self._parts
        if p is not None:
            p.maintenance.wake()

    def _raise_space_error(self, what: str, err: Exception) -> None:
        """Raise ``err`` as ResourceExhausted naming the directory if it says the disk is
        full (the caller re-raises anything else as it is)."""
        if not is_space_error(err) or isinstance(err, ResourceExhausted):
            return
        p = self._parts
        free = p.space.free_bytes() if p is not None else 0
        raise ResourceExhausted(
            f"{what} failed: no space left in {self.data_dir} ({fmt_bytes(free)} free); "
            "nothing was changed, retry once space is freed"
        ) from err

    def set_clustering(self, columns: Mapping[str, Sequence[str]]) -> None:
        """Per table (any case), the columns to cluster its segments by, most used first:
        the engine passes what the live views' misses filter on. Unknown tables and columns
        are ignored; the next compaction of each table sorts by them."""
        p = self._parts
        if p is not None:
            p.maintenance.set_clustering(columns)

    def clustering(self, table: str) -> tuple[str, ...]:
        """The columns ``table``'s next compaction sorts by (empty: no views key on it)."""
        p = self._parts
        return p.maintenance.clustering(table) if p is not None else ()

    @property
    def disk(self) -> DiskSpace | None:
        """The free-space accounting of the data directory (None before ``open``)."""
        p = self._parts
        return p.space if p is not None else None

    def segment_files(self) -> dict[str, list[str]]:
        """Per table, the segment files the current manifest names."""
        p = self._opened()
        with self._lock:
            return {e.schema.name: [s.file for s in p.files.table(e.id).segments]
                    for e in p.catalog.current_locked.tables.values()}

    def index_entries(self, table: str) -> int:
        """Committed row index entries of a table (distinct rows of a bag table, keys of a
        keyed one): for checks and tests."""
        p = self._opened()
        e = p.catalog.entry(table)
        return p.indexer.count_rows(e.id, bool(e.schema.primary_key))

    def stats(self) -> dict:
        """Figures for monitoring and tests."""
        p = self._parts
        if p is None:
            return self._stats_unopened()
        with self._lock:
            return {**p.stats_locked(), **{f"{name}_failures": b.total
                                           for name, b in self.retries.items()},
                    "clustering": p.maintenance.clustering_stats_locked()}

    def _stats_unopened(self) -> dict:
        return {
            "lsn": 0, "flushed_lsn": 0, "index_lsn": 0, "horizon": {}, "segments": {},
            "memtable_rows": 0, "flushes": self.counters["flushes"],
            "compactions": self.counters["compactions"], "fsyncs": 0, "wal_bytes": 0,
            "wal_files": 0, "pinned_snapshots": 0,
            **{f"{name}_failures": b.total for name, b in self.retries.items()},
            "clustering": {},
        }
