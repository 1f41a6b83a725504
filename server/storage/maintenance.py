"""Flush (memtable -> Parquet), WAL truncation and compaction, as functions over a Storage.

They live apart from ``store.py`` to keep each module readable; they use the Storage's locks
in its documented order (ddl -> manifest -> storage lock).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partialflow.server.spark_supervisor import spark_guard, spark_up
from partialflow.server.storage.catalog import (
    Catalog,
    Manifest,
    SegmentMeta,
    TableEntry,
    TableManifest,
)
from partialflow.server.storage.segments import entries_to_table, spark_compact, write_segment

if TYPE_CHECKING:
    from partialflow.server.storage.store import Storage

log = logging.getLogger(__name__)


def flush(st: Storage) -> None:
    """Write every memtable entry that is durable now into one new segment per table, then
    atomically publish them in the manifest together with the new flushed LSN."""
    with st._manifest_lock:
        with st._lock:
            upto = st._durable_lsn
            if upto <= st._manifest.flushed_lsn:
                st._last_flush = time.monotonic()
                return
            # Every entry in the memtable is durable (appended together with _durable_lsn).
            work = {tid: list(ents) for tid, ents in st._mem.items() if ents}
            entries = st._catalog.by_id()
            clustering = dict(st._clustering)
            # Upstream LSNs of the writes flushed now go into the manifest with them.
            marks = [u for lsn, u in st._upstream_marks if lsn <= upto]
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
                table_dir = st._table_dir(entry.schema.name)
                table_dir.mkdir(parents=True, exist_ok=True)
                # Sorted like compaction sorts (cheap at flush size), so a miss can skip row
                # groups of fresh segments too once they are large.
                new_segs[tid] = write_segment(
                    table_dir, table, clustering.get(entry.schema.name.lower(), ()),
                    st.row_group_rows)
                written.append(table_dir / new_segs[tid].file)
            with st._lock:
                manifest = st._manifest.copy()
            for tid, seg in new_segs.items():
                tm = manifest.tables.setdefault(tid, TableManifest())
                tm.segments = tm.segments + (seg,)
            manifest.flushed_lsn = upto
            if marks:
                manifest.upstream_lsn = max(marks + [manifest.upstream_lsn or 0])
            manifest.save(st.manifest_path)
        except BaseException:
            # E.g. the disk filled: the memtable and the log still hold every row, so
            # nothing is lost; remove the segments no manifest names, then retry later.
            discard_unpublished(st, written)
            raise
        with st._lock:
            st._manifest = manifest
            st._upstream_marks = [(lsn, u) for lsn, u in st._upstream_marks if lsn > upto]
            for tid, ents in work.items():
                mem = st._mem.get(tid)
                if mem is not None:
                    del mem[: len(ents)]
                    st._mem_rows -= sum(e.batch.num_rows for e in ents)
                    st._mem_bytes -= sum(e.batch.nbytes for e in ents)
            st.counters["flushes"] += 1
            st._last_flush = time.monotonic()
            st._bg_cv.notify_all()  # the compactor may now have work


def discard_unpublished(st: Storage, files: Iterable[Path]) -> None:
    """Delete new segment files a failed flush or compaction wrote, unless the manifest on
    disk names them (its rename happened before the failure: recovery then owns them)."""
    files = list(files)
    if not files:
        return
    try:
        on_disk = Manifest.load(st.manifest_path)
        named = {s.file for tm in on_disk.tables.values() for s in tm.segments}
    except Exception:  # unreadable now: keep them, the next open removes what is unnamed
        log.warning("could not read %s; leaving %d new segment files for recovery",
                    st.manifest_path, len(files))
        return
    for path in files:
        if path.name not in named:
            path.unlink(missing_ok=True)


def truncate_wal(st: Storage) -> int:
    """Delete WAL files whose records are all in Parquet and in the (made durable) row index,
    and not held for checkpoint recovery (``Storage.wal_hold``)."""
    assert st._wal is not None and st._index is not None
    with st._lock:
        safe = min(st._manifest.flushed_lsn, st._index_lsn)
        if st.wal_hold is not None:
            safe = min(safe, st.wal_hold)
    with st._wal_lock:
        if not st._wal.coverable(safe):
            return 0
    with st._ddl_lock:
        st._index.make_durable()
    with st._wal_lock:
        return st._wal.delete_covered(safe)


def delete_files(st: Storage, paths: Iterable[str]) -> None:
    """Remove obsolete segment files; drop a table directory once its table is gone and empty."""
    parents = set()
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        parents.add(os.path.dirname(p))
    if not parents:
        return
    with st._lock:
        live = set(st._catalog.tables)
    for d in parents:
        if os.path.basename(d) not in live:
            try:
                os.rmdir(d)
            except OSError:
                pass


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


def compact_table(st: Storage, entry: TableEntry, *, tiered: bool = False) -> dict[str, Any]:
    """Merge the segments of one table with Spark, consolidating rows up to the horizon.

    Horizon H = flushed_lsn - retention_lsns, lowered to the oldest pinned snapshot, never
    above flushed_lsn and never below the table's current horizon. Reads as of LSNs >= H stay
    exact; older ones are refused from then on.

    All segments are merged into one, unless ``tiered`` (the background compactor): then
    the largest segment is left out while the others are small beside it (``tier_inputs``).
    Consolidating only some segments' rows up to H keeps every read as of >= H exact, as
    each read sums the diffs of all segments' rows with ``_lsn`` <= its LSN.
    """
    if tiered:
        _wait_for_spark(st)
    with st._compact_lock:
        t0 = time.monotonic()
        cluster_by = st.clustering(entry.schema.name)
        with st._lock:
            if entry.id not in st._live:
                return _figures(0, 0, 0, 0, 0, t0)
            tm = st._manifest.tables.get(entry.id) or TableManifest()
            segs = tm.segments
            if tiered:
                segs = tier_inputs(segs, cluster_by)
            flushed = st._manifest.flushed_lsn
            horizon = min(flushed - st.retention_lsns, flushed)
            doomed_early = st._drain_releases()  # leaked snapshots no longer pin
            if st._pins:
                horizon = min(horizon, *st._pins)
            horizon = max(horizon, tm.horizon)
            table_dir = st._table_dir(entry.schema.name)
            paths = [str(table_dir / s.file) for s in segs]
            for p in paths:  # keep the inputs alive while Spark reads them
                st._file_refs[p] += 1
        rows_before = sum(s.rows for s in segs)
        delete_files(st, doomed_early)
        try:
            # One segment already at the horizon is left alone, unless the views now want
            # it clustered otherwise than it is sorted (recorded in the manifest).
            resort = len(segs) == 1 and bool(cluster_by) and segs[0].sorted_by != cluster_by
            if not segs or (len(segs) == 1 and horizon == tm.horizon and not resort):
                return _figures(len(segs), len(segs), rows_before, rows_before, tm.horizon, t0)
            with spark_guard(st.spark):  # Spark down: SparkDown, retried by the caller
                new = spark_compact(st.spark, entry.schema, table_dir, segs, horizon,
                                    cluster_by=cluster_by, row_group_rows=st.row_group_rows)
            with st._manifest_lock:
                with st._lock:
                    alive = entry.id in st._live
                    manifest = st._manifest.copy()
                if not alive:
                    if new is not None:
                        os.unlink(table_dir / new.file)
                    return _figures(len(segs), 0, rows_before, 0, horizon, t0)
                cur = manifest.tables.setdefault(entry.id, TableManifest())
                rest = tuple(s for s in cur.segments if s not in segs)
                cur.segments = ((new,) if new is not None else ()) + rest
                cur.horizon = max(cur.horizon, horizon)
                try:
                    manifest.save(st.manifest_path)
                except BaseException:  # e.g. no space: the inputs stay, the output goes
                    discard_unpublished(st, [table_dir / new.file] if new is not None else [])
                    raise
                with st._lock:
                    st._manifest = manifest
                    st._obsolete.update(paths)
                    st.counters["compactions"] += 1
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
            with st._lock:
                for p in paths:
                    st._file_refs[p] -= 1
                    if st._file_refs[p] <= 0:
                        del st._file_refs[p]
                doomed = st._collect_unreferenced()
            delete_files(st, doomed)


def _wait_for_spark(st: Storage) -> None:
    """The background compactor waits while Spark is down and being restarted (instead of
    failing, and logging so, every second); storage's shutdown ends the wait."""
    while not spark_up(st.spark):
        with st._lock:
            if st._stop_bg:
                return
            st._bg_cv.wait(0.5)


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
