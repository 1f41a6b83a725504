"""A state's rows for a set of keys as one Spark plan over the base tables at a snapshot.

``state_frame`` compiles the state's whole subgraph, operator by operator
(``operator_plans``), over the snapshot's tables, with the keys traced down to base
columns as filters that storage pushes into the Parquet scan, and the exact key filter
on top. What it returns is what the dataflow expects of a runner (see
``partialflow.server.dataflow.runner``): a rows state's stream, or a grouped operator's
state rows.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from partialflow.operators.base import Row
from partialflow.server.dataflow.graph import Node
from partialflow.server.dataflow.materialize import trace
from partialflow.server.dataflow.state import State
from partialflow.server.errors import InvalidArgument
from partialflow.server.upquery.operator_plans import compile_output, compile_state

# Allowed values per column, per base node id: where the keys are pushed down.
BaseFilters = dict[int, dict[int, set]]

# Above this many keys a filter of literals costs more than the scan: PySpark makes a few
# Py4J round trips per literal (about 1 s per 1000 keys), so the keys go to Spark as one
# Arrow batch and a semi-join instead.
MANY_KEYS = 200


# The base scans a plan makes: (table, the filter pushed into its Parquet scan or None).
Scans = list[tuple[str, dict[str, list] | None]]


def state_frame(st: State, keys: set[Row], snapshot: Any, memo: dict[int, DataFrame],
                scans: Scans | None = None) -> DataFrame:
    """The rows of ``st`` for ``keys`` at ``snapshot`` (memo: node id -> its frame); each
    base table scan is appended to ``scans`` (for the per-miss footprint figure)."""
    node = st.node
    if st.kind == "grouped":
        op: Any = node.op
        below = trace(op, st.partial_cols, 0) if st.partial_cols else None
        # The key is pushed into parent 0 only; the other parents' scans are whole.
        filters = _base_filters(
            [(p, below if i == 0 else None) for i, p in enumerate(node.parents)], keys)
        df = compile_state(
            op, [subtree(p, snapshot, memo, filters, scans) for p in node.parents])
        groups = op.group_columns()
        cols = [groups.index(c) for c in st.partial_cols]
    else:
        side = 0 if node.view is not None else next(s for s, x in node.sides.items() if x is st)
        filters = _base_filters(
            [(node.parents[side], tuple(st.partial_cols) if st.partial_cols else None)], keys)
        df = subtree(node.parents[side], snapshot, memo, filters, scans)
        cols = list(st.partial_cols)
    if st.partial_cols:
        df = keep_keys(df, cols, keys)
    return df


def subtree(
    node: Node, snapshot: Any, memo: dict[int, DataFrame], filters: BaseFilters,
    scans: Scans | None = None,
) -> DataFrame:
    """The node's output rows at the snapshot, columns named _c0.._cN."""
    df = memo.get(node.nid)
    if df is None:
        if node.table is not None:
            # Keys traced down to base columns: storage filters the unflushed rows in
            # Python and pushes the filter into the Parquet scan. A superset is fine:
            # the exact key filter is applied on top.
            f = filters.get(node.nid)
            # (Not for many values: storage builds its filter literal by literal too.)
            names = {
                node.columns[c]: sorted(v, key=repr)
                for c, v in (f or {}).items()
                if len(v) <= MANY_KEYS
            } or None
            try:
                df = snapshot.table_df(node.table, filters=names)
            except InvalidArgument:  # a key of the wrong type: let Spark compare it
                names = None
                df = snapshot.table_df(node.table)
            if scans is not None:
                scans.append((node.table, names))
            df = df.toDF(*[f"_c{i}" for i in range(len(df.columns))])
        else:
            assert node.op is not None  # a node that is not a base table has an operator
            df = compile_output(
                node.op, [subtree(p, snapshot, memo, filters, scans) for p in node.parents]
            )
        memo[node.nid] = df
    return df


def _base_filters(starts: list[tuple[Node, tuple[int, ...] | None]], keys: set[Row]
                  ) -> BaseFilters:
    """Trace key columns down to base tables: per base node, allowed values per column.

    ``starts`` are the subtrees a plan compiles, each with the key columns traced into it
    (None: not traced). A base node's scan is compiled once however many paths reach it
    (``subtree``'s memo), so it is filtered only when every path carries the same filter.
    A self-join reaches one table twice, once through the key's side and once through
    the other; filtering that scan by the key would drop the other side's rows."""
    reached: dict[int, list[dict[int, set] | None]] = {}

    def walk(node: Node, cols: tuple[int, ...] | None) -> None:
        if node.table is not None:
            f: dict[int, set] | None = None
            if cols is not None:
                f = {}
                for i, c in enumerate(cols):  # two key columns on one base column: both
                    vals = {k[i] for k in keys if k[i] is not None}
                    f[c] = f[c] & vals if c in f else vals
            reached.setdefault(node.nid, []).append(f)
            return
        if node.op is None:
            return
        for p, parent in enumerate(node.parents):
            walk(parent, trace(node.op, cols, p))

    for node, cols in starts:
        walk(node, cols)
    return {nid: fs[0] for nid, fs in reached.items()
            if fs[0] is not None and all(f == fs[0] for f in fs)}


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
    arrays = [
        pa.array([k[i] for k in keys], type=to_arrow_type(f.dataType)) for i, f in enumerate(fields)
    ]
    return df.sparkSession.createDataFrame(
        pa.Table.from_arrays(arrays, names=[f.name for f in fields])
    )


def key_filter(cols: list[int], keys: set[Row]) -> Column:
    """rows whose columns ``cols`` equal one of ``keys`` (NULL keys never match, as in SQL)."""
    live = [k for k in keys if all(v is not None for v in k)]
    if not live:
        return F.lit(False)
    if len(cols) == 1:
        return F.col(f"_c{cols[0]}").isin([k[0] for k in live])
    conds = [
        reduce(
            lambda a, b: a & b, [F.col(f"_c{c}") == F.lit(v) for c, v in zip(cols, k, strict=True)]
        )
        for k in live
    ]
    return reduce(lambda a, b: a | b, conds)
