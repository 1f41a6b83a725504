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

Unflushed (memtable) rows change with every write, and shipping them all to Spark
unfiltered would cost more than the per-key filtered copy ``state_frame`` sends. So a plan
for a snapshot with unflushed rows in a table is kept with an empty stand-in for them (a
JVM ``LocalRelation``, unioned with the segments where ``table_df`` unions the unflushed
rows); each fill filters the unflushed rows its keys can reach in Python, ships them as one
Arrow batch, and swaps them for the stand-in with one ``transformUp`` in the JVM. Profiling
misses under a 20 writes/s stream showed the plan rebuilt call by call taking about a third
of each miss. The swap needs the JVM's plan objects: through Spark Connect such fills are
built as before, and so are fills of more than ``MANY_KEYS`` keys (a semi-join with an
Arrow batch of keys).

Segments change too: under a steady write stream every table gets a new segment at each
flush (every second by default), so a plan keyed by its segment files was rebuilt for
nearly every miss (a trace under writes: every subscription refill's plan rebuilt, 1-2 s
of its 4-5 s on a loaded machine). So on a classic session a plan is keyed by the *shape*
of each table's segments (whether there are any, whether any has deletes or diffs above
1, where rows above the snapshot are cut) and keeps the scan leaves (``LogicalRelation``)
that read them; a fill whose snapshot has other segment files swaps in a scan of those
(the same schema, so the same output columns) in the same ``transformUp``. A table whose
scan leaves cannot all be told apart from the plan is keyed by its files, as before.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache
from pyspark.sql import DataFrame

from partialflow.operators.base import Row
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.state import State
from partialflow.server.errors import InvalidArgument
from partialflow.server.storage.segments import read_segments, spark_frame
from partialflow.server.upquery.state_plans import (
    MANY_KEYS,
    BaseFilters,
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
              scans: Scans | None = None, generation: int = 0,
              shape: dict[str, bool] | None = None, spark: Any = None) -> DataFrame:
        """``st``'s rows for ``keys`` at ``snapshot`` (what ``state_frame`` returns), with
        a plan built on the Spark session of ``generation`` (``spark``: needed to keep the
        plans of snapshots with unflushed rows). ``shape`` (for the profile)
        gets ``cached`` (the plan was kept from an earlier fill) and ``unflushed``."""
        shape = shape if shape is not None else {}
        nodes = [n for n in base_nodes(st) if n.table is not None]
        mem = {n.nid: snapshot.table_view(n.table).mem for n in nodes}
        shape["unflushed"] = any(mem.values())
        ident = _identity(st, snapshot, generation, _classic(spark)) if st.partial_cols else None
        if ident is None or len(keys) > MANY_KEYS:
            return state_frame(st, keys, snapshot, {}, scans)
        with self._lock:
            kept: Kept | None = self._plans.get(ident)
            if kept is not None:
                self.hits += 1
        shape["cached"] = kept is not None
        if kept is None:
            kept = _build(st, snapshot, nodes, mem, spark)
            if kept is None:  # no way to swap unflushed rows on this session
                return state_frame(st, keys, snapshot, {}, scans)
            with self._lock:
                self.misses += 1
                self._plans[ident] = kept
        filters = traced_filters(st, keys)
        if scans is not None:  # the figure: what the traced filters let each scan skip
            scans.extend((n.table, pushed_names(n, filters)) for n in nodes
                         if n.table is not None)
        if not kept.current(snapshot):  # a table's scans could not be told apart
            shape["cached"] = False
            kept = _build(st, snapshot, nodes, mem, spark)
            if kept is None:
                return state_frame(st, keys, snapshot, {}, scans)
            with self._lock:
                self.hits -= 1
                self.misses += 1
                self._plans[ident] = kept
        plan = kept.plan
        if kept.slots or kept.scans:
            plan = _swapped(kept, snapshot, {n.nid: n for n in nodes}, filters)
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


@dataclass(frozen=True)
class Kept:
    """A kept plan, and per base table with unflushed rows the empty stand-ins for them
    (the JVM ``LocalRelation`` leaves of the plan) that each fill swaps for its rows."""

    plan: DataFrame
    # (table, its base nodes, its stand-in leaves): the analyzer copies a leaf that a plan
    # reads twice (a self-join, a grouped state's candidates) under new attribute ids, so
    # a table's stand-ins are found in the analyzed plan by their schema, not by identity.
    slots: tuple[tuple[str, tuple[int, ...], tuple[Any, ...]], ...] = ()
    # (table, the segment files the plan was built over, its scan leaves of them); no
    # leaves: they could not be told apart, so only those very files can be read.
    scans: tuple[tuple[str, tuple[str, ...], tuple[Any, ...]], ...] = ()

    def current(self, snapshot: Any) -> bool:
        """Whether the plan can read ``snapshot``'s segments (as built, or swapped)."""
        return all(leaves or files == _files(snapshot, table)
                   for table, files, leaves in self.scans)


def _build(st: State, snapshot: Any, nodes: list[Node], mem: dict[int, tuple],
           spark: Any) -> Kept | None:
    """The state's plan over the snapshot's segments, with an empty stand-in for the
    unflushed rows of each base node that has some. None when they cannot be swapped:
    through Spark Connect (no JVM plan here), or two such tables of one schema."""
    memo: dict[int, DataFrame] = {}
    tables: dict[str, list[int]] = {}
    for n in nodes:
        if not mem[n.nid]:
            continue
        assert n.table is not None
        if not _classic(spark):  # Connect: no JVM here
            return None
        tv = snapshot.table_view(n.table)
        stand_in = spark.createDataFrame(tv.schema.segment_arrow_schema().empty_table(),
                                         schema=tv.schema.segment_spark_schema())
        neg = any(e.ndel for e in mem[n.nid])
        df = snapshot.table_df_with(n.table, stand_in, neg)
        memo[n.nid] = df.toDF(*[f"_c{i}" for i in range(len(df.columns))])
        tables.setdefault(n.table, []).append(n.nid)
    plan = state_base(st, snapshot, memo, {})
    classic = _classic(spark)
    if not tables and not classic:
        return Kept(plan)
    sigs = {snapshot.table_view(t).schema.segment_spark_schema().simpleString(): t
            for t in tables}
    if len(sigs) < len(tables):
        return None
    found: dict[str, list[Any]] = {t: [] for t in tables}
    # Each segment file read, by its path: a scan leaf belongs to the table whose files
    # it reads.
    owner = {path: n.table for n in nodes if n.table is not None
             for path in _paths(snapshot, n.table)}
    scans: dict[str, list[Any]] = {t: [] for t in owner.values()}
    strangers = False  # a scan leaf of files this snapshot does not name
    leaves = plan._jdf.queryExecution().analyzed().collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        kind = leaf.getClass().getSimpleName()
        if kind == "LocalRelation" and leaf.data().isEmpty():
            table = sigs.get(leaf.schema().simpleString())
            if table is not None:
                found[table].append(leaf)
        elif kind == "LogicalRelation" and classic:
            read = _leaf_files(leaf)
            tables_read = {owner.get(f) for f in read}
            if len(tables_read) == 1 and None not in tables_read:
                scans[tables_read.pop()].append(leaf)  # type: ignore[index]
            else:
                strangers = True
    kept_scans = tuple((t, _files(snapshot, t), () if strangers else tuple(ls))
                       for t, ls in scans.items())
    return Kept(plan, tuple((t, tuple(tables[t]), tuple(found[t])) for t in tables),
                kept_scans)


def _swapped(kept: Kept, snapshot: Any, nodes: dict[int, Node],
             filters: BaseFilters) -> DataFrame:
    """``kept.plan`` with each stand-in replaced by the snapshot's unflushed rows of its
    table that the fill's keys can reach (filtered in Python, as ``table_df`` does, when
    every node of the table is filtered alike; a superset is fine, the key filter on top
    is exact), and each scan of segments the snapshot no longer has by a scan of its
    segments: one ``transformUp`` in the JVM instead of building the plan again."""
    plan = kept.plan
    spark = plan.sparkSession
    jvm: Any = spark._jvm  # a classic session: _build kept no stand-in otherwise
    swaps = jvm.java.util.HashMap()
    for table, nids, leaves in kept.slots:
        pushed = [pushed_names(nodes[nid], filters) for nid in nids]
        try:
            tbl = snapshot.unflushed(table, pushed[0] if pushed.count(pushed[0]) == len(pushed)
                                     else None)
        except InvalidArgument:  # a key of the wrong type: let Spark compare it
            tbl = snapshot.unflushed(table)
        if not tbl.num_rows:
            continue  # the stand-ins are empty already
        rows = spark_frame(spark, tbl, snapshot.table_view(table).schema.segment_spark_schema())
        data = rows._jdf.queryExecution().analyzed().data()
        for leaf in leaves:
            swaps.put(leaf, leaf.copy(leaf.output(), data, leaf.isStreaming(), leaf.stream()))
    for table, files, leaves in kept.scans:
        if not leaves or files == _files(snapshot, table):
            continue  # Kept.current: those very files
        tv = snapshot.table_view(table)
        relation = read_segments(spark, tv.schema, _paths(snapshot, table)) \
            ._jdf.queryExecution().analyzed().relation()
        for leaf in leaves:
            swaps.put(leaf, _with_relation(leaf, relation))
    if swaps.isEmpty():
        return plan
    rule = jvm.scala.jdk.javaapi.CollectionConverters.asScala(swaps)  # a PartialFunction
    swapped = plan._jdf.queryExecution().analyzed().transformUp(rule)
    return DataFrame(_dataset_of(jvm, plan._jdf.sparkSession(), swapped), spark)


def _dataset_of(jvm: Any, jsession: Any, logical: Any) -> Any:
    try:
        return jvm.org.apache.spark.sql.classic.Dataset.ofRows(jsession, logical)  # Spark 4
    except Exception:  # noqa: BLE001 - Spark 3.5 has it here
        return jvm.org.apache.spark.sql.Dataset.ofRows(jsession, logical)


def _with_relation(leaf: Any, relation: Any) -> Any:
    """Scan leaf ``leaf`` reading ``relation`` (other files of the same schema) under its
    own output columns."""
    try:  # Spark 4: LogicalRelation(relation, output, catalogTable, isStreaming, stream)
        return leaf.copy(relation, leaf.output(), leaf.catalogTable(), leaf.isStreaming(),
                         leaf.stream())
    except Exception:  # noqa: BLE001 - Spark 3.5 has no stream
        return leaf.copy(relation, leaf.output(), leaf.catalogTable(), leaf.isStreaming())


def _leaf_files(leaf: Any) -> set[str]:
    """The files a ``LogicalRelation`` scan leaf reads (its file index's root paths, as
    local paths); empty when it is not a scan of listed files."""
    try:
        roots = leaf.relation().location().rootPaths()
        uris = [roots.apply(i).toUri() for i in range(roots.size())]
        return {u.getPath() for u in uris}
    except Exception:  # noqa: BLE001 - not a file scan: not ours to swap
        return set()


def _classic(spark: Any) -> bool:
    """Whether ``spark`` is a classic (Py4J) session, whose plans can be swapped into; not
    Spark Connect, and not absent."""
    return spark is not None and hasattr(spark, "_jsparkSession")


def _segments(snapshot: Any, table: str) -> list[Any]:
    """The table's segments a read at ``snapshot`` scans."""
    tv = snapshot.table_view(table)
    return [s for s in tv.segments if s.min_lsn <= snapshot.lsn]


def _files(snapshot: Any, table: str) -> tuple[str, ...]:
    return tuple(s.file for s in _segments(snapshot, table))


def _paths(snapshot: Any, table: str) -> list[str]:
    tv = snapshot.table_view(table)
    return [str(tv.table_dir / s.file) for s in _segments(snapshot, table)]


def _identity(st: State, snapshot: Any, generation: int, swappable: bool) -> Hashable | None:
    """What the state's unfiltered plan depends on: each base table's segments (their
    files; ``swappable``: only what shapes the plan over them, as other files are swapped
    in), where rows above the snapshot are cut, its schema, and whether it has unflushed
    rows (their plan has a stand-in for them) that may delete (then rows are
    consolidated by grouping)."""
    parts: list[Hashable] = [st.sid, generation]
    for node in base_nodes(st):
        assert node.table is not None  # base_nodes gives base table nodes only
        tv = snapshot.table_view(node.table)
        segs = _segments(snapshot, node.table)
        cut = snapshot.lsn if any(s.max_lsn > snapshot.lsn for s in segs) else None
        unflushed = (bool(tv.mem), any(e.ndel for e in tv.mem))
        stored: Hashable = (
            (bool(segs), any(s.neg for s in segs), any(s.max_diff > 1 for s in segs))
            if swappable else tuple(s.file for s in segs))
        parts.append((node.nid, tv.table_id, tv.schema, stored, cut, unflushed))
    return tuple(parts)


def key_filter_sql(cols: list[int], keys: set[Row]) -> str | None:
    """SQL for: columns ``_c{cols}`` equal one of ``keys`` (NULL keys never match). Each
    literal has the type ``F.lit`` gives the same Python value, so Spark compares (and
    coerces) exactly as ``key_filter`` would. None if a value has no literal here.

    Spark inlines an ``=`` or short ``IN`` literal into the Java code it generates for a
    query, so every new key compiled the whole stage again (Janino; the largest part of a
    small miss after the job itself). A list with a NULL in it is ``IN``'s own: with
    ``spark.sql.optimizer.inSetConversionThreshold`` at 1 (``server/spark.py``) the
    optimizer makes it an ``InSet``, whose values the generated code reads from a set
    object, so one compiled stage serves every key; Parquet still gets the values pushed
    down. In a filter, ``c IN (v, NULL)`` keeps exactly the rows ``c = v`` keeps (else it
    is NULL or false). Floating keys keep ``=``, whose NaN and -0.0 rules a set need not
    share."""
    live = [k for k in keys if all(v is not None for v in k)]
    if not live:
        return "false"
    try:
        # ", NULL" keeps Spark from inlining the literal (one compiled stage for every key);
        # float keys keep the plain form.
        tail = "" if any(isinstance(v, float) for k in live for v in k) else ", NULL"
        if len(cols) == 1:
            return f"_c{cols[0]} IN ({', '.join(sql_literal(k[0]) for k in live)}{tail})"
        return " OR ".join(
            "(" + " AND ".join(f"_c{c} IN ({sql_literal(v)}{tail})"
                               for c, v in zip(cols, k, strict=True)) + ")"
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
