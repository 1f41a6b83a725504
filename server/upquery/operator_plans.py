"""Each operator as a Spark plan, for upqueries.

``compile_output(op, parents)`` is the operator's whole output computed from its parents'
DataFrames: the same rows ``on_input`` would have produced had every parent row arrived
as an insert. ``compile_state(op, parents)`` is, for grouped operators, the rows their
``load_entries`` turns into entries: group columns first (``_c0.._c{g-1}`` in
``group_columns()`` order, so the upquery layer can filter them by key), then what the
entries need. Every DataFrame here, in and out, has columns ``_c0..`` in order.

Dispatch is by operator class through the two registries below, one small function per
operator. State row layouts (the contract with each operator's ``load_entries``):

    Aggregate  group values..., row count, per aggregate its accumulators (aggfuncs.py):
               COUNT_STAR none; COUNT non-null count; SUM/AVG non-null count, finite sum,
               special counts;
               MIN/MAX non-null count, array<struct<value, multiplicity>> of the best
               ``candidates`` distinct values (all when None). Always one row for a
               global aggregate, even over no input.
    TopK       group values..., row..., multiplicity, group row count: the best
               ``candidates`` distinct rows of each group (all when None).
    Distinct   row..., count.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from partialflow.operators.aggregate import Aggregate, AggSpec
from partialflow.operators.base import Operator
from partialflow.operators.distinct import Distinct
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.operators.replicate import Replicate
from partialflow.operators.topk import TopK
from partialflow.operators.union import Union
from partialflow.server.errors import InvalidArgument

Compiler = Callable[[Any, list[DataFrame]], DataFrame]
_OUTPUT: dict[type, Compiler] = {}
_STATE: dict[type, Compiler] = {}


def compile_output(op: Operator, parents: list[DataFrame]) -> DataFrame:
    """The operator's output rows (columns ``_c0..``) computed from its parents'."""
    return _dispatch(_OUTPUT, "output", op)(op, parents)


def compile_state(op: Operator, parents: list[DataFrame]) -> DataFrame:
    """A grouped operator's state rows, group columns first (see the module doc)."""
    return _dispatch(_STATE, "state", op)(op, parents)


def _dispatch(table: dict[type, Compiler], what: str, op: Operator) -> Compiler:
    fn = table.get(type(op))
    if fn is None:
        raise InvalidArgument(f"no Spark {what} plan for operator {op.description()}")
    return fn


def _registers(table: dict[type, Compiler], cls: type) -> Callable[[Compiler], Compiler]:
    def register(fn: Compiler) -> Compiler:
        table[cls] = fn
        return fn

    return register


def _c(i: int) -> Column:
    return F.col(f"_c{i}")


def _positional(df: DataFrame) -> DataFrame:
    """Rename whatever columns ``df`` has to ``_c0..`` in order."""
    return df.toDF(*[f"_c{i}" for i in range(len(df.columns))])


def _width(df: DataFrame) -> int:
    return len(df.columns)


# -- stateless operators ----------------------------------------------------------------
@_registers(_OUTPUT, Filter)
def _filter(op: Filter, parents: list[DataFrame]) -> DataFrame:
    # Spark's filter keeps TRUE only, exactly as the Python side does.
    return parents[0].filter(F.expr(op.predicate.sql))


@_registers(_OUTPUT, Project)
def _project(op: Project, parents: list[DataFrame]) -> DataFrame:
    return parents[0].select(*[F.expr(e.sql).alias(f"_c{i}") for i, e in enumerate(op.exprs)])


@_registers(_OUTPUT, Replicate)
def _replicate(op: Replicate, parents: list[DataFrame]) -> DataFrame:
    # m copies of each row: explode a sequence 1..m (rows with m < 1 or NULL make none).
    n = len(op.columns)
    df = parents[0].filter(_c(n) >= 1)
    copies = df.withColumn("_copy", F.explode(F.sequence(F.lit(1), _c(n).cast("int"))))
    return copies.select(*[_c(i) for i in range(n)])


@_registers(_OUTPUT, Union)
def _union(op: Union, parents: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), [_positional(p) for p in parents])


@_registers(_OUTPUT, Join)
def _join(op: Join, parents: list[DataFrame]) -> DataFrame:
    lw = op.left_width
    rw = len(op.columns) - lw
    left = parents[0].select(*[_c(i).alias(f"_l{i}") for i in range(lw)])
    right = parents[1].select(*[_c(j).alias(f"_r{j}") for j in range(rw)])
    # Plain `==`: a NULL key compares as NULL and never matches, as in on_input.
    conds = [
        F.col(f"_l{a}") == F.col(f"_r{b}") for a, b in zip(op.left_key, op.right_key, strict=True)
    ]
    on = reduce(lambda a, b: a & b, conds) if conds else F.lit(True)
    joined = left.join(right, on=on, how=op.join_kind)
    return _positional(joined.select(*[f"_l{i}" for i in range(lw)],
                                     *[f"_r{j}" for j in range(rw)]))


# -- aggregate --------------------------------------------------------------------------
_AGG_OUTPUT: dict[str, Callable[[Column], Column]] = {
    "COUNT": F.count, "SUM": F.sum, "AVG": F.avg, "MIN": F.min, "MAX": F.max,
}


def _agg_value(spec: AggSpec) -> Column:
    if spec.col is None:
        return F.count(F.lit(1))
    return _AGG_OUTPUT[spec.func](_c(spec.col))


def _grouped(df: DataFrame, groups: list[Column], aggs: list[Column]) -> DataFrame:
    if not aggs:  # GROUP BY without aggregates: just the distinct groups
        return df.select(*groups).distinct()
    return df.groupBy(*groups).agg(*aggs) if groups else df.agg(*aggs)


@_registers(_OUTPUT, Aggregate)
def _aggregate(op: Aggregate, parents: list[DataFrame]) -> DataFrame:
    groups = [_c(c).alias(f"_c{i}") for i, c in enumerate(op.group_by)]
    g = len(groups)
    aggs = [_agg_value(a).alias(f"_c{g + i}") for i, a in enumerate(op.aggs)]
    return _grouped(parents[0], groups, aggs)


@_registers(_STATE, Aggregate)
def _aggregate_state(op: Aggregate, parents: list[DataFrame]) -> DataFrame:
    df = parents[0]
    g = len(op.group_by)
    single = _single_extreme_column(op)
    if single is not None:
        return _extreme_state_one_pass(op, df, single)
    groups = [_c(c).alias(f"_g{i}") for i, c in enumerate(op.group_by)]
    accs: list[Column] = [F.count(F.lit(1)).alias("_n")]
    names = ["_n"]
    extremes: list[tuple[int, AggSpec]] = []
    for i, a in enumerate(op.aggs):
        if a.col is None:
            continue
        accs.append(F.count(_c(a.col)).alias(f"_a{i}_n"))
        names.append(f"_a{i}_n")
        if a.func in ("SUM", "AVG"):
            # The finite values' sum and the counts of NaN, +inf and -inf apart: a sum
            # that met them can't be maintained by subtraction (see aggfuncs.Sum).
            c = _c(a.col)
            nan, pinf, ninf = F.isnan(c), c == F.lit(float("inf")), c == F.lit(float("-inf"))
            finite = F.when(nan | pinf | ninf, F.lit(0)).otherwise(c)
            accs.append(F.sum(finite).alias(f"_a{i}_s"))
            counts = [
                F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0))) for cond in (nan, pinf, ninf)
            ]
            accs.append(F.array(*counts).alias(f"_a{i}_x"))
            names += [f"_a{i}_s", f"_a{i}_x"]
        elif a.func in ("MIN", "MAX"):
            names.append(f"_a{i}_v")
            extremes.append((i, a))
    state = _grouped(df, groups, accs)
    if extremes:
        state = _attach(state, _extreme_candidates(df, op, extremes), g)
    return _positional(state.select(*[f"_g{j}" for j in range(g)], *names))


def _single_extreme_column(op: Aggregate) -> int | None:
    """The column of a grouped state whose aggregates are all MIN/MAX of that one column
    (besides COUNT(*)), else None: such states take the one-pass plan below."""
    cols = {a.col for a in op.aggs if a.col is not None}
    if (not op.group_by or len(cols) != 1
            or any(a.col is not None and a.func not in ("MIN", "MAX") for a in op.aggs)):
        return None
    col = cols.pop()
    return None if col in op.group_by else col


def _extreme_state_one_pass(op: Aggregate, df: DataFrame, col: int) -> DataFrame:
    """The state of MIN/MAX over one column in one pass over the input: rows counted per
    (group, value), then per group the row count, the non-NULL count and the best
    values with their counts. (The general plan scans the input twice and joins the two
    results: twice the work for the running example's MAX.)"""
    groups = [_c(c) for c in op.group_by]
    # Rows clustered by group once: both aggregations below then run without another
    # shuffle (counting per (group, value) would shuffle by both, then again by group).
    # On a small machine each shuffle is a stage of fixed cost, and a miss's rows are few.
    counted = df.repartition(*groups).groupBy(*groups, _c(col)).agg(
        F.count(F.lit(1)).alias("_m"))
    present = _c(col).isNotNull()
    accs: list[Column] = [F.sum("_m").alias("_n")]
    for i, a in enumerate(op.aggs):
        if a.col is None:
            continue
        accs.append(F.sum(F.when(present, F.col("_m")).otherwise(F.lit(0))).alias(f"_a{i}_n"))
        picked = F.collect_list(
            F.when(present, F.struct(_c(col).alias("v"), F.col("_m").alias("m")))
        )
        values = F.sort_array(picked, asc=a.func == "MIN")
        if op.candidates is not None:
            values = F.slice(values, 1, op.candidates)
        accs.append(values.alias(f"_a{i}_v"))
    state = counted.groupBy(*[_c(c).alias(f"_g{j}") for j, c in enumerate(op.group_by)]).agg(*accs)
    return _positional(state)


def _extreme_candidates(df: DataFrame, op: Aggregate,
                        extremes: list[tuple[int, AggSpec]]) -> DataFrame:
    """Per group, the best distinct values of every MIN/MAX column with multiplicities.

    All MIN/MAX columns share one pass: each input row is exploded into one tagged row
    per aggregate (tag ``i``, its value in field ``v{i}``, other fields NULL of their own
    types), counted per (group, tag, value), then collected per group and tag.
    """
    keys = [f"_k{j}" for j in range(len(op.group_by))]
    groups = [_c(c).alias(k) for k, c in zip(keys, op.group_by, strict=True)]
    fields = [f"v{t}" for t in range(len(extremes))]
    tagged = F.array(*[
        F.struct(F.lit(t).alias("i"), *[
            F.when(F.lit(t == u), _c(a.col)).alias(fields[u])  # type: ignore[arg-type]
            for u, (_, a) in enumerate(extremes)])
        for t in range(len(extremes))])
    rows = df.select(*groups, F.explode(tagged).alias("_e")).select(*keys, "_e.*")
    present = reduce(lambda a, b: a | b, [(F.col("i") == t) & F.col(f).isNotNull()
                                          for t, f in enumerate(fields)])
    counted = rows.where(present).groupBy(*keys, "i", *fields).agg(
        F.count(F.lit(1)).alias("m"))
    best = []
    for t, (i, a) in enumerate(extremes):
        picked = F.collect_list(F.when(F.col("i") == t, F.struct(F.col(fields[t]).alias("v"), "m")))
        values = F.sort_array(picked, asc=a.func == "MIN")
        if op.candidates is not None:
            values = F.slice(values, 1, op.candidates)
        best.append(values.alias(f"_a{i}_v"))
    return _grouped(counted, [F.col(k) for k in keys], best)


def _attach(state: DataFrame, extra: DataFrame, g: int) -> DataFrame:
    """Left-join per-group columns onto the state; group values may be NULL (<=>)."""
    if g == 0:
        return state.crossJoin(extra)
    on = reduce(lambda a, b: a & b,
                [F.col(f"_g{j}").eqNullSafe(F.col(f"_k{j}")) for j in range(g)])
    return state.join(extra, on=on, how="left").drop(*[f"_k{j}" for j in range(g)])


# -- top-k ------------------------------------------------------------------------------
def _ordering(op: TopK) -> list[Column]:
    """The order keys with Spark's default NULL placement, then every column ascending:
    the tie-break the Python side uses (``topk._sort_key``)."""
    keys = [_c(c).desc_nulls_last() if desc else _c(c).asc_nulls_first()
            for c, desc in op.order]
    return keys + [_c(i).asc_nulls_first() for i in range(len(op.columns))]


def _partition(op: TopK) -> Any:
    groups = [_c(c) for c in op.group_by]
    return Window.partitionBy(*groups) if groups else Window.partitionBy()


@_registers(_OUTPUT, TopK)
def _topk(op: TopK, parents: list[DataFrame]) -> DataFrame:
    ranked = parents[0].withColumn(
        "_rank", F.row_number().over(_partition(op).orderBy(*_ordering(op))))
    return ranked.where(F.col("_rank") <= op.k).drop("_rank")


@_registers(_STATE, TopK)
def _topk_state(op: TopK, parents: list[DataFrame]) -> DataFrame:
    n = len(op.columns)
    distinct = parents[0].groupBy(*[_c(i) for i in range(n)]).agg(F.count(F.lit(1)).alias("_m"))
    ranked = (distinct
              .withColumn("_rank", F.row_number().over(_partition(op).orderBy(*_ordering(op))))
              .withColumn("_total", F.sum("_m").over(_partition(op))))
    if op.candidates is not None:
        ranked = ranked.where(F.col("_rank") <= op.candidates)
    cols = [_c(c).alias(f"_g{j}") for j, c in enumerate(op.group_by)]
    return _positional(ranked.select(*cols, *[_c(i) for i in range(n)], "_m", "_total"))


# -- distinct ---------------------------------------------------------------------------
@_registers(_OUTPUT, Distinct)
def _distinct(op: Distinct, parents: list[DataFrame]) -> DataFrame:
    return parents[0].distinct()


@_registers(_STATE, Distinct)
def _distinct_state(op: Distinct, parents: list[DataFrame]) -> DataFrame:
    n = len(op.columns)
    counted = parents[0].groupBy(*[_c(i) for i in range(n)]).agg(F.count(F.lit(1)))
    return _positional(counted)
