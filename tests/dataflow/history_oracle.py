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
    hist = {table: _intervals(rec.writes, table) for table in rec.schemas}
    by_view: dict[str, list[tuple]] = defaultdict(list)
    for view, key, lsn, rows in rec.reads:
        by_view[view].append((key, lsn, rows))
    checked, bad = 0, []
    for view, reads in by_view.items():
        sql, nkey = oracles[view]
        ats = sorted({lsn for _, lsn, _ in reads})
        at_df = F.broadcast(spark.createDataFrame([(a,) for a in ats], "_at bigint"))
        for table, schema in rec.schemas.items():
            h = spark.createDataFrame(
                hist[table], f"{schema}, _from bigint, _to bigint, _n bigint")
            as_of = (
                at_df.join(h, (h["_from"] <= at_df["_at"]) & (at_df["_at"] < h["_to"]))
                .withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_n"))))
                .drop("_from", "_to", "_n", "_copy")
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


def _intervals(writes: list[tuple[int, str, list[tuple], int]],
               table: str) -> list[tuple]:
    """``table``'s history as (row..., _from, _to, _n): the row is in the table ``_n`` times
    (its inserts minus its deletes up to then) for LSNs from ``_from`` up to, not including,
    ``_to``. The table as of LSN V is then the rows whose interval holds V: a join on a
    range, with no sum over the whole history per V (which grew with reads times writes)."""
    diffs: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for lsn, t, rows, sign in writes:
        if t == table:
            for r in rows:
                diffs[tuple(r)][lsn] += sign
    out = []
    for row, by_lsn in diffs.items():
        n, since = 0, 0
        for lsn in sorted(by_lsn):
            if by_lsn[lsn] == 0:
                continue  # deleted and inserted again at one LSN: no change
            if n > 0:
                out.append((*row, since, lsn, n))
            n, since = n + by_lsn[lsn], lsn
        if n > 0:
            out.append((*row, since, _FOREVER, n))
    return out


_FOREVER = 2**62  # the _to of a row still in the table


def first(items: list[Any], n: int = 5) -> str:
    return "\n".join(items[:n])
