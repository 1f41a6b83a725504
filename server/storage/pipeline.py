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
worse than a restart, which replays the WAL. Running out of space is not: a WAL write() that
hits ENOSPC is undone and its group refused (``refuse_group``), an index update that finds
the disk full is rolled back and retried, and flushes and compactions are retried with
backoff (``space.Backoff``); none of them acknowledges or loses anything meanwhile.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from partialflow.server.storage import maintenance
from partialflow.server.storage.record import Pending, net_keys
from partialflow.server.storage.segments import MemEntry
from partialflow.server.storage.space import fmt_bytes, is_space_error
from partialflow.server.storage.wal import FRAME_OVERHEAD, WalFull, encode_frame

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
            parts.extend(encode_frame(p.lsn, p.table_id, p.ndel, p.body, p.more))
        last = group[-1].lsn
        try:
            with st._wal_lock:
                st._wal.append(b"".join(parts), last + 1)
        except WalFull as err:  # undone: the log ends where it did, refuse the writes
            refuse_group(st, group, err)
            continue
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
                    st._mem_bytes += p.batch.nbytes
            st._pending_bytes -= sum(len(p.body) + FRAME_OVERHEAD for p in group)
            st._durable_lsn = last
            for p in group:
                if p.upstream is not None:
                    st._upstream_marks.append((p.lsn, p.upstream))
                    st._upstream_lsn = max(st._upstream_lsn or 0, p.upstream)
            if st._mem_rows >= st.flush_rows:
                st._bg_cv.notify_all()
        for p in group:
            if p.record is None:
                continue  # not the last part of its write: the last carries its record
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
                st._wal.maybe_rotate()
        except OSError:  # e.g. disk full: keep appending to the current file, retry later
            log.error("could not start a new WAL file; will retry after the next group",
                      exc_info=True)


def refuse_group(st: Storage, group: list[Pending], err: OSError) -> None:
    """The log ran out of space appending ``group`` and was cut back: refuse the group and
    every write queued after it with RESOURCE_EXHAUSTED, and hand their LSNs back, so the
    log stays contiguous and nothing refused was ever acknowledged or delivered."""
    assert st._space is not None
    with st._lock:
        refused = group + st._pending
        st._pending = []
        st._pending_bytes = 0
        first = group[0].lsn
        st._next_lsn = first  # nothing at or after ``first`` reached the log
        error = st._space.refuse_group(len(refused), err)
        for tid in {p.table_id for p in refused}:
            ov = st._overlays.get(tid)
            if ov is not None:
                ov.drop_from(first)
                if not len(ov):
                    del st._overlays[tid]
        for p in refused:  # one exception per writer: each raises it on its own thread
            p.error = type(error)(str(error))
        st._ack_cv.notify_all()


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
        except BaseException as err:
            if not is_space_error(err) or not _index_rolled_back(st, index):
                log.critical(
                    "row index update failed; exiting (restart replays the WAL)", exc_info=True
                )
                os._exit(71)
            with st._lock:
                st._index_queue = batch + st._index_queue
                if st._stop_index:
                    # Closing on a full disk: leave the index behind the log; the next open
                    # re-applies the log records after the index's LSN.
                    log.warning("row index left at LSN %d on a full disk; the next open "
                                "catches it up from the log", st._index_lsn)
                    return
            delay = st.retries["index"].failed(err)
            with st._lock:
                st._index_cv.wait_for(lambda: st._stop_index, timeout=delay)
            continue
        st.retries["index"].succeeded()


def _index_rolled_back(st: Storage, index: Any) -> bool:
    """Roll back the index transaction a full disk interrupted, so the batch can be applied
    again later: writers' checks stay exact meanwhile (the overlay still holds it)."""
    try:
        with st._ddl_lock:
            index.rollback()
        return True
    except Exception:
        log.exception("rolling back the row index after a full disk failed")
        return False


def flusher_loop(st: Storage) -> None:
    while True:
        with st._lock:
            while not st._stop_bg:
                due = st._last_flush + st.flush_interval - time.monotonic()
                # Short of space, or with closed log files not yet deleted (the row index
                # was behind at the last flush), come round even with nothing to flush: the
                # log may be truncatable by now, which frees space. Otherwise a short episode
                # that the flush alone ended would keep its flushed log files until the next
                # write.
                busy = (st._mem_rows or (st._space is not None and st._space.short)
                        or (st._wal is not None and st._wal.file_count > 1))
                if st._mem_rows >= st.flush_rows or (busy and due <= 0):
                    break
                st._bg_cv.wait(timeout=max(due, 0.05) if busy else st.flush_interval)
            if st._stop_bg:
                return
        try:
            maintenance.flush(st)
            if st._space is not None and st._space.short:
                # Short of space: start a new log file now, so the flushed records' file
                # can be deleted instead of growing to wal_rotate_bytes beside its copy.
                with st._wal_lock:
                    assert st._wal is not None
                    st._wal.maybe_rotate(force=True)
            maintenance.truncate_wal(st)
            if st._space is not None and st._space.short:
                free = st._space.free_bytes()
                with st._lock:
                    st._space.settle(free, st._pending_bytes, st._mem_bytes)
        except Exception as err:  # e.g. no space: the memtable and the log keep every row
            delay = st.retries["flush"].failed(err)
            with st._lock:
                st._bg_cv.wait_for(lambda: st._stop_bg, timeout=delay)
            continue
        st.retries["flush"].succeeded()


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
            if not _room_to_compact(st, e):
                with st._lock:
                    st._bg_cv.wait_for(lambda: st._stop_bg, timeout=2.0)
                break
            try:
                maintenance.compact_table(st, e, tiered=True)
            except Exception as err:
                delay = st.retries["compaction"].failed(err)
                with st._lock:
                    st._bg_cv.wait_for(lambda: st._stop_bg, timeout=delay)
                break
            st.retries["compaction"].succeeded()


def _room_to_compact(st: Storage, entry: Any) -> bool:
    """Whether the disk has room for a copy of ``entry``'s segments (what a compaction
    writes before it deletes its inputs) beside the reserve and the next flush. A background
    compaction that cannot fit is not started: it would fill the disk, refuse writes while
    it runs, and fail anyway."""
    if st._space is None:
        return True
    with st._lock:
        tm = st._manifest.tables.get(entry.id)
        files = [st._table_dir(entry.schema.name) / s.file for s in tm.segments] if tm else []
        flush = st._mem_bytes
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            pass
    free = st._space.free_bytes()
    need = size + flush + st._space.reserve
    if free >= need:
        if entry.id in st._space.deferred:
            st._space.deferred.discard(entry.id)
            log.info("background compaction of %s resumes: %s free", entry.schema.name,
                     fmt_bytes(free))
        return True
    if entry.id not in st._space.deferred:
        st._space.deferred.add(entry.id)
        log.warning("background compaction of %s waits for room: it needs about %s (a copy of "
                    "its segments, the next flush and the reserve), %s free",
                    entry.schema.name, fmt_bytes(need), fmt_bytes(free))
    return False
