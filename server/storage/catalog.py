"""Catalog (tables, views) and manifest (Parquet segments, flushed LSN, horizons) files.

Both are small JSON documents replaced atomically: write a temp file, fsync it, rename it over
the old one, fsync the directory. A crash leaves either the old or the new version, never a mix.

Tables are identified internally by an integer id that is never reused, so the WAL records and
index tables of a dropped table can never be mistaken for those of a new table with its name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partialflow.server.storage.schema import TableSchema
from partialflow.server.storage.wal import fsync_dir


def atomic_write_json(path: Path, obj: Any) -> None:
    """Durably replace ``path`` with the JSON encoding of ``obj``."""
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(obj, indent=1, sort_keys=True).encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # e.g. no space: the old file stands, and no temp file is left
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _read_json(path: Path) -> Any | None:
    if not path.exists():
        return None
    return json.loads(path.read_text())


@dataclass
class TableEntry:
    id: int
    schema: TableSchema


@dataclass
class Catalog:
    next_id: int = 1
    tables: dict[str, TableEntry] = field(default_factory=dict)  # keyed by lower-cased name
    views: list[tuple[str, str]] = field(default_factory=list)  # creation order

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "next_id": self.next_id,
            "tables": [{"id": e.id, **e.schema.to_json()} for e in self.tables.values()],
            "views": [[n, s] for n, s in self.views],
        }

    @staticmethod
    def load(path: Path) -> Catalog:
        obj = _read_json(path)
        if obj is None:
            return Catalog()
        cat = Catalog(next_id=int(obj["next_id"]))
        for t in obj["tables"]:
            schema = TableSchema.from_json(t)
            cat.tables[schema.name.lower()] = TableEntry(int(t["id"]), schema)
        cat.views = [(n, s) for n, s in obj["views"]]
        return cat

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.to_json())

    def by_id(self) -> dict[int, TableEntry]:
        return {e.id: e for e in self.tables.values()}


@dataclass(frozen=True)
class SegmentMeta:
    file: str  # file name inside the table directory
    min_lsn: int
    max_lsn: int
    rows: int
    neg: bool  # holds a row with _diff < 0 (so reads must consolidate)
    max_diff: int  # largest _diff (> 1 after compaction merged duplicates)
    # The columns its rows are sorted by (clustering); () when unsorted. Compaction
    # rewrites a lone segment whose order is not the one the views now want.
    sorted_by: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "min_lsn": self.min_lsn,
            "max_lsn": self.max_lsn,
            "rows": self.rows,
            "neg": self.neg,
            "max_diff": self.max_diff,
        }
        if self.sorted_by:  # absent when unsorted: manifests without it read the same
            out["sorted_by"] = list(self.sorted_by)
        return out

    @staticmethod
    def from_json(o: dict[str, Any]) -> SegmentMeta:
        return SegmentMeta(
            o["file"], int(o["min_lsn"]), int(o["max_lsn"]), int(o["rows"]), bool(o["neg"]),
            int(o["max_diff"]), tuple(str(c) for c in o.get("sorted_by") or ()),
        )


@dataclass
class TableManifest:
    horizon: int = 0
    segments: tuple[SegmentMeta, ...] = ()


@dataclass
class Manifest:
    flushed_lsn: int = 0
    tables: dict[int, TableManifest] = field(default_factory=dict)  # keyed by table id
    # The largest upstream LSN of the writes up to flushed_lsn (None: none carried one);
    # the log holds those of later writes.
    upstream_lsn: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": 1,
            "flushed_lsn": self.flushed_lsn,
            "tables": {
                str(tid): {"horizon": tm.horizon, "segments": [s.to_json() for s in tm.segments]}
                for tid, tm in self.tables.items()
            },
        }
        if self.upstream_lsn is not None:
            out["upstream_lsn"] = self.upstream_lsn
        return out

    @staticmethod
    def load(path: Path) -> Manifest:
        obj = _read_json(path)
        if obj is None:
            return Manifest()
        m = Manifest(flushed_lsn=int(obj["flushed_lsn"]))
        if obj.get("upstream_lsn") is not None:
            m.upstream_lsn = int(obj["upstream_lsn"])
        for tid, t in obj["tables"].items():
            m.tables[int(tid)] = TableManifest(
                int(t["horizon"]), tuple(SegmentMeta.from_json(s) for s in t["segments"])
            )
        return m

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.to_json())

    def copy(self) -> Manifest:
        return Manifest(
            self.flushed_lsn,
            {tid: TableManifest(tm.horizon, tm.segments) for tid, tm in self.tables.items()},
            self.upstream_lsn,
        )
