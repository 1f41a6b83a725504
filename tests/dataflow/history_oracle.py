"""Check thousands of reads against Spark SQL in one job per view.

Stress tests record every acknowledged write (LSN, table, rows, +1/-1) and every read
(view, key, LSN, rows). From the writes we build each base table's history as a Spark
DataFrame, then "the table as of LSN V" for every V a read reported, tagged with a column
``_at``; each view's SQL, written over those tagged tables (joins and groups carry
``_at``), answers every read in one Spark job. This oracle shares nothing with the
server: not its storage, not its snapshots, not its planner.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from oracle import norm
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


@dataclass
class Recorder:
    schemas: dict[str, str]  # table -> Spark DDL schema, e.g. "product string, user string"
    writes: list[tuple[int, str, list[tuple], int]] = field(
        default_factory=list
    )  # lsn, table, rows, sign
    reads: list[tuple[str, tuple, int, list[tuple]]] = field(default_factory=list)

    def write(self, lsn: int, table: str, rows: list[tuple], sign: int) -> None:
        self.writes.append((lsn, table, list(rows), sign))

    def read(self, view: str, key: tuple, lsn: int, rows: list[tuple]) -> None:
        self.reads.append((view, key, lsn, list(rows)))


def verify(spark: SparkSession, rec: Recorder, oracles: dict[str, tuple[str, int]],
           details: list[tuple] | None = None) -> tuple[int, list[str]]:
    """Check every recorded read. ``oracles`` maps view -> (SQL over ``{table}_at`` tables
    that outputs ``_at``, the key columns (``_k0``...) and then the view's columns, number
    of key columns). Returns (reads checked, mismatch descriptions); ``details`` collects
    (view, key, lsn, served rows, expected rows) of each mismatch."""
    hist: dict[str, list[tuple]] = defaultdict(list)
    for lsn, table, rows, sign in rec.writes:
        hist[table] += [tuple(r) + (lsn, sign) for r in rows]
    by_view: dict[str, list[tuple]] = defaultdict(list)
    for view, key, lsn, rows in rec.reads:
        by_view[view].append((key, lsn, rows))
    checked, bad = 0, []
    for view, reads in by_view.items():
        sql, nkey = oracles[view]
        ats = sorted({lsn for _, lsn, _ in reads})
        at_df = spark.createDataFrame([(a,) for a in ats], "_at bigint")
        for table, schema in rec.schemas.items():
            h = spark.createDataFrame(hist[table], f"{schema}, _lsn bigint, _diff bigint")
            cols = [c.split()[0] for c in schema.split(",")]
            as_of = (
                at_df.join(h, h["_lsn"] <= at_df["_at"])
                .groupBy("_at", *cols)
                .agg(F.sum("_diff").alias("_n"))
                .where("_n > 0")
                .withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_n"))))
                .drop("_n", "_copy")
            )
            as_of.createOrReplaceTempView(f"{table}_at")
        expected: dict[tuple, list[tuple]] = defaultdict(list)
        for r in spark.sql(sql).collect():
            expected[(r[0], tuple(r[1 : 1 + nkey]))].append(tuple(r[1 + nkey :]))
        for key, lsn, rows in reads:
            checked += 1
            want = expected.get((lsn, key), [])
            if norm(rows) != norm(want):
                bad.append(
                    f"{view} key {key!r} at LSN {lsn}: view {sorted(map(repr, rows))} != Spark "
                    f"{sorted(map(repr, want))}"
                )
                if details is not None:
                    details.append((view, key, lsn, rows, want))
    return checked, bad


def first(items: list[Any], n: int = 5) -> str:
    return "\n".join(items[:n])
