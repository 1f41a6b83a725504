"""Snapshots: a consistent, pinned view of every base table as of one LSN.

A Snapshot is built by ``Storage.snapshot`` under the storage lock: for each table it holds the
segment list of the manifest and the memtable entries with LSN <= V at that instant. While it
is open its LSN is pinned (compaction will not consolidate past it) and its segment files are
referenced (a compaction that replaces them deletes them only after the last reader closes).

DataFrames returned by ``table_df`` are lazy: run every action on them before closing the
snapshot, since the files they read may be deleted afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from partialflow.server.errors import FailedPrecondition, NotFound
from partialflow.server.storage.catalog import SegmentMeta
from partialflow.server.storage.footprint import Footprint, footprint
from partialflow.server.storage.schema import DIFF_COL, LSN_COL, TableSchema, coerce_filter_values
from partialflow.server.storage.segments import (
    MemEntry,
    arrow_filter_mask,
    entries_to_table,
    read_segments,
    spark_frame,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from partialflow.server.storage.files import FileSet


@dataclass(frozen=True)
class TableView:
    """What one snapshot sees of one table."""

    schema: TableSchema
    table_id: int
    horizon: int
    table_dir: Path
    segments: tuple[SegmentMeta, ...]
    mem: tuple[MemEntry, ...]

    def paths(self) -> list[str]:
        return [str(self.table_dir / s.file) for s in self.segments]


def consolidate(df: DataFrame, cols: Sequence[str], has_neg: bool, has_multi: bool) -> DataFrame:
    """Turn (columns, _lsn, _diff) rows into the bag of rows they denote.

    With any negative diff, rows must be grouped and their diffs summed (a delete cancels an
    insert stored elsewhere). Without one, every stored row stands for ``_diff`` >= 1 copies on
    its own, so the shuffle is skipped: append-only tables scan as cheaply as plain Parquet.
    """
    if has_neg:
        df = df.groupBy(*cols).agg(F.sum(DIFF_COL).alias(DIFF_COL)).filter(F.col(DIFF_COL) > 0)
        has_multi = True
    if not has_multi:
        return df.select(*cols)
    # One output row per copy: explode a 1..n sequence, then drop it.
    return df.select(
        *cols, F.explode(F.sequence(F.lit(1).cast("bigint"), F.col(DIFF_COL))).alias("_copy")
    ).select(*cols)


class Snapshot:
    """A pinned, consistent read view of all base tables as of ``lsn``."""

    def __init__(self, spark: SparkSession, files: FileSet, lsn: int,
                 tables: Mapping[str, TableView]) -> None:
        self.lsn = lsn
        self.spark = spark
        self._files = files  # told when the snapshot is released
        self._tables = dict(tables)  # keyed by lower-cased table name
        self._closed = False
        self._close_lock = threading.Lock()

    # -- public --------------------------------------------------------------------------------
    def table_names(self) -> list[str]:
        return sorted(v.schema.name for v in self._tables.values())

    def table_view(self, name: str) -> TableView:
        """The captured state of one table (NotFound naming the known tables)."""
        if self._closed:
            raise FailedPrecondition("snapshot is closed")
        tv = self._tables.get(str(name).lower())
        if tv is None:
            known = ", ".join(self.table_names()) or "(none)"
            raise NotFound(f"unknown table '{name}'; tables are: {known}")
        if self.lsn < tv.horizon:
            raise FailedPrecondition(
                f"as_of {self.lsn} is older than the retention horizon {tv.horizon} of table "
                f"{tv.schema.name}; the oldest readable LSN is {tv.horizon}"
            )
        return tv

    def table_df(self, name: str, filters: Mapping[str, Sequence[Any]] | None = None) -> DataFrame:
        """The table's rows as of ``self.lsn`` (bag semantics), typed as in its schema.

        ``filters`` maps column -> allowed values; a row is kept if every filtered column's
        value is one of them (None matches NULL). The filter is pushed into the Parquet scan
        and applied in Python to memtable rows before they are shipped to Spark.
        """
        tv = self.table_view(name)
        cols = list(tv.schema.column_names)
        df, has_neg, has_multi = self._stored(tv, filters)
        if df is None:
            return self.spark.createDataFrame([], tv.schema.spark_schema())
        return consolidate(df, cols, has_neg, has_multi)

    def table_df_with(self, name: str, unflushed: DataFrame, unflushed_neg: bool) -> DataFrame:
        """``table_df`` with ``unflushed`` (rows of the segment schema: columns, ``_lsn``,
        ``_diff``) in place of the table's unflushed rows; ``unflushed_neg``: whether they
        may hold deletes. The upquery plan cache keeps such a plan over the segments and
        swaps the unflushed part per fill."""
        tv = self.table_view(name)
        df, has_neg, has_multi = self._stored(replace(tv, mem=()), None)
        df = unflushed if df is None else df.unionByName(unflushed)
        return consolidate(df, list(tv.schema.column_names), has_neg or unflushed_neg, has_multi)

    def unflushed(self, name: str, filters: Mapping[str, Sequence[Any]] | None = None) -> pa.Table:
        """The table's unflushed rows up to ``self.lsn`` in the segment schema, filtered
        as ``table_df`` filters them."""
        tv = self.table_view(name)
        tbl = entries_to_table(tv.schema, tv.mem)
        resolved = [coerce_filter_values(tv.schema, c, v) for c, v in (filters or {}).items()]
        if resolved and tbl.num_rows:
            tbl = tbl.filter(arrow_filter_mask(tbl, resolved, tv.schema))
        return tbl

    def table_changes_df(
        self, name: str, filters: Mapping[str, Sequence[Any]] | None = None
    ) -> DataFrame:
        """The stored changes of the table up to ``self.lsn`` (its columns, then ``_lsn``
        and ``_diff``), not consolidated: the rows as of any LSN V from the oldest pinned
        one up to ``self.lsn`` are those with ``_lsn <= V``, diffs summed. One scan then
        answers reads at several pinned LSNs."""
        tv = self.table_view(name)
        df, _, _ = self._stored(tv, filters)
        if df is None:
            return self.spark.createDataFrame([], tv.schema.segment_spark_schema())
        return df.select(*tv.schema.column_names, LSN_COL, DIFF_COL)

    def footprint(
        self, name: str, filters: Mapping[str, Sequence[Any]] | None = None
    ) -> Footprint:
        """Row groups and bytes of the table's segments a scan with ``filters`` cannot skip
        by Parquet footer statistics (an estimate: see ``footprint.py``)."""
        tv = self.table_view(name)
        resolved = dict(coerce_filter_values(tv.schema, c, v) for c, v in (filters or {}).items())
        paths = [str(tv.table_dir / s.file) for s in tv.segments if s.min_lsn <= self.lsn]
        return footprint(paths, resolved)

    def _stored(
        self, tv: TableView, filters: Mapping[str, Sequence[Any]] | None
    ) -> tuple[DataFrame | None, bool, bool]:
        """Segment and memtable rows with LSN <= ``self.lsn`` (filtered), and whether any
        has a negative diff / a diff above 1."""
        schema = tv.schema
        resolved = [coerce_filter_values(schema, c, v) for c, v in (filters or {}).items()]
        spark = self.spark
        parts: list[DataFrame] = []
        has_neg = has_multi = False

        segs = [s for s in tv.segments if s.min_lsn <= self.lsn]
        if segs:
            df = read_segments(spark, schema, [str(tv.table_dir / s.file) for s in segs])
            if any(s.max_lsn > self.lsn for s in segs):
                df = df.filter(F.col(LSN_COL) <= self.lsn)
            cond = _spark_condition(resolved)
            if cond is not None:
                df = df.filter(cond)
            parts.append(df)
            has_neg = any(s.neg for s in segs)
            has_multi = any(s.max_diff > 1 for s in segs)

        if tv.mem:
            tbl = entries_to_table(schema, tv.mem)
            if resolved:
                tbl = tbl.filter(arrow_filter_mask(tbl, resolved, schema))
            if tbl.num_rows:
                parts.append(spark_frame(spark, tbl, schema.segment_spark_schema()))
                has_neg = has_neg or any(e.ndel for e in tv.mem)

        if not parts:
            return None, has_neg, has_multi
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        return df, has_neg, has_multi

    def close(self) -> None:
        """Unpin; idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._files.release(self.lsn, self._file_paths())

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A leaked snapshot must not pin compaction forever. Finalizers can run anywhere (even
        # in a thread holding the storage lock), so only queue the release: no locks here.
        if not getattr(self, "_closed", True):
            self._closed = True
            self._files.leaked(self.lsn, self._file_paths())

    # -- internal ------------------------------------------------------------------------------
    def _file_paths(self) -> list[str]:
        return [p for tv in self._tables.values() for p in tv.paths()]


def _spark_condition(resolved: Sequence[tuple[str, list[Any]]]) -> SparkColumn | None:
    cond: SparkColumn | None = None
    for col, values in resolved:
        non_null = [v for v in values if v is not None]
        c: SparkColumn
        if non_null:
            c = F.col(col).isin(non_null)
            if len(non_null) < len(values):
                c = c | F.col(col).isNull()
        elif values:
            c = F.col(col).isNull()
        else:
            c = F.lit(False)
        cond = c if cond is None else cond & c
    return cond
