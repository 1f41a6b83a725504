"""Immutable Parquet segments: writing them from the memtable (pyarrow) and merging them (Spark).

A segment holds the table's columns plus ``_lsn`` (the write that produced the row) and
``_diff`` (+1 insert, -1 delete; after compaction the net count of a consolidated row).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from partialflow.server.storage.catalog import SegmentMeta
from partialflow.server.storage.schema import DIFF_COL, LSN_COL, TableSchema
from partialflow.server.storage.wal import fsync_dir


@dataclass(frozen=True)
class MemEntry:
    """One durable write of one table, waiting in the memtable: deletes first, then inserts."""

    lsn: int
    ndel: int
    batch: pa.RecordBatch


def segment_name(min_lsn: int, max_lsn: int) -> str:
    return f"seg-{min_lsn:020d}-{max_lsn:020d}-{uuid.uuid4().hex}.parquet"


def entries_to_table(schema: TableSchema, entries: Sequence[MemEntry]) -> pa.Table:
    """Memtable entries as one Arrow table with ``_lsn`` and ``_diff`` columns."""
    seg_schema = schema.segment_arrow_schema()
    if not entries:
        return seg_schema.empty_table()
    data = pa.Table.from_batches([e.batch for e in entries], schema=schema.arrow_schema())
    sizes = [e.batch.num_rows for e in entries]
    lsn = np.repeat(np.array([e.lsn for e in entries], dtype=np.int64), sizes)
    diff = np.ones(len(lsn), dtype=np.int64)
    start = 0
    for e, n in zip(entries, sizes, strict=True):
        if e.ndel:
            diff[start : start + e.ndel] = -1
        start += n
    return pa.Table.from_arrays(
        list(data.columns) + [pa.array(lsn), pa.array(diff)], schema=seg_schema
    )


def spark_frame(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """Every row of ``table`` as a Spark DataFrame of ``schema``.

    PySpark ships an Arrow table to the JVM as a stream of its record batches, and the JVM
    side stops at an empty batch that follows others: measured on PySpark 4.3.0, batches
    of 2, 0 and 1 rows came back as 2 rows, with no error. The unflushed rows of a table
    are such a table (one batch per write, filtered per fill), so a read before the next
    flush silently lost every write after an empty one (found by the protocol fuzz test:
    a transaction whose changes to a table cancel out). Empty batches are dropped first
    (no copy)."""
    batches = table.to_batches()
    if any(not b.num_rows for b in batches):
        table = pa.Table.from_batches([b for b in batches if b.num_rows], schema=table.schema)
    return spark.createDataFrame(table, schema=schema)


def arrow_filter_mask(table: pa.Table, filters: Sequence[tuple[str, list]], schema: TableSchema):
    """Boolean mask: every filter column's value is among its allowed values (None matches NULL)."""
    types = dict(zip(schema.column_names, schema.arrow_schema().types, strict=True))
    mask = None
    for col, values in filters:
        m = pc.is_in(table[col], value_set=pa.array(values, type=types[col]), skip_nulls=False)
        mask = m if mask is None else pc.and_(mask, m)
    return mask


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(
    table_dir: Path,
    table: pa.Table,
    cluster_by: Sequence[str] = (),
    row_group_rows: int | None = None,
) -> SegmentMeta:
    """Write ``table`` (segment schema) as a new durable Parquet segment in ``table_dir``,
    sorted by ``cluster_by`` (order within a segment carries no meaning: reads sum diffs
    per row), in row groups of at most ``row_group_rows`` rows."""
    sorted_by: tuple[str, ...] = ()
    if cluster_by:
        try:
            table = table.sort_by([(c, "ascending") for c in cluster_by])
            sorted_by = tuple(cluster_by)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, KeyError):
            pass  # a column type Arrow can't sort: the order is only an optimisation
    lsn = table[LSN_COL]
    diff = table[DIFF_COL]
    min_lsn, max_lsn = int(pc.min(lsn).as_py()), int(pc.max(lsn).as_py())
    name = segment_name(min_lsn, max_lsn)
    tmp = table_dir / (name + ".tmp")
    try:
        pq.write_table(table, tmp, row_group_size=row_group_rows)
        _fsync_file(tmp)
        os.replace(tmp, table_dir / name)
    except BaseException:  # e.g. the disk filled mid-file: leave no half-written file
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(table_dir)
    return SegmentMeta(
        name, min_lsn, max_lsn, table.num_rows, bool(pc.min(diff).as_py() < 0),
        int(pc.max(diff).as_py()), sorted_by,
    )


def _diff_range(path: Path) -> tuple[int, int, int]:
    """(rows, min _diff, max _diff) of a Parquet file, from its footer statistics if present."""
    meta = pq.ParquetFile(path).metadata
    rows = meta.num_rows
    if rows == 0:
        return 0, 0, 0
    col = meta.schema.names.index(DIFF_COL)
    lo: int | None = None
    hi: int | None = None
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(col).statistics
        if st is None or not st.has_min_max:
            diffs = pq.read_table(path, columns=[DIFF_COL])[DIFF_COL]
            return rows, int(pc.min(diffs).as_py()), int(pc.max(diffs).as_py())
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return rows, int(lo), int(hi)  # type: ignore[arg-type]


def read_segments(spark: SparkSession, schema: TableSchema, paths: Sequence[str]) -> DataFrame:
    """Spark DataFrame over segment files; the explicit schema skips footer inference."""
    return spark.read.schema(schema.segment_spark_schema()).parquet(*paths)


# Row groups of a compacted segment: at most this many rows (and at most ROW_GROUP_BYTES
# buffered). Sorted by the clustering columns, a miss on one key reads the one or two row
# groups whose min/max can hold it; Spark's Parquet pushdown skips the rest from the footer.
# 64Ki rows is a few MB of decoded data per miss, while a 50M-row table still has under
# 800 row groups (footers of a few hundred KB), and groups stay big enough to compress well.
ROW_GROUP_ROWS = 1 << 16
ROW_GROUP_BYTES = 8 << 20


def spark_compact(
    spark: SparkSession,
    schema: TableSchema,
    table_dir: Path,
    inputs: Sequence[SegmentMeta],
    horizon: int,
    cluster_by: Sequence[str] = (),
    row_group_rows: int = ROW_GROUP_ROWS,
) -> SegmentMeta | None:
    """Merge ``inputs`` into one segment, consolidating rows with ``_lsn <= horizon``.

    Consolidated rows get ``_lsn = horizon`` and ``_diff`` = their net count (zeros dropped: an
    insert and its delete both older than the horizon cancel). Newer rows are copied as they
    are, so every read as of an LSN >= horizon sees exactly what it saw before. Returns the
    new segment, or None if nothing survives.

    ``cluster_by`` (table columns, most used first) sorts the merged rows: only their order
    in the file changes, never the rows, their ``_lsn`` or their ``_diff`` (every read sums
    diffs per row, so order within a segment carries no meaning).
    """
    cols = list(schema.column_names)
    df = read_segments(spark, schema, [str(table_dir / s.file) for s in inputs])
    old = (
        df.filter(F.col(LSN_COL) <= horizon)
        .groupBy(*cols)
        .agg(F.sum(DIFF_COL).alias(DIFF_COL))
        .filter(F.col(DIFF_COL) != 0)
        .select(*cols, F.lit(horizon).cast("bigint").alias(LSN_COL), DIFF_COL)
    )
    new = df.filter(F.col(LSN_COL) > horizon)
    tmp_dir = table_dir / f"_tmp-compact-{uuid.uuid4().hex}"
    try:
        # One file, but several row groups: Spark splits a scan of a big segment by row
        # group, so both cores (or a cluster) share it.
        merged = old.unionByName(new).coalesce(1)
        if cluster_by:
            merged = merged.sortWithinPartitions(*cluster_by)
        (
            merged.write.option("parquet.block.size", ROW_GROUP_BYTES)
            .option("parquet.block.row.count.limit", int(row_group_rows))
            .parquet(str(tmp_dir))
        )
        parts = sorted(
            p for p in tmp_dir.iterdir() if p.name.startswith("part-") and p.suffix == ".parquet"
        )
        min_lsn = min(s.min_lsn for s in inputs)
        max_lsn = max(s.max_lsn for s in inputs)
        total, lo, hi = 0, 0, 0
        part = None
        for p in parts:
            rows, plo, phi = _diff_range(p)
            if rows == 0:
                continue
            if part is not None:  # coalesce(1) makes one file; guard anyway
                raise RuntimeError(f"compaction of {schema.name} produced several part files")
            part, total, lo, hi = p, rows, plo, phi
        if part is None:
            return None
        name = segment_name(min_lsn, max_lsn)
        _fsync_file(part)
        os.replace(part, table_dir / name)
        fsync_dir(table_dir)
        return SegmentMeta(name, min_lsn, max_lsn, total, lo < 0, hi, tuple(cluster_by))
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
