"""How much of a table's segments a filtered scan can touch, estimated from Parquet footers.

For the key filter an upquery pushes into a scan, count the row groups (and their
compressed bytes) whose footer min/max statistics could hold one of the wanted values: the
row groups Spark's Parquet filter pushdown cannot skip. This is an *estimate* from the
footers, not Spark's own input metrics (Spark may still read footers, dictionary pages and
column chunks it then discards, and the memtable's unflushed rows are not counted here).
Segments are immutable, so each file's footer statistics are read once and cached.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from cachetools import LRUCache

# One footer summary per segment file; a few thousand files at most stay cached.
_CACHE_FILES = 4096


@dataclass(frozen=True)
class Footprint:
    row_groups_scanned: int = 0
    row_groups_total: int = 0
    bytes_scanned: int = 0
    bytes_total: int = 0

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(
            self.row_groups_scanned + other.row_groups_scanned,
            self.row_groups_total + other.row_groups_total,
            self.bytes_scanned + other.bytes_scanned,
            self.bytes_total + other.bytes_total,
        )


# Per row group: its compressed bytes and, per column, (min, max, has_nulls) or None when
# the footer has no usable statistics for it.
_Group = tuple[int, dict[str, tuple[Any, Any, bool] | None]]
_cache: LRUCache[str, list[_Group]] = LRUCache(maxsize=_CACHE_FILES)
_cache_lock = threading.Lock()


def _groups(path: str) -> list[_Group]:
    with _cache_lock:
        found = _cache.get(path)  # a hit makes the file recent
        if found is not None:
            return found
    meta = pq.ParquetFile(path).metadata
    names = meta.schema.names
    groups: list[_Group] = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        size = 0
        stats: dict[str, tuple[Any, Any, bool] | None] = {}
        for c in range(rg.num_columns):
            col = rg.column(c)
            size += col.total_compressed_size
            st = col.statistics
            if st is None or not st.has_min_max:
                stats[names[c]] = None
            else:
                stats[names[c]] = (st.min, st.max, bool(st.null_count))
        groups.append((size, stats))
    with _cache_lock:
        _cache[path] = groups
    return groups


def _may_match(stat: tuple[Any, Any, bool] | None, values: Sequence[Any]) -> bool:
    if stat is None:
        return True  # no statistics: nothing can be skipped
    lo, hi, nulls = stat
    for v in values:
        if v is None:
            if nulls:
                return True
            continue
        try:
            if lo <= v <= hi:
                return True
        except TypeError:  # a value the statistics can't be compared with: assume a match
            return True
    return False


def footprint(paths: Sequence[str], filters: Mapping[str, Sequence[Any]] | None) -> Footprint:
    """Row groups and compressed bytes of ``paths`` that a scan with ``filters`` (column ->
    allowed values, every column must match) cannot skip by footer statistics."""
    total = Footprint()
    for path in paths:
        try:
            groups = _groups(path)
        except OSError:  # compacted away meanwhile: the figure is only an estimate
            continue
        for size, stats in groups:
            hit = all(
                _may_match(stats.get(col, None), vals) if col in stats else True
                for col, vals in (filters or {}).items()
            )
            total = total + Footprint(int(hit), 1, size if hit else 0, size)
    return total
