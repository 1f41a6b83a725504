"""Compiled upquery plans kept per state, with each fill's keys bound as one SQL filter.

Building a state's plan with the DataFrame API costs one Py4J round trip per call (every
``select``, ``F.col``, ``isin`` literal, ...), and the JVM re-analyses the growing plan at
each step: profiling a quick-size ``max_visit`` miss showed that construction taking about
as long as the Spark job itself. So a state's plan is built once, *without* its keys, over
the base tables as a snapshot sees them, and kept; each fill adds its keys as one filter
given as SQL text (one round trip, however many keys). Spark's optimizer pushes that
filter down through the operators to the same base columns ``traced_filters`` would have
filtered (grouping columns, join sides, union branches), so the Parquet scans prune row
groups as before; the rows are the same, since the filter on top is exact either way.

A kept plan is only valid for the very same base data: it is keyed by each base table's
segment files, whether rows above the snapshot's LSN must be cut off (and where), and its
schema, and by the Spark session's generation (a plan is a graph of JVM objects of the
session it was built on: after Spark is restarted, ``spark_supervisor``, ``clear`` drops
the old ones and the generation keeps a plan built during the switch from being reused).
A snapshot with unflushed (memtable) rows in any of the state's tables is not
cached: those rows change with every write, and shipping them all to Spark unfiltered
would cost more than the per-key filtered copy ``state_frame`` sends. Such fills, and
fills of more than ``MANY_KEYS`` keys (a semi-join with an Arrow batch of keys), are
built as before.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from typing import Any

from cachetools import LRUCache
from pyspark.sql import DataFrame

from partialflow.operators.base import Row
from partialflow.server.dataflow.state import State
from partialflow.server.upquery.state_plans import (
    MANY_KEYS,
    Scans,
    base_nodes,
    keep_keys,
    key_columns,
    pushed_names,
    state_base,
    state_frame,
    traced_filters,
)

# Plans kept at most (each is a small JVM object graph; the least recently used goes).
PLANS = 256


class PlanCache:
    """Per (state, base data) the state's whole plan without a key filter."""

    def __init__(self, size: int = PLANS) -> None:
        self.size = size
        self._plans: LRUCache = LRUCache(maxsize=size)  # the least recently used goes
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def frame(self, st: State, keys: set[Row], snapshot: Any,
              scans: Scans | None = None, generation: int = 0) -> DataFrame:
        """``st``'s rows for ``keys`` at ``snapshot`` (what ``state_frame`` returns), with
        a plan built on the Spark session of ``generation``."""
        ident = _identity(st, snapshot, generation) if st.partial_cols else None
        if ident is None or len(keys) > MANY_KEYS:
            return state_frame(st, keys, snapshot, {}, scans)
        with self._lock:
            plan = self._plans.get(ident)
            if plan is not None:
                self.hits += 1
        if plan is None:
            plan = state_base(st, snapshot, {}, {})
            with self._lock:
                self.misses += 1
                self._plans[ident] = plan
        if scans is not None:  # the figure: what the traced filters let each scan skip
            filters = traced_filters(st, keys)
            scans.extend((n.table, pushed_names(n, filters))
                         for n in base_nodes(st) if n.table is not None)
        text = key_filter_sql(key_columns(st), keys)
        if text is None:  # a key no SQL literal spells: compare it as before
            return keep_keys(plan, key_columns(st), keys)
        return plan.filter(text)

    def clear(self) -> None:
        """Forget every plan (their Spark session is gone)."""
        with self._lock:
            self._plans.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"plans_cached": len(self._plans), "plan_cache_hits": self.hits,
                    "plan_cache_misses": self.misses}


def _identity(st: State, snapshot: Any, generation: int) -> Hashable | None:
    """What the state's unfiltered plan depends on, or None when it must not be kept."""
    parts: list[Hashable] = [st.sid, generation]
    for node in base_nodes(st):
        assert node.table is not None  # base_nodes gives base table nodes only
        tv = snapshot.table_view(node.table)
        if tv.mem:
            return None
        segs = [s for s in tv.segments if s.min_lsn <= snapshot.lsn]
        cut = snapshot.lsn if any(s.max_lsn > snapshot.lsn for s in segs) else None
        parts.append((node.nid, tv.table_id, tv.schema, tuple(s.file for s in segs), cut))
    return tuple(parts)


def key_filter_sql(cols: list[int], keys: set[Row]) -> str | None:
    """SQL for: columns ``_c{cols}`` equal one of ``keys`` (NULL keys never match). Each
    literal has the type ``F.lit`` gives the same Python value, so Spark compares (and
    coerces) exactly as ``key_filter`` would. None if a value has no literal here."""
    live = [k for k in keys if all(v is not None for v in k)]
    if not live:
        return "false"
    try:
        if len(cols) == 1:
            return f"_c{cols[0]} IN ({', '.join(sql_literal(k[0]) for k in live)})"
        return " OR ".join(
            "(" + " AND ".join(f"_c{c} = {sql_literal(v)}" for c, v in zip(cols, k, strict=True))
            + ")"
            for k in live
        )
    except TypeError:
        return None


_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def sql_literal(v: Any) -> str:
    """A Spark SQL literal of ``v`` typed as ``F.lit(v)`` types it (INT, BIGINT, DOUBLE,
    STRING, BOOLEAN); TypeError for anything else."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if _INT32[0] <= v <= _INT32[1]:
            return str(v)
        if _INT64[0] <= v <= _INT64[1]:
            return f"{v}L"
        raise TypeError("integer out of BIGINT range")
    if isinstance(v, float):
        if math.isnan(v):
            text = "NaN"
        elif math.isinf(v):
            text = "Infinity" if v > 0 else "-Infinity"
        else:
            text = repr(v)
        return f"CAST('{text}' AS DOUBLE)"
    if isinstance(v, str):
        # Spark unescapes backslash sequences in string literals: escape the backslash
        # itself and the quote; every other character stands for itself.
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise TypeError(f"no SQL literal for {type(v).__name__}")
