"""Checking a finished run: every read against Spark, every write against the tables.

**Reads.** The run recorded every acknowledged write with its LSN, and the stress tables
are written by nobody else, so the history of each table is known exactly: each row
instance lives over an LSN interval [inserted, deleted). For one view, the LSNs its reads
reported become a small DataFrame ``_at``; joining it with a table's intervals
(``from <= _at < to``) gives ``{table}_at``, the table as of every one of those LSNs at
once, and the view's oracle SQL (workload.py) over those answers every (LSN, key) read in
one Spark job per view. The result is cut down to the (LSN, key) pairs actually read
before it is collected. Reads at LSNs between two writes to the view's tables see the same
data, so each read's LSN is first mapped to the last such write at or before it: fewer
snapshots, same answers. This oracle runs in a local Spark session in the stress process
and shares nothing with the server: not its storage, snapshots, planner or dataflow.

**Writes.** The final contents of every table, read through the server's own snapshot
query, must equal the recorded history folded up to that LSN; so must the contents at a
mid-run LSN. A row that is missing is an acknowledged insert that was lost, a row that is
there but should not be is a lost delete. This also shows that the history the read
oracle is built from is the server's truth, not just the client's belief.
"""

from __future__ import annotations

import bisect
import json
import random
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from partialflow.client.stress import workload as wl
from partialflow.client.stress.record import Read, Write
from partialflow.server.verifier import same_rows  # one comparison rule for both checkers

FOREVER = 2**62  # the "deleted at" LSN of a row instance that is still there


@dataclass
class Mismatch:
    read: Read
    effective_lsn: int  # the last write to the view's tables at or before read.lsn
    expected: list[tuple]


@dataclass
class Verdict:
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    seconds: float = 0.0
    jobs: int = 0
    snapshots: int = 0  # distinct (view, effective LSN) pairs evaluated
    lost: list[str] = field(default_factory=list)  # row differences vs recorded writes
    table_checks: list[int] = field(default_factory=list)  # LSNs the tables were checked at


def intervals(writes: list[Write]) -> dict[str, list[tuple]]:
    """Each table's row instances as ``(*row, inserted_lsn, deleted_lsn)`` (FOREVER if
    still there). Deletes within one write apply before its inserts, as the server does."""
    out: dict[str, list[tuple]] = defaultdict(list)
    alive: dict[str, dict[tuple, deque]] = defaultdict(lambda: defaultdict(deque))
    for w in sorted(writes, key=lambda w: w.lsn):
        for row in w.deletes:
            opened = alive[w.table][row]
            if not opened:  # the run's own bookkeeping is wrong: say so, don't guess
                raise ValueError(
                    f"write at LSN {w.lsn} deletes {row!r} from {w.table}, which no recorded write "
                    "inserted"
                )
            out[w.table].append((*row, opened.popleft(), w.lsn))
        for row in w.inserts:
            alive[w.table][row].append(w.lsn)
    for table, rows in alive.items():
        for row, opened in rows.items():
            out[table].extend((*row, lsn, FOREVER) for lsn in opened)
    return out


def rows_at(history: list[tuple], lsn: int) -> Counter:
    """The multiset of rows of one table's history as of ``lsn``."""
    return Counter(r[:-2] for r in history if r[-2] <= lsn < r[-1])


# -- writes ----------------------------------------------------------------------------------


def check_tables(client: Any, prefix: str, writes: list[Write], lsns: list[int]) -> list[str]:
    """Table contents via the server's snapshot query at each LSN vs the recorded writes.

    One query per LSN reads every table (rows as JSON, so tables of different columns fit
    in one UNION ALL): one Spark job instead of one per table."""
    history = intervals(writes)
    sql = " UNION ALL ".join(
        f"SELECT '{t}' AS t, to_json(struct(*)) AS r FROM {prefix}{t}" for t in wl.TABLES
    )
    problems: list[str] = []
    for lsn in lsns:
        got: dict[str, Counter] = defaultdict(Counter)
        for table, text in client.query(sql, as_of=lsn).rows:
            obj = json.loads(text)  # to_json leaves NULL fields out
            got[table][tuple(obj.get(c) for c in wl.columns(table))] += 1
        for table in wl.TABLES:
            want = rows_at(history[table], lsn)
            for row, n in (want - got[table]).items():
                by = [
                    w.lsn for w in writes if w.table == table and row in w.inserts and w.lsn <= lsn
                ]
                problems.append(
                    f"{table} at LSN {lsn}: {n} x {row!r} missing (inserted by the write(s) at LSN "
                    f"{by[-3:]})"
                )
            for row, n in (got[table] - want).items():
                by = [
                    w.lsn for w in writes if w.table == table and row in w.deletes and w.lsn <= lsn
                ]
                problems.append(
                    f"{table} at LSN {lsn}: {n} x {row!r} present but deleted (by the write(s) at "
                    f"LSN {by[-3:]})"
                )
    return problems


def table_check_lsns(writes: list[Write], final: int, rng: random.Random) -> list[int]:
    """The final LSN and one LSN from the middle of the load."""
    lsns = sorted({w.lsn for w in writes})
    if len(lsns) < 3:
        return [final]
    return [rng.choice(lsns[len(lsns) // 4 : 3 * len(lsns) // 4]), final]


# -- reads -------------------------------------------------------------------------------------


def verify_reads(
    spark: Any, reads: list[Read], writes: list[Write], views: list[wl.ViewSpec]
) -> Verdict:
    """Check every read against Spark over the recorded history: one job per view."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    verdict = Verdict()
    history = intervals(writes)
    frames: dict[str, Any] = {}

    def table_frame(table: str) -> Any:
        if table not in frames:
            schema = wl.TABLES[table][1]
            frames[table] = _frame(
                spark, history[table], f"{schema}, _from bigint, _to bigint"
            ).cache()
        return frames[table]

    by_view: dict[str, list[Read]] = defaultdict(list)
    for r in reads:
        by_view[r.view].append(r)
    for spec in views:
        mine = by_view.get(spec.name)
        if not mine or spec.oracle is None:
            continue
        changed = sorted({w.lsn for w in writes if w.table in spec.tables})
        effective = {r.lsn: _effective(changed, r.lsn) for r in mine}
        ats = sorted(set(effective.values()))
        verdict.snapshots += len(ats)
        at_df = F.broadcast(_frame(spark, [(a,) for a in ats], "_at bigint"))
        for table in spec.tables:
            h = table_frame(table)
            as_of = at_df.join(h, (h["_from"] <= at_df["_at"]) & (at_df["_at"] < h["_to"]))
            as_of.select("_at", *wl.columns(table)).createOrReplaceTempView(f"{table}_at")
        expected = _evaluate(spark, spec, mine, effective)
        verdict.jobs += 1
        for r in mine:
            verdict.checked += 1
            want = expected.get((effective[r.lsn], r.key), [])
            if not same_rows(r.rows, want):
                verdict.mismatches.append(Mismatch(r, effective[r.lsn], want))
    for df in frames.values():
        df.unpersist()
    verdict.seconds = time.monotonic() - t0
    return verdict


def _effective(changed: list[int], lsn: int) -> int:
    i = bisect.bisect_right(changed, lsn)
    return changed[i - 1] if i else 0


def _evaluate(
    spark: Any, spec: wl.ViewSpec, reads: list[Read], effective: dict[int, int]
) -> dict[tuple, list[tuple]]:
    """{(effective LSN, key): rows} for the (LSN, key) pairs read, from one Spark job."""
    n = spec.key_width
    oracle = spark.sql(spec.oracle)
    width = len(oracle.columns)
    names = ["_at", *[f"_k{i}" for i in range(n)], *[f"_v{i}" for i in range(width - 1 - n)]]
    oracle = oracle.toDF(*names)
    wanted = sorted({(effective[r.lsn], *r.key) for r in reads}, key=repr)
    key_schema = ", ".join(
        f"{f.name} {f.dataType.simpleString()}" for f in oracle.schema.fields[: 1 + n]
    )
    wanted_df = _frame(spark, wanted, key_schema)
    out: dict[tuple, list[tuple]] = defaultdict(list)
    for row in oracle.join(wanted_df, on=names[: 1 + n], how="left_semi").collect():
        out[(row[0], tuple(row[1 : 1 + n]))].append(tuple(row[1 + n :]))
    return out


_ARROW = {"string": "string", "bigint": "int64", "double": "float64", "boolean": "bool_"}


def _frame(spark: Any, rows: list[tuple], schema: str) -> Any:
    """A DataFrame of Python rows, shipped as one Arrow table: no Python worker processes,
    several times faster than ``createDataFrame(rows)`` on a cold JVM."""
    import pyarrow as pa

    fields = [f.split() for f in schema.split(",")]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(fields)
    table = pa.table(
        {
            name: pa.array(list(col), type=getattr(pa, _ARROW[kind])())
            for (name, kind), col in zip(fields, columns, strict=True)
        }
    )
    return spark.createDataFrame(table)
