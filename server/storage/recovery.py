"""Opening a data directory: load catalog and manifest, clean up, replay the WAL.

Invariants that make replay exact (every acknowledged write once, none twice):

- The manifest's ``flushed_lsn`` F says every record with LSN <= F is in a published segment
  and no record above F is: WAL records > F go back into the memtable, the rest are skipped.
- The row index's meta LSN I is committed in the same sqlite transaction as the rows it
  covers, and the index only ever receives durable records: WAL records > I are re-applied.
- WAL files are deleted only once all their records are <= min(F, I) and the index has been
  checkpointed and fsynced, so the records recovery needs are always in the log. If the index
  is nevertheless behind the log's start (or unreadable), it is rebuilt from the segments.
- Files not referenced by the manifest (segments of an interrupted flush or compaction, temp
  files, directories of dropped tables) are deleted.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from partialflow.server.errors import FailedPrecondition
from partialflow.server.storage.catalog import Catalog, Manifest, TableEntry
from partialflow.server.storage.ddl import table_dir
from partialflow.server.storage.record import TxRecord, WriteRecord
from partialflow.server.storage.rowindex import RowIndex, key_hashes, row_hashes
from partialflow.server.storage.schema import DIFF_COL
from partialflow.server.storage.segments import MemEntry
from partialflow.server.storage.wal import META_TABLE, WalWriter, decode_upstream, read_wal

log = logging.getLogger(__name__)


def decode_batch(body: memoryview, schema: pa.Schema) -> pa.RecordBatch:
    # Copy into a fresh buffer: Arrow wants its IPC bodies 8-byte aligned, a slice of the
    # file bytes need not be; it also lets the file's bytes be freed.
    return pa.ipc.read_record_batch(pa.py_buffer(bytes(body)), schema)


def batch_rows(batch: pa.RecordBatch) -> list[tuple]:
    if batch.num_rows == 0:
        return []
    return list(zip(*[c.to_pylist() for c in batch.columns], strict=True))


@dataclass(frozen=True)
class Layout:
    """Where a data directory keeps what (server/storage/README.md, Files)."""

    data_dir: Path

    @property
    def tables_dir(self) -> Path:
        return self.data_dir / "tables"

    @property
    def wal_dir(self) -> Path:
        return self.data_dir / "wal"

    @property
    def catalog_path(self) -> Path:
        return self.data_dir / "catalog.json"

    @property
    def manifest_path(self) -> Path:
        return self.data_dir / "manifest.json"

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index.sqlite"


@dataclass
class Recovered:
    """What a data directory holds once opened: the parts the storage is built from."""

    catalog: Catalog
    manifest: Manifest
    index: RowIndex
    mem: dict[int, list[MemEntry]]  # per table id: the log's records after the flushed LSN
    upstream_lsn: int | None  # largest committed (manifest and log)
    upstream_marks: list[tuple[int, int]]  # (LSN, upstream LSN) of writes not yet flushed
    last_lsn: int  # the durable LSN; the row index is at it too
    wal: WalWriter


def recover(layout: Layout, wal_rotate_bytes: int) -> Recovered:
    """Open the data directory: load catalog and manifest, clean up, replay the log into
    the memtable and the row index (called by ``Storage.open``)."""
    for d in (layout.data_dir, layout.tables_dir, layout.wal_dir):
        d.mkdir(parents=True, exist_ok=True)
    for leftover in (layout.catalog_path, layout.manifest_path):
        leftover.with_name(leftover.name + ".tmp").unlink(missing_ok=True)
    catalog = Catalog.load(layout.catalog_path)
    manifest = Manifest.load(layout.manifest_path)
    by_id = catalog.by_id()
    stale = [tid for tid in manifest.tables if tid not in by_id]
    for tid in stale:
        del manifest.tables[tid]
    if stale:
        manifest.save(layout.manifest_path)
    _clean_table_dirs(layout.tables_dir, catalog, manifest)

    index = _open_index(layout.index_path)
    for tid in index.table_ids() - set(by_id):
        index.drop(tid)
    for e in by_id.values():
        index.create(e.id, bool(e.schema.primary_key))
    index_lsn = index.lsn
    flushed = manifest.flushed_lsn

    mem: dict[int, list[MemEntry]] = {tid: [] for tid in by_id}
    arrow_schemas = {tid: e.schema.arrow_schema() for tid, e in by_id.items()}
    last = flushed
    first_wal: int | None = None
    index_ok = True
    replayed = 0
    upstream = manifest.upstream_lsn
    marks: list[tuple[int, int]] = []  # (LSN, upstream LSN) of writes not yet flushed
    index.begin()
    for rec in read_wal(layout.wal_dir):
        if first_wal is None:
            first_wal = rec.lsn
            if rec.lsn > flushed + 1:
                raise FailedPrecondition(
                    f"write-ahead log starts at LSN {rec.lsn} but only LSNs up to {flushed} are "
                    "in Parquet; acknowledged writes are missing, refusing to open"
                )
            index_ok = rec.lsn <= index_lsn + 1
        last = max(last, rec.lsn)
        if rec.table_id == META_TABLE:
            u = decode_upstream(rec.body)
            if u is not None:
                upstream = max(upstream or 0, u)
                if rec.lsn > flushed:
                    marks.append((rec.lsn, u))
            continue
        entry = by_id.get(rec.table_id)
        if entry is None or (rec.lsn <= flushed and rec.lsn <= index_lsn):
            continue  # a dropped table's write, or one already everywhere
        batch = decode_batch(rec.body, arrow_schemas[rec.table_id])
        if rec.lsn > flushed:
            mem[rec.table_id].append(MemEntry(rec.lsn, rec.ndel, batch))
        if rec.lsn > index_lsn and index_ok:
            _apply_to_index(index, entry, batch, rec.ndel)
        replayed += 1
    if first_wal is None and index_lsn < last:
        index_ok = False  # index older than everything, and no log left to catch it up from
    if index_lsn > last:
        # The index saw writes that are in neither the log nor Parquet (a damaged log lost
        # its tail): its counts would include rows that do not exist.
        index_ok = False
    if index_ok:
        index.commit(last)
    else:
        index.rollback()
        log.warning("row index (LSN %d) cannot be caught up from the log; rebuilding it", index_lsn)
        _rebuild_index(layout.tables_dir, index, by_id, manifest, mem, last)

    wal = WalWriter(layout.wal_dir, last + 1, wal_rotate_bytes)
    log.info("storage open at %s: LSN %d (flushed %d, %d WAL records replayed)",
             layout.data_dir, last, flushed, replayed)
    return Recovered(catalog, manifest, index, mem, upstream, marks, last, wal)


def _apply_to_index(index: RowIndex, entry: TableEntry, batch: pa.RecordBatch, ndel: int) -> None:
    rows = batch_rows(batch)
    hashes = row_hashes(rows)
    pk = entry.schema.primary_key
    if not pk:
        index.apply(entry.id, hashes[ndel:], hashes[:ndel])
        return
    keys = key_hashes(rows, entry.schema)
    state: dict[bytes, bytes | None] = dict.fromkeys(keys[:ndel])
    state.update(zip(keys[ndel:], hashes[ndel:], strict=True))
    index.apply_keys(
        entry.id, [(k, h) for k, h in state.items() if h is not None],
        [k for k, h in state.items() if h is None],
    )


def _open_index(path: Path) -> RowIndex:
    try:
        index = RowIndex(path)
        index.writer.execute("PRAGMA quick_check").fetchall()
        return index
    except sqlite3.DatabaseError:
        log.warning("row index %s is unreadable; it will be rebuilt", path, exc_info=True)
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        index = RowIndex(path)
        index.writer.execute("UPDATE meta SET v = -1 WHERE k = 'lsn'")  # force a rebuild
        return index


def _rebuild_index(
    tables_dir: Path, index: RowIndex, by_id: dict[int, TableEntry], manifest: Manifest,
    mem: dict[int, list[MemEntry]], last: int,
) -> None:
    """Recompute the row index from the Parquet segments plus the replayed memtable."""
    for tid in index.table_ids():
        index.drop(tid)
    index.begin()
    for tid, e in by_id.items():
        index.create(tid, bool(e.schema.primary_key))
        counts: Counter[bytes] = Counter()
        key_of: dict[bytes, bytes] = {}
        pk = e.schema.primary_key
        tm = manifest.tables.get(tid)
        tdir = table_dir(tables_dir, e.schema.name)
        sources: list[tuple[list[tuple], list[int]]] = []
        for seg in tm.segments if tm else ():
            t = pq.read_table(tdir / seg.file)
            data = t.select(list(e.schema.column_names))
            sources.append((batch_rows(data), t[DIFF_COL].to_pylist()))
        for m in mem.get(tid, []):
            n = m.batch.num_rows
            sources.append((batch_rows(m.batch), [-1] * m.ndel + [1] * (n - m.ndel)))
        for rows, diffs in sources:
            hashes = row_hashes(rows)
            for h, d in zip(hashes, diffs, strict=True):
                counts[h] += d
            if pk:
                for h, k in zip(hashes, key_hashes(rows, e.schema), strict=True):
                    key_of[h] = k
        if pk:
            index.apply_keys(tid, [(key_of[h], h) for h, n in counts.items() if n > 0], [])
        else:
            index.apply(tid, [h for h, n in counts.items() for _ in range(n)], [])  # per copy
    index.commit(last)


def _clean_table_dirs(tables_dir: Path, catalog: Catalog, manifest: Manifest) -> None:
    wanted: dict[str, set[str]] = {}
    for e in catalog.tables.values():
        files = wanted.setdefault(e.schema.name.lower(), set())
        tm = manifest.tables.get(e.id)
        if tm is not None:
            files.update(s.file for s in tm.segments)
    for d in tables_dir.iterdir():
        if d.name not in wanted:
            log.info("removing leftover directory %s", d)
            _remove(d)
            continue
        for f in d.iterdir():
            if f.name in wanted[d.name]:
                continue
            log.info("removing unreferenced file %s", f)
            _remove(f)
    for name in wanted:
        (tables_dir / name).mkdir(exist_ok=True)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def log_records(wal_dir: Path, by_id: dict[int, TableEntry], after: int, upto: int,
                ) -> Iterator[WriteRecord | TxRecord]:
    """The writes after ``after`` up to ``upto`` as subscribers got them (a WriteRecord, or a
    TxRecord for a write over several tables or none), read back from the log
    (``Storage.log_records``). Their rows decode exactly as the committer delivered them:
    per table, deletes first, then inserts, from the same Arrow batch."""
    schemas = {tid: (e.schema.name, e.schema.arrow_schema()) for tid, e in by_id.items()}
    expect = after + 1
    parts: list[WriteRecord] = []
    tables = 0  # frames of the current write that name a table (dropped ones too)
    upstream: int | None = None
    for rec in read_wal(wal_dir, repair=False):
        if rec.lsn <= after:
            continue
        if rec.lsn > upto:
            break
        if rec.lsn != expect:
            raise FailedPrecondition(
                f"the write-ahead log no longer holds LSN {expect} (it starts at {rec.lsn})"
            )
        if rec.table_id == META_TABLE:
            upstream = decode_upstream(rec.body)
        else:
            tables += 1
            named = schemas.get(rec.table_id)
            if named is not None:  # else a dropped table's write
                rows = batch_rows(decode_batch(rec.body, named[1]))
                diffs = (-1,) * rec.ndel + (1,) * (len(rows) - rec.ndel)
                parts.append(WriteRecord(rec.lsn, named[0], tuple(rows), diffs))
        if rec.more:
            continue
        expect = rec.lsn + 1
        if tables == 1:
            if parts:
                yield parts[0]
        else:
            yield TxRecord(rec.lsn, tuple(parts), upstream)
        parts, tables, upstream = [], 0, None
    if expect <= upto:
        raise FailedPrecondition(
            f"the write-ahead log ends before LSN {expect}; LSNs up to {upto} are durable"
        )
