"""Maintenance: flushing the memtable to Parquet, log truncation and compaction, and the
flusher and compactor threads that run them.

``Maintenance`` acts on the memtable and the file set (and the catalog's tables, the log and
the row index's LSN). It owns the clustering wanted per table, the log hold, the flush and
compaction counters, its threads' wake-up condition and ``_compact_lock`` (one compaction at
a time). Locks are taken in the storage's order: catalog -> file set (``changing()``) ->
row index -> storage lock; the compaction lock before all of them.

flusher    memtable -> Parquet segments when big enough or every flush_interval; WAL truncation.
compactor  Spark compaction of tables with more than max_segments segments.

Flushes and compactions that fail (e.g. no space) are retried with backoff
(``space.Backoff``) and leave no file the manifest does not name; nothing is lost meanwhile:
the memtable and the log keep every row.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from partialflow.server.spark_supervisor import spark_guard, spark_up
from partialflow.server.storage.catalog import Catalog, SegmentMeta, TableEntry, TableManifest
from partialflow.server.storage.ddl import TableCatalog
from partialflow.server.storage.files import FileSet
from partialflow.server.storage.indexer import RowIndexer
from partialflow.server.storage.memtable import Memtable
from partialflow.server.storage.segments import (
    ROW_GROUP_ROWS,
    entries_to_table,
    spark_compact,
    write_segment,
)
from partialflow.server.storage.space import Backoff, DiskSpace, fmt_bytes
from partialflow.server.storage.wal import Wal

log = logging.getLogger(__name__)


@dataclass
class Tuning:
    """The storage's tuning keywords (server/storage/README.md), read by the parts as they
    run: a change takes effect at their next step."""

    flush_rows: int = 20_000
    flush_interval: float = 1.0
    retention_lsns: int = 1_000_000
    max_segments: int = 16
    wal_rotate_bytes: int = 64 << 20
    max_index_backlog: int = 2_000_000
    row_group_rows: int = ROW_GROUP_ROWS


# A tiered (background) compaction leaves a table's largest segment alone while the other
# segments together hold fewer rows than this fraction of it.
TIER_FRACTION = 0.1


def tier_inputs(segs: tuple[SegmentMeta, ...], cluster_by: tuple[str, ...],
                fraction: float = TIER_FRACTION) -> tuple[SegmentMeta, ...]:
    """The segments a tiered compaction merges: all but the largest one when that one is
    already sorted by ``cluster_by`` and the rest are small beside it; else all of them.

    A full merge rewrites the whole table, so its cost grows with the table: at 50M rows
    (30-40 s of one core) a write stream flushing every second starts the next one as soon
    as the last ends. Merging only the small flushed segments costs what they hold."""
    if len(segs) < 3 or not cluster_by:
        return segs
    big = max(segs, key=lambda s: s.rows)
    small = sum(s.rows for s in segs) - big.rows
    if big.sorted_by != tuple(cluster_by) or small >= fraction * big.rows:
        return segs
    return tuple(s for s in segs if s is not big)


def resolve_clustering(
    catalog: Catalog, columns: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """Clustering columns per lower-cased table name, in the schema's spelling; unknown
    tables and columns dropped (views and tables change independently of storage)."""
    out: dict[str, tuple[str, ...]] = {}
    for table, cols in columns.items():
        entry = catalog.tables.get(table.lower())
        if entry is None:
            continue
        known = {c.lower(): c for c in entry.schema.column_names}
        picked = [known[c.lower()] for c in cols if c.lower() in known]
        out[entry.schema.name.lower()] = tuple(dict.fromkeys(picked))
    return out


class Maintenance:
    def __init__(self, lock: threading.Lock, spark: SparkSession, tuning: Tuning, *,
                 catalog: TableCatalog, files: FileSet, memtable: Memtable, wal: Wal,
                 indexer: RowIndexer, space: DiskSpace, counters: Counter[str],
                 retries: Mapping[str, Backoff], wal_hold: int | None,
                 clustering: dict[str, tuple[str, ...]],
                 queued_bytes: Callable[[], int]) -> None:
        self._lock = lock  # the storage lock (shared)
        self._spark = spark
        self._tuning = tuning
        self._catalog = catalog
        self._files = files
        self._memtable = memtable
        self._wal = wal
        self._indexer = indexer
        self._space = space
        self.counters = counters  # flushes, compactions
        self._retries = retries
        self._queued_bytes = queued_bytes  # log bytes admitted, not yet appended
        # Log records after this LSN are kept even once they are in Parquet: dataflow
        # checkpoints recover by replaying them (``hold_wal``).
        self._wal_hold = wal_hold
        # Compaction sorts each table's segments by these columns (``set_clustering``), so
        # misses skip what cannot match.
        self._clustering = clustering
        self._compact_lock = threading.Lock()
        self._bg_cv = threading.Condition(lock)  # flusher/compactor wait for work
        self._stop = False
        self._last_flush = time.monotonic()

    # ------------------------------------------------------------------ settings
    @property
    def wal_hold(self) -> int | None:
        return self._wal_hold

    def hold_wal(self, lsn: int | None) -> None:
        with self._lock:
            self._wal_hold = lsn

    def set_clustering(self, columns: Mapping[str, Sequence[str]]) -> None:
        with self._lock:
            self._clustering = resolve_clustering(self._catalog.current_locked, columns)

    def clustering(self, table: str) -> tuple[str, ...]:
        with self._lock:
            return self._clustering.get(table.lower(), ())

    def clustering_stats_locked(self) -> dict[str, list[str]]:
        return {t: list(c) for t, c in sorted(self._clustering.items()) if c}

    def compacting(self) -> bool:
        """Whether a compaction is running now."""
        return self._compact_lock.locked()

    def wait_for_compaction(self) -> None:
        """Return once no compaction is running (one may start right after)."""
        with self._compact_lock:
            pass

    # ------------------------------------------------------------------ wake-ups
    def grown_locked(self) -> None:
        """The committer grew the memtable: wake the flusher once it is big enough."""
        if self._memtable.rows >= self._tuning.flush_rows:
            self._bg_cv.notify_all()

    def wake(self) -> None:
        """Wake the flusher and the compactor to look for work now."""
        with self._lock:
            self._bg_cv.notify_all()

    def stop(self) -> None:
        """The threads end (a running compaction first finishes)."""
        with self._lock:
            self.stop_locked()

    def stop_locked(self) -> None:
        self._stop = True
        self._bg_cv.notify_all()

    # ------------------------------------------------------------------ flush
    def flush(self) -> None:
        """Write every memtable entry that is durable now into one new segment per table, then
        atomically publish them in the manifest together with the new flushed LSN."""
        files, memtable = self._files, self._memtable
        with files.changing():
            with self._lock:
                upto = memtable.lsn
                if upto <= files.flushed_lsn:
                    self._last_flush = time.monotonic()
                    return
                # Every entry in the memtable is durable (appended together with its LSN).
                work = memtable.work()
                entries = self._catalog.current_locked.by_id()
                clustering = dict(self._clustering)
                # Upstream LSNs of the writes flushed now go into the manifest with them.
                marks = memtable.marks_upto(upto)
            new_segs: dict[int, SegmentMeta] = {}
            written: list[Path] = []
            try:
                for tid, ents in work.items():
                    entry = entries.get(tid)
                    if entry is None:
                        continue
                    table = entries_to_table(entry.schema, ents)
                    if table.num_rows == 0:
                        continue  # only empty writes
                    table_dir = self._catalog.table_dir(entry.schema.name)
                    table_dir.mkdir(parents=True, exist_ok=True)
                    # Sorted like compaction sorts (cheap at flush size), so a miss can skip
                    # row groups of fresh segments too once they are large.
                    new_segs[tid] = write_segment(
                        table_dir, table, clustering.get(entry.schema.name.lower(), ()),
                        self._tuning.row_group_rows)
                    written.append(table_dir / new_segs[tid].file)
                with self._lock:
                    manifest = files.copy_locked()
                for tid, seg in new_segs.items():
                    tm = manifest.tables.setdefault(tid, TableManifest())
                    tm.segments = tm.segments + (seg,)
                manifest.flushed_lsn = upto
                if marks:
                    manifest.upstream_lsn = max(marks + [manifest.upstream_lsn or 0])
                files.save(manifest)
            except BaseException:
                # E.g. the disk filled: the memtable and the log still hold every row, so
                # nothing is lost; remove the segments no manifest names, then retry later.
                files.discard_unpublished(written)
                raise
            with self._lock:
                files.publish_locked(manifest)
                memtable.flushed(work, upto)
                self.counters["flushes"] += 1
                self._last_flush = time.monotonic()
                self._bg_cv.notify_all()  # the compactor may now have work

    def truncate_wal(self) -> int:
        """Delete WAL files whose records are all in Parquet and in the (made durable) row
        index, and not held for checkpoint recovery (``hold_wal``)."""
        with self._lock:
            safe = min(self._files.flushed_lsn, self._indexer.lsn)
            if self._wal_hold is not None:
                safe = min(safe, self._wal_hold)
        return self._wal.truncate(safe, self._indexer.make_durable)

    # ------------------------------------------------------------------ compaction
    def compact_table(self, entry: TableEntry, *, tiered: bool = False) -> dict[str, Any]:
        """Merge the segments of one table with Spark, consolidating rows up to the horizon.

        Horizon H = flushed_lsn - retention_lsns, lowered to the oldest pinned snapshot, never
        above flushed_lsn and never below the table's current horizon. Reads as of LSNs >= H
        stay exact; older ones are refused from then on.

        All segments are merged into one, unless ``tiered`` (the background compactor): then
        the largest segment is left out while the others are small beside it
        (``tier_inputs``). Consolidating only some segments' rows up to H keeps every read as
        of >= H exact, as each read sums the diffs of all segments' rows with ``_lsn`` <= its
        LSN.
        """
        files = self._files
        if tiered:
            self._wait_for_spark()
        with self._compact_lock:
            t0 = time.monotonic()
            cluster_by = self.clustering(entry.schema.name)
            with self._lock:
                if not self._catalog.is_live(entry.id):
                    return _figures(0, 0, 0, 0, 0, t0)
                tm = files.table(entry.id)
                segs = tm.segments
                if tiered:
                    segs = tier_inputs(segs, cluster_by)
                flushed = files.flushed_lsn
                horizon = min(flushed - self._tuning.retention_lsns, flushed)
                doomed_early = files.drain_locked()  # leaked snapshots no longer pin
                oldest = files.oldest_pin_locked()
                if oldest is not None:
                    horizon = min(horizon, oldest)
                horizon = max(horizon, tm.horizon)
                table_dir = self._catalog.table_dir(entry.schema.name)
                paths = [str(table_dir / s.file) for s in segs]
                files.ref_locked(paths)  # keep the inputs alive while Spark reads them
            rows_before = sum(s.rows for s in segs)
            files.delete_files(doomed_early)
            try:
                # One segment already at the horizon is left alone, unless the views now want
                # it clustered otherwise than it is sorted (recorded in the manifest).
                resort = len(segs) == 1 and bool(cluster_by) and segs[0].sorted_by != cluster_by
                if not segs or (len(segs) == 1 and horizon == tm.horizon and not resort):
                    return _figures(len(segs), len(segs), rows_before, rows_before, tm.horizon,
                                    t0)
                with spark_guard(self._spark):  # Spark down: SparkDown, retried by the caller
                    new = spark_compact(self._spark, entry.schema, table_dir, segs, horizon,
                                        cluster_by=cluster_by,
                                        row_group_rows=self._tuning.row_group_rows)
                with files.changing():
                    with self._lock:
                        alive = self._catalog.is_live(entry.id)
                        manifest = files.copy_locked()
                    if not alive:
                        if new is not None:
                            os.unlink(table_dir / new.file)
                        return _figures(len(segs), 0, rows_before, 0, horizon, t0)
                    cur = manifest.tables.setdefault(entry.id, TableManifest())
                    rest = tuple(s for s in cur.segments if s not in segs)
                    cur.segments = ((new,) if new is not None else ()) + rest
                    cur.horizon = max(cur.horizon, horizon)
                    try:
                        files.save(manifest)
                    except BaseException:  # e.g. no space: the inputs stay, the output goes
                        files.discard_unpublished(
                            [table_dir / new.file] if new is not None else [])
                        raise
                    with self._lock:
                        files.publish_locked(manifest)
                        files.retire_locked(paths)
                        self.counters["compactions"] += 1
                rows_after = (new.rows if new else 0) + sum(s.rows for s in rest)
                log.info("compacted %s: %d -> %d segments, horizon %d", entry.schema.name,
                         len(segs) + len(rest), len(cur.segments), cur.horizon)
                return _figures(
                    len(segs) + len(rest),
                    len(cur.segments),
                    rows_before + sum(s.rows for s in rest),
                    rows_after,
                    cur.horizon,
                    t0,
                )
            finally:
                with self._lock:
                    files.unref_locked(paths)
                    doomed = files.collect_locked()
                files.delete_files(doomed)

    def _wait_for_spark(self) -> None:
        """The background compactor waits while Spark is down and being restarted (instead of
        failing, and logging so, every second); storage's shutdown ends the wait."""
        while not spark_up(self._spark):
            with self._lock:
                if self._stop:
                    return
                self._bg_cv.wait(0.5)

    # ------------------------------------------------------------------ the threads
    def run_flusher(self) -> None:
        space, memtable, wal, tuning = self._space, self._memtable, self._wal, self._tuning
        while True:
            with self._lock:
                while not self._stop:
                    due = self._last_flush + tuning.flush_interval - time.monotonic()
                    # Short of space, or with closed log files not yet deleted (the row index
                    # was behind at the last flush), come round even with nothing to flush:
                    # the log may be truncatable by now, which frees space. Otherwise a short
                    # episode that the flush alone ended would keep its flushed log files
                    # until the next write.
                    busy = memtable.rows or space.short or wal.file_count > 1
                    if memtable.rows >= tuning.flush_rows or (busy and due <= 0):
                        break
                    self._bg_cv.wait(timeout=max(due, 0.05) if busy else tuning.flush_interval)
                if self._stop:
                    return
            try:
                self.flush()
                if space.short:
                    # Short of space: start a new log file now, so the flushed records' file
                    # can be deleted instead of growing to wal_rotate_bytes beside its copy.
                    wal.maybe_rotate(force=True)
                self.truncate_wal()
                if space.short:
                    free = space.free_bytes()
                    with self._lock:
                        space.settle(free, self._queued_bytes(), memtable.nbytes)
            except Exception as err:  # e.g. no space: the memtable and the log keep every row
                delay = self._retries["flush"].failed(err)
                with self._lock:
                    self._bg_cv.wait_for(lambda: self._stop, timeout=delay)
                continue
            self._retries["flush"].succeeded()

    def run_compactor(self) -> None:
        files, tuning = self._files, self._tuning
        while True:
            with self._lock:
                if self._stop:
                    return
                counts = files.segment_counts()
                over = [e for e in self._catalog.current_locked.tables.values()
                        if counts.get(e.id, -1) > tuning.max_segments]
                if not over:
                    self._bg_cv.wait(timeout=max(tuning.flush_interval, 0.5))
                    continue
            for e in over:
                if self._stop:
                    return
                if not self._room_to_compact(e):
                    with self._lock:
                        self._bg_cv.wait_for(lambda: self._stop, timeout=2.0)
                    break
                try:
                    self.compact_table(e, tiered=True)
                except Exception as err:
                    delay = self._retries["compaction"].failed(err)
                    with self._lock:
                        self._bg_cv.wait_for(lambda: self._stop, timeout=delay)
                    break
                self._retries["compaction"].succeeded()

    def _room_to_compact(self, entry: TableEntry) -> bool:
        """Whether the disk has room for a copy of ``entry``'s segments (what a compaction
        writes before it deletes its inputs) beside the reserve and the next flush. A
        background compaction that cannot fit is not started: it would fill the disk, refuse
        writes while it runs, and fail anyway."""
        space = self._space
        with self._lock:
            segs = self._files.table(entry.id).segments
            tdir = self._catalog.table_dir(entry.schema.name)
            paths = [tdir / s.file for s in segs]
            flush = self._memtable.nbytes
        size = 0
        for f in paths:
            try:
                size += f.stat().st_size
            except OSError:
                pass
        free = space.free_bytes()
        need = size + flush + space.reserve
        if free >= need:
            if entry.id in space.deferred:
                space.deferred.discard(entry.id)
                log.info("background compaction of %s resumes: %s free", entry.schema.name,
                         fmt_bytes(free))
            return True
        if entry.id not in space.deferred:
            space.deferred.add(entry.id)
            log.warning("background compaction of %s waits for room: it needs about %s (a "
                        "copy of its segments, the next flush and the reserve), %s free",
                        entry.schema.name, fmt_bytes(need), fmt_bytes(free))
        return False


def _figures(seg_before: int, seg_after: int, rows_before: int, rows_after: int, horizon: int,
             t0: float) -> dict[str, Any]:
    return {
        "segments_before": seg_before,
        "segments_after": seg_after,
        "rows_before": rows_before,
        "rows_after": rows_after,
        "horizon": horizon,
        "seconds": round(time.monotonic() - t0, 3),
    }
