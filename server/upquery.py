"""Upqueries: filling holes from the base tables with one Spark plan per fill.

A ``Fill`` is a set of (state, fill key) pairs filled together from one snapshot LSN V:
the state that missed plus every hole below it on its trace path. The executor decides
what goes into a fill and applies the reply in order; this module only turns a fill's
*root* states (those not derivable in Python from another state of the fill) into Spark
DataFrames over the base tables at V — the state's whole subgraph compiled operator by
operator, with the keys as filters that Spark pushes down — and runs them.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from partialflow.operators.base import Row
from partialflow.server.errors import InvalidArgument
from partialflow.server.graph import Node
from partialflow.server.spark_compile import compile_output, compile_state
from partialflow.server.state import State

log = logging.getLogger("partialflow.upquery")
_fids = itertools.count(1)


@dataclass(eq=False)
class Waiter:
    """A read blocked on misses; the executor delivers each key's rows and LSN."""

    keys: set[Row]
    results: dict[Row, tuple[list[Row], int]] = field(default_factory=dict)
    error: Exception | None = None
    event: threading.Event = field(default_factory=threading.Event)

    def deliver(self, key: Row, rows: list[Row], lsn: int) -> None:
        self.results[key] = (rows, lsn)
        if self.keys <= self.results.keys():
            self.event.set()

    def fail(self, error: Exception) -> None:
        self.error = error
        self.event.set()


@dataclass(eq=False)
class Fill:
    """One upquery in flight: what it fills, from which snapshot, and what it holds."""

    requester: State
    lsn: int
    keys: dict[State, set[Row]] = field(default_factory=dict)
    roots: list[State] = field(default_factory=list)
    waiters: dict[Row, list[Waiter]] = field(default_factory=dict)
    # Updates with LSN > self.lsn that met a pending key: (lsn, seq, fill key, item).
    held: list[tuple[int, int, Row, tuple]] = field(default_factory=list)
    cancelled: set[Row] = field(default_factory=set)
    fid: int = field(default_factory=lambda: next(_fids))
    started: float = field(default_factory=time.monotonic)
    dead: bool = False
    snapshot: Any = None
    _seq: itertools.count = field(default_factory=itertools.count)

    def hold(self, lsn: int, fk: Row, item: tuple) -> None:
        self.held.append((lsn, next(self._seq), fk, item))


class FaultInjector:
    """Test-only faults for Spark scans (off unless PARTIALFLOW_FAULTS is set or ``mode`` is set).

    Modes: "" (none), "fail" (raise), "hang" (block past any deadline), "slow:SECONDS".
    A hang or slow scan waits on a condition, so changing the mode wakes it at once: lifting
    a hang lets stuck upquery workers finish instead of piling up for an hour.
    """

    MODES = ("", "fail", "hang", "slow:SECONDS")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._mode = ""
        self.mode = os.environ.get("PARTIALFLOW_FAULTS", "")

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        mode = (mode or "").strip()
        if mode not in ("", "fail", "hang") and not _slow_seconds(mode):
            raise InvalidArgument(f"unknown fault mode {mode!r}; modes are {', '.join(repr(m) for m in self.MODES)}")
        with self._changed:
            self._mode = mode
            self._changed.notify_all()

    def before_scan(self) -> None:
        mode = self._mode
        if not mode:
            return
        if mode == "fail":
            raise RuntimeError("injected fault: Spark scan failed")
        seconds = 3600.0 if mode == "hang" else _slow_seconds(mode)
        with self._changed:
            self._changed.wait_for(lambda: self._mode != mode, timeout=seconds)


def _slow_seconds(mode: str) -> float:
    """The delay of a "slow:SECONDS" mode (0.0 if ``mode`` is not one)."""
    if not mode.startswith("slow:"):
        return 0.0
    try:
        seconds = float(mode.split(":", 1)[1])
    except ValueError:
        return 0.0
    return seconds if 0 < seconds < 86400 else 0.0


class UpqueryRunner:
    """Compiles a fill's root states to Spark and runs them on worker threads."""

    def __init__(self, spark: SparkSession, storage: Any, workers: int = 4) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.spark = spark
        self.storage = storage
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="upquery")
        self.faults = FaultInjector()
        self.jobs = 0

    def submit(self, fill: Fill, done: Callable[[Fill, dict[int, list[Row]] | None, Exception | None], None]) -> None:
        def run() -> None:
            try:
                results = self.run(fill)
            except Exception as e:  # the executor turns this into a clean read error
                log.warning("upquery %d failed: %s", fill.fid, str(e).splitlines()[0] if str(e) else e)
                done(fill, None, e)
            else:
                done(fill, results, None)
            finally:
                if fill.snapshot is not None:
                    fill.snapshot.close()

        self.pool.submit(run)

    def run(self, fill: Fill) -> dict[int, list[Row]]:
        """Rows of each root state for its keys, all from the fill's snapshot."""
        self.faults.before_scan()
        results: dict[int, list[Row]] = {}
        tag = f"partialflow-fill-{fill.fid}"
        _tag(self.spark, tag)
        try:
            for st in fill.roots:
                df = self.state_frame(st, fill.keys[st], fill.snapshot, {})
                self.jobs += 1
                results[st.sid] = [tuple(r) for r in df.collect()]
        finally:
            _untag(self.spark, tag)
        return results

    def cancel(self, fill: Fill) -> None:
        try:
            if hasattr(self.spark, "interruptTag"):
                self.spark.interruptTag(f"partialflow-fill-{fill.fid}")
        except Exception:  # best effort: the reply is ignored anyway
            pass

    # -- compiling -------------------------------------------------------------------------
    def state_frame(self, st: State, keys: set[Row], snapshot: Any, memo: dict[int, DataFrame]) -> DataFrame:
        node = st.node
        filters: dict[int, dict[int, set]] = {}
        if st.kind == "grouped":
            below = _trace(node.op, st.partial_cols, 0)
            if below is not None and st.partial_cols:
                _base_filters(node.parents[0], below, keys, filters)
            df = compile_state(node.op, [self.subtree(p, snapshot, memo, filters) for p in node.parents])
            groups = node.op.group_columns()
            cols = [groups.index(c) for c in st.partial_cols]
        else:
            side = 0 if node.view is not None else next(s for s, x in node.sides.items() if x is st)
            if st.partial_cols:
                _base_filters(node.parents[side], st.partial_cols, keys, filters)
            df = self.subtree(node.parents[side], snapshot, memo, filters)
            cols = list(st.partial_cols)
        if st.partial_cols:
            df = keep_keys(df, cols, keys)
        return df

    def subtree(self, node: Node, snapshot: Any, memo: dict[int, DataFrame], filters: dict[int, dict[int, set]]) -> DataFrame:
        """The node's output rows at the snapshot, columns named _c0.._cN."""
        df = memo.get(node.nid)
        if df is None:
            if node.table is not None:
                # Keys traced down to base columns: storage filters the unflushed rows in
                # Python and pushes the filter into the Parquet scan. A superset is fine:
                # the exact key filter is applied on top.
                f = filters.get(node.nid)
                # (Not for many values: storage builds its filter literal by literal too.)
                names = {node.columns[c]: sorted(v, key=repr) for c, v in (f or {}).items() if len(v) <= MANY_KEYS} or None
                try:
                    df = snapshot.table_df(node.table, filters=names)
                except InvalidArgument:  # a key of the wrong type: let Spark compare it
                    df = snapshot.table_df(node.table)
                df = df.toDF(*[f"_c{i}" for i in range(len(df.columns))])
            else:
                df = compile_output(node.op, [self.subtree(p, snapshot, memo, filters) for p in node.parents])
            memo[node.nid] = df
        return df

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _trace(op: Any, cols: tuple[int, ...], parent: int) -> tuple[int, ...] | None:
    out = []
    for c in cols:
        src = [pc for p, pc in op.resolve(c) if p == parent]
        if not src:
            return None
        out.append(src[0])
    return tuple(out)


def _base_filters(node: Node, cols: tuple[int, ...], keys: set[Row], out: dict[int, dict[int, set]]) -> None:
    """Trace key columns down to base tables: per base node, allowed values per column."""
    if node.table is not None:
        f = out.setdefault(node.nid, {})
        for i, c in enumerate(cols):
            vals = {k[i] for k in keys if k[i] is not None}
            f[c] = f[c] & vals if c in f else vals
        return
    if node.op is None:
        return
    for p, parent in enumerate(node.parents):
        mapped = _trace(node.op, cols, p)
        if mapped is not None:
            _base_filters(parent, mapped, keys, out)


# Above this many keys a filter of literals costs more than the scan: PySpark makes a few
# Py4J round trips per literal (about 1 s per 1000 keys), so the keys go to Spark as one
# Arrow batch and a semi-join instead.
MANY_KEYS = 200


def keep_keys(df: DataFrame, cols: list[int], keys: set[Row]) -> DataFrame:
    """``df``'s rows whose columns ``cols`` equal one of ``keys`` (NULL keys never match)."""
    live = [k for k in keys if all(v is not None for v in k)]
    if len(live) > MANY_KEYS:
        try:
            wanted = _keys_frame(df, cols, live)
        except Exception:  # a key the column's type can't hold: let Spark compare it
            wanted = None
        if wanted is not None:
            # A join USING columns puts them first: select restores the positions.
            return df.join(wanted, on=[f"_c{c}" for c in cols], how="left_semi").select(*df.columns)
    return df.filter(key_filter(cols, keys))


def _keys_frame(df: DataFrame, cols: list[int], keys: list[Row]) -> DataFrame:
    """The keys as a DataFrame with the key columns' names and types (one Arrow batch)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    fields = [df.schema[f"_c{c}"] for c in cols]
    arrays = [pa.array([k[i] for k in keys], type=to_arrow_type(f.dataType)) for i, f in enumerate(fields)]
    return df.sparkSession.createDataFrame(pa.Table.from_arrays(arrays, names=[f.name for f in fields]))


def key_filter(cols: list[int], keys: set[Row]) -> Column:
    """rows whose columns ``cols`` equal one of ``keys`` (NULL keys never match, as in SQL)."""
    keys = [k for k in keys if all(v is not None for v in k)]
    if not keys:
        return F.lit(False)
    if len(cols) == 1:
        return F.col(f"_c{cols[0]}").isin([k[0] for k in keys])
    conds = [reduce(lambda a, b: a & b, [F.col(f"_c{c}") == F.lit(v) for c, v in zip(cols, k)]) for k in keys]
    return reduce(lambda a, b: a | b, conds)


def _tag(spark: SparkSession, tag: str) -> None:
    try:
        spark.addTag(tag)
    except Exception:
        pass


def _untag(spark: SparkSession, tag: str) -> None:
    try:
        spark.removeTag(tag)
    except Exception:
        pass
