"""The Storage's background threads: committer, indexer, flusher, compactor.

committer  pending records -> one WAL write + one fdatasync (group commit) -> memtable ->
           subscribers (LSN order) -> wake the writers -> hand the group to the indexer.
indexer    durable groups -> row index (sqlite), in one transaction per batch of groups, then
           retire their overlay generations. sqlite's random-key B-tree inserts cost several
           microseconds per row; running them here, GIL released inside sqlite, lets them
           overlap with the writers' Python work instead of delaying acknowledgements.
flusher    memtable -> Parquet segments when big enough or every flush_interval; WAL truncation.
compactor  Spark compaction of tables with more than max_segments segments.

A failed WAL fsync or index update is fatal (log, then os._exit): acknowledging a write that
may not be durable, or checking later writes against an index missing earlier ones, would be
worse than a restart, which replays the WAL.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from partialflow.server.storage import maintenance
from partialflow.server.storage.record import Pending, net_keys
from partialflow.server.storage.segments import MemEntry
from partialflow.server.storage.wal import encode_frame

if TYPE_CHECKING:
    from partialflow.server.storage.store import Storage

log = logging.getLogger(__name__)

INDEX_DELAY = 0.25  # seconds a durable group may wait before it is applied to the row index
INDEX_BATCH_ROWS = 100_000  # ...unless this many rows are waiting


def committer_loop(st: Storage) -> None:
    assert st._wal is not None
    while True:
        with st._lock:
            while not st._pending and not st._stop_commit:
                st._work_cv.wait()
            if not st._pending:
                return
            group, st._pending = st._pending, []
            subscribers = st._subscribers
        parts: list[Any] = []
        for p in group:
            parts.extend(encode_frame(p.lsn, p.table_id, p.ndel, p.body))
        last = group[-1].lsn
        try:
            with st._wal_lock:
                st._wal.append(b"".join(parts))
        except BaseException:  # never acknowledge a write that may not be durable
            log.critical("WAL append/fsync failed; exiting so no lost write is acknowledged",
                         exc_info=True)
            os._exit(70)
        rows = 0
        with st._lock:
            for p in group:
                n = p.batch.num_rows
                rows += n
                mem = st._mem.get(p.table_id)
                if mem is not None and p.table_id in st._live:
                    mem.append(MemEntry(p.lsn, p.ndel, p.batch))
                    st._mem_rows += n
            st._durable_lsn = last
            if st._mem_rows >= st.flush_rows:
                st._bg_cv.notify_all()
        for p in group:
            for fn in subscribers:
                try:
                    fn(p.record)
                except Exception:
                    log.exception("storage subscriber %r failed on LSN %d", fn, p.lsn)
        with st._lock:
            st._acked_lsn = last
            st._index_queue.append((group, last, rows))
            st._index_backlog += rows
            st._ack_cv.notify_all()
            st._index_cv.notify()
        try:
            with st._wal_lock:
                st._wal.maybe_rotate(last + 1)
        except OSError:  # e.g. disk full: keep appending to the current file, retry later
            log.error("could not start a new WAL file; will retry after the next group",
                      exc_info=True)


def indexer_loop(st: Storage) -> None:
    assert st._index is not None
    index = st._index
    while True:
        with st._lock:
            while not st._index_queue and not st._stop_index:
                st._index_cv.wait()
            if not st._index_queue:
                return
            # Batch groups into fewer, larger sqlite transactions: each commit rewrites every
            # page it dirtied, and those writes also slow down the WAL's fdatasync (ext4
            # ordered mode flushes them together). The overlay covers the delay.
            deadline = time.monotonic() + INDEX_DELAY
            while (
                st._index_backlog < INDEX_BATCH_ROWS
                and not st._stop_index
                and (left := deadline - time.monotonic()) > 0
            ):
                st._index_cv.wait(timeout=left)
            batch, st._index_queue = st._index_queue, []
        last = batch[-1][1]
        rows = sum(b[2] for b in batch)
        with st._lock:
            keyed = {e.id for e in st._catalog.tables.values() if e.schema.primary_key}
        by_table: dict[int, list[Pending]] = {}
        for group, _, _ in batch:
            for p in group:
                by_table.setdefault(p.table_id, []).append(p)
        try:
            with st._ddl_lock:
                index.begin()
                for tid, ps in by_table.items():
                    if tid not in st._live:
                        continue  # dropped meanwhile; its index tables are gone
                    # (No sorting here: it would hold the GIL for tens of milliseconds and
                    # delay the committer, for little gain in sqlite at large table sizes.)
                    if tid in keyed:
                        put, removed = net_keys(ps)
                        index.apply_keys(tid, put, removed)
                    else:
                        index.apply(tid, [h for p in ps for h in p.ins_h],
                                    [h for p in ps for h in p.del_h])
                with st._lock:
                    # Commit and retire the overlay atomically w.r.t. writers' checks, so a
                    # write is never counted twice (index + overlay) or not at all.
                    index.commit(last)
                    for tid in by_table:
                        ov = st._overlays.get(tid)
                        if ov is not None:
                            ov.retire(last)
                            if not len(ov):
                                del st._overlays[tid]
                    st._index_lsn = last
                    st._index_backlog -= rows
                    st._ack_cv.notify_all()  # writers held back by the backlog limit
        except BaseException:
            log.critical(
                "row index update failed; exiting (restart replays the WAL)", exc_info=True
            )
            os._exit(71)


def flusher_loop(st: Storage) -> None:
    while True:
        with st._lock:
            while not st._stop_bg:
                due = st._last_flush + st.flush_interval - time.monotonic()
                if st._mem_rows >= st.flush_rows or (st._mem_rows and due <= 0):
                    break
                st._bg_cv.wait(timeout=max(due, 0.05) if st._mem_rows else st.flush_interval)
            if st._stop_bg:
                return
        try:
            maintenance.flush(st)
            maintenance.truncate_wal(st)
        except Exception:
            log.exception("background flush failed; will retry")
            time.sleep(min(st.flush_interval, 1.0))


def compactor_loop(st: Storage) -> None:
    while True:
        with st._lock:
            if st._stop_bg:
                return
            over = [
                e for e in st._catalog.tables.values()
                if (tm := st._manifest.tables.get(e.id)) is not None
                and len(tm.segments) > st.max_segments
            ]
            if not over:
                st._bg_cv.wait(timeout=max(st.flush_interval, 0.5))
                continue
        for e in over:
            if st._stop_bg:
                return
            try:
                maintenance.compact_table(st, e, tiered=True)
            except Exception:
                log.exception("background compaction of %s failed", e.schema.name)
                time.sleep(1.0)
