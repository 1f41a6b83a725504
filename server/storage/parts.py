"""The parts an open storage is made of, wired from what recovery opened.

Construction order follows the dependencies (no part is wired after it is built): the catalog
first (everything asks it about tables), then the file set, memtable, log and row indexer,
admission (checks against the indexer, LSNs), maintenance (memtable -> file set), the
committer (admission -> log -> memtable -> subscribers -> indexer) and the DDL across them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from partialflow.server.errors import InvalidArgument
from partialflow.server.storage.admitter import Admission
from partialflow.server.storage.committer import Committer, Subscriber
from partialflow.server.storage.ddl import Ddl, TableCatalog
from partialflow.server.storage.files import FileSet
from partialflow.server.storage.indexer import RowIndexer
from partialflow.server.storage.maintenance import Maintenance, Tuning
from partialflow.server.storage.memtable import Memtable
from partialflow.server.storage.recovery import Layout, Recovered
from partialflow.server.storage.snapshot import TableView
from partialflow.server.storage.space import Backoff, DiskSpace
from partialflow.server.storage.wal import Wal


@dataclass
class Parts:
    """The objects of an open storage. ``_locked`` methods: call with the storage lock."""

    space: DiskSpace
    catalog: TableCatalog
    files: FileSet
    memtable: Memtable
    wal: Wal
    indexer: RowIndexer
    admission: Admission
    committer: Committer
    maintenance: Maintenance
    ddl: Ddl

    def snapshot_locked(self, lsn: int | None) -> tuple[int, dict[str, TableView]]:
        """Pin every table's segments and memtable entries as of ``lsn`` (None: the last
        durable LSN); returns the LSN and the views, per lower-cased table name."""
        files, memtable = self.files, self.memtable
        files.note_leaks_locked()
        last = memtable.lsn
        v = last if lsn is None else lsn
        if v < 0 or v > last:
            raise InvalidArgument(f"as_of {v} is out of range: the last durable LSN is {last}")
        views = {}
        paths: list[str] = []
        for low, e in self.catalog.current_locked.tables.items():
            tm = files.table(e.id)
            tv = TableView(e.schema, e.id, tm.horizon, self.catalog.table_dir(e.schema.name),
                           tm.segments, memtable.upto(e.id, v))
            views[low] = tv
            paths.extend(tv.paths())
        files.pin_locked(v, paths)
        return v, views

    def stats_locked(self) -> dict[str, Any]:
        """The parts' figures for ``Storage.stats`` (keys documented there)."""
        files, wal = self.files, self.wal
        files.note_leaks_locked()
        tables = self.catalog.current_locked.tables.values()
        return {
            "lsn": self.memtable.lsn,
            "flushed_lsn": files.flushed_lsn,
            "index_lsn": self.indexer.lsn,
            "horizon": {e.schema.name: files.table(e.id).horizon for e in tables},
            "segments": {e.schema.name: len(files.table(e.id).segments) for e in tables},
            "memtable_rows": self.memtable.rows,
            "flushes": self.maintenance.counters["flushes"],
            "compactions": self.maintenance.counters["compactions"],
            "fsyncs": wal.fsyncs,
            "wal_bytes": wal.total_bytes,
            "wal_files": wal.file_count,
            "pinned_snapshots": files.pinned,
            **self.space.stats(),
        }


def wire(rec: Recovered, space: DiskSpace, lock: threading.Lock, tuning: Tuning,
         layout: Layout, spark: SparkSession, *, counters: Counter[str],
         retries: Mapping[str, Backoff], wal_hold: int | None,
         subscribers: list[Subscriber], check_open: Callable[[], None],
         is_open: Callable[[], bool]) -> Parts:
    """Build the parts around the shared storage lock from what recovery opened;
    ``check_open`` / ``is_open``: the storage's state, as admission checks it per write."""
    catalog = TableCatalog(lock, layout.catalog_path, layout.tables_dir, rec.catalog)
    files = FileSet(lock, layout.manifest_path, rec.manifest, catalog.names)
    memtable = Memtable(rec.mem, rec.last_lsn, rec.upstream_marks)
    wal = Wal(rec.wal)
    indexer = RowIndexer(lock, rec.index, rec.last_lsn, retries["index"],
                         catalog.is_live, catalog.keyed_ids)
    admission = Admission(lock, rec.last_lsn + 1, catalog=catalog, indexer=indexer,
                          memtable=memtable, space=space,
                          tuning=tuning,
                          check_open=check_open, is_open=is_open)
    maintenance = Maintenance(
        lock, spark, tuning, catalog=catalog, files=files, memtable=memtable, wal=wal,
        indexer=indexer, space=space, counters=counters, retries=retries, wal_hold=wal_hold,
        clustering={}, queued_bytes=lambda: admission.pending_bytes)
    committer = Committer(lock, wal, admission=admission, memtable=memtable, indexer=indexer,
                          catalog=catalog, upstream_lsn=rec.upstream_lsn,
                          subscribers=subscribers, on_grown=maintenance.grown_locked)
    ddl = Ddl(lock, catalog, indexer, memtable, files, admission.check_space_locked)
    return Parts(space, catalog, files, memtable, wal, indexer, admission, committer,
                 maintenance, ddl)
