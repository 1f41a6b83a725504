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
    filters = traced_filters(st, keys)
    df = state_base(st, snapshot, memo, filters, scans)
    if st.partial_cols:
        df = keep_keys(df, key_columns(st), keys)
    return df


def traced_filters(st: State, keys: set[Row]) -> BaseFilters:
    """The keys traced down to base columns: per base node, allowed values per column (a
    superset filter: the exact key filter goes on top)."""
    node = st.node
    if not st.partial_cols:
        return {}
    if st.kind == "grouped":
        below = trace(node.op, st.partial_cols, 0)  # type: ignore[arg-type]
        # The key is pushed into parent 0 only; the other parents' scans are whole.
        return _base_filters(
            [(p, below if i == 0 else None) for i, p in enumerate(node.parents)], keys)
    return _base_filters([(node.parents[_input_of(st)], tuple(st.partial_cols))], keys)


def key_columns(st: State) -> list[int]:
    """Where the state's fill key sits in the frame ``state_base`` returns."""
    if st.kind == "grouped":
        op: Any = st.node.op  # a grouped state's node has a grouped operator
        groups = op.group_columns()
        return [groups.index(c) for c in st.partial_cols]
    return list(st.partial_cols)


def state_base(st: State, snapshot: Any, memo: dict[int, DataFrame], filters: BaseFilters,
               scans: Scans | None = None) -> DataFrame:
    """All of ``st``'s rows at ``snapshot`` (no key filter on top), with ``filters``
    pushed into the base scans: a grouped operator's state rows, or a rows state's
    stream."""
    node = st.node
    if st.kind == "grouped":
        op: Any = node.op
        return compile_state(
            op, [subtree(p, snapshot, memo, filters, scans) for p in node.parents])
    return subtree(node.parents[_input_of(st)], snapshot, memo, filters, scans)


def _input_of(st: State) -> int:
    """The parent whose stream a rows state holds (a reader's only one, a join side's)."""
    node = st.node
    return 0 if node.view is not None else next(s for s, x in node.sides.items() if x is st)


def base_nodes(st: State) -> list[Node]:
    """The base table nodes ``state_base`` scans, each once, in scan order."""
    roots = st.node.parents if st.kind == "grouped" else [st.node.parents[_input_of(st)]]
    seen: set[int] = set()
    out: list[Node] = []

    def walk(n: Node) -> None:
        if n.nid in seen:
            return
        seen.add(n.nid)
        if n.table is not None:
            out.append(n)
        for p in n.parents:
            walk(p)

    for r in roots:
        walk(r)
    return out


def pushed_names(node: Node, filters: BaseFilters) -> dict[str, list] | None:
    """The filter ``subtree`` pushes into ``node``'s scan: column name -> values."""
    f = filters.get(node.nid)
    # (Not for many values: storage builds its filter literal by literal too.)
    return {
        node.columns[c]: sorted(v, key=repr)
        for c, v in (f or {}).items()
        if len(v) <= MANY_KEYS
    } or None


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
            names = pushed_names(node, filters)
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
