"""The Spark side of every operator agrees with its incremental side.

For each operator: random rows fed as inserts through ``on_input`` (on the shared
harness) give the same multiset as ``compile_output`` over a DataFrame of the same rows;
grouped operators' ``load_entries(compile_state(...))`` give the entries the harness built;
and random insert/delete sequences keep the incremental output equal to Spark's, with
exhausted groups refilled from ``compile_state`` as the executor would.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlglot
from pyspark.sql import types as T

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operators"))

from harness import Harness

from partialflow.operators.aggregate import Aggregate, AggSpec
from partialflow.operators.base import Operator
from partialflow.operators.distinct import Distinct
from partialflow.operators.expressions import compile_expr
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.operators.topk import TopK
from partialflow.operators.union import Union
from partialflow.server.upquery.operator_plans import compile_output, compile_state

# Input rows: (g: string, k: bigint, v: bigint, f: double, s: string)
SCHEMA = T.StructType([
    T.StructField("_c0", T.StringType()), T.StructField("_c1", T.LongType()),
    T.StructField("_c2", T.LongType()), T.StructField("_c3", T.DoubleType()),
    T.StructField("_c4", T.StringType()),
])
COLS = ("g", "k", "v", "f", "s")


def random_row(rng: random.Random) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.15 else v
    return (maybe(rng.choice("abcd")), maybe(rng.randint(0, 4)), maybe(rng.randint(-20, 20)),
            maybe(rng.randint(-8, 8) / 2), maybe(rng.choice(["x", "y", "zz", "Ä"])))


def random_rows(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    return [random_row(rng) for _ in range(n)]


def norm(rows) -> Counter:
    """Rows as a multiset; floats rounded (summation order differs) but kept distinct
    from ints so a type difference still shows."""
    def value(v):
        return ("float", round(v, 6)) if isinstance(v, float) else v
    return Counter(tuple(value(v) for v in r) for r in rows)


def spark_rows(df) -> Counter:
    return norm(tuple(r) for r in df.collect())


def frame(spark, rows, schema=SCHEMA):
    return spark.createDataFrame(rows, schema)


def expr(text: str):
    return compile_expr(sqlglot.parse_one(text))


def aggregate(group_by=(0,), candidates=3) -> Aggregate:
    specs = [AggSpec("COUNT_STAR"), AggSpec("COUNT", 2), AggSpec("SUM", 2), AggSpec("AVG", 3),
             AggSpec("SUM", 3), AggSpec("MIN", 2), AggSpec("MAX", 3), AggSpec("MAX", 4),
             AggSpec("MIN", 4)]
    names = tuple(f"g{i}" for i in range(len(group_by))) + tuple(f"a{i}" for i in range(len(specs)))
    return Aggregate(names, group_by, specs, candidates)


SINGLE_INPUT = {
    "filter": lambda: Filter(COLS, expr("_c2 > 0 OR _c0 = 'a'")),
    "project": lambda: Project(
        ("a", "b", "c"),
        [expr("_c4"), expr("_c2 * 2 + _c3"), expr("CASE WHEN _c1 > 2 THEN 'hi' END")],
    ),
    "aggregate": lambda: aggregate(),
    "aggregate_two_groups": lambda: aggregate(group_by=(1, 0), candidates=None),
    "aggregate_global": lambda: aggregate(group_by=(), candidates=2),
    "aggregate_no_aggs": lambda: Aggregate(("g",), (0,), [], None),
    # MIN/MAX of one column (+ COUNT(*)): the one-pass state plan.
    "aggregate_extremes_of_one_column": lambda: Aggregate(
        ("g", "n", "hi", "lo"),
        (0,),
        [AggSpec("COUNT_STAR"), AggSpec("MAX", 3), AggSpec("MIN", 3)],
        2,
    ),
    "aggregate_max_unbounded": lambda: Aggregate(
        ("g", "h", "hi"), (0, 1), [AggSpec("MAX", 4)], None
    ),
    "topk": lambda: TopK(COLS, (0,), [(2, True)], 2, 4),
    "topk_two_keys": lambda: TopK(COLS, (1,), [(3, False), (4, True)], 3, None),
    "topk_global": lambda: TopK(COLS, (), [(2, False)], 4, 6),
    "distinct": lambda: Distinct(("g", "k")),
}
GROUPED = [name for name in SINGLE_INPUT if name.startswith(("aggregate", "topk", "distinct"))
           and name != "aggregate_no_aggs"]


def project_input(name: str, rows: list[tuple]) -> list[tuple]:
    # Distinct takes the first two columns only (it keeps whole rows).
    return [r[:2] for r in rows] if name == "distinct" else rows


def input_frame(spark, name: str, rows):
    """A DataFrame of rows already shaped by ``project_input``."""
    if name == "distinct":
        return frame(spark, rows, T.StructType(SCHEMA.fields[:2]))
    return frame(spark, rows)


@pytest.mark.parametrize("name", list(SINGLE_INPUT))
def test_output_and_state_match_spark(spark, name):
    op = SINGLE_INPUT[name]()
    rows = project_input(name, random_rows(sum(map(ord, name)), 70))
    h = Harness(op)
    if name == "aggregate_global":  # its one row exists before any input, as in SQL
        h.fill(op.load_entries(compile_state(op, [frame(spark, [])]).collect()))
    h.insert(0, *rows)
    df = input_frame(spark, name, rows)
    assert norm(h.rows().elements()) == spark_rows(compile_output(op, [df]))
    if name in GROUPED:
        check_state(op, h, compile_state(op, [df]))


def check_state(op, h: Harness, state) -> None:
    """load_entries(compile_state) equals what the harness built from inserts alone."""
    g = len(op.group_columns())
    assert state.columns[:g] == [f"_c{i}" for i in range(g)]
    loaded = op.load_entries([tuple(r) for r in state.collect()])
    assert set(loaded) == set(h.state.entries)
    for group, entry in loaded.items():
        mine = h.state.entries[group]
        assert norm(op.output_rows(group, entry)) == norm(op.output_rows(group, mine)), group
        if isinstance(op, Aggregate):  # sums may differ in the last bit; the rest exactly
            assert entry.rows == mine.rows
            for f, a, b in zip(op.funcs, entry.states, mine.states, strict=True):
                if f.name in ("MIN", "MAX", "COUNT", "COUNT_STAR"):
                    assert a == b, (group, f.name)
        else:
            assert entry == mine, group


@pytest.mark.parametrize("name", ["aggregate", "aggregate_global", "topk", "distinct"])
def test_random_inserts_and_deletes(spark, name):
    op = SINGLE_INPUT[name]()
    rng = random.Random(len(name))
    h = Harness(op)
    current: list[tuple] = []
    if name == "aggregate_global":
        h.fill(op.load_entries(compile_state(op, [frame(spark, [])]).collect()))
    exhausted = 0  # data dependent; test_exhaustion_refill_is_exercised pins one case
    for step in range(3):
        batch = [(r, 1) for r in project_input(name, [random_row(rng) for _ in range(25)])]
        for _ in range(min(len(current), 20)):
            batch.append((current.pop(rng.randrange(len(current))), -1))
        rng.shuffle(batch)  # deletes are of rows from earlier steps: any order is valid
        current.extend(r for r, s in batch if s > 0)
        out = h.feed(0, batch)
        if out.exhausted:
            exhausted += len(out.exhausted)
            refill(spark, h, op, name, current, out.exhausted)
        expected = spark_rows(compile_output(op, [input_frame(spark, name, current)]))
        assert norm(h.rows().elements()) == expected, f"step {step}"
        assert h.entry_rows() == h.rows()



def refill(spark, h: Harness, op: Operator, name: str, current, groups) -> None:
    """What the executor does for an exhausted group: evict it (the harness already
    dropped the entry), then fill it again from compile_state, downstream included."""
    state = compile_state(op, [input_frame(spark, name, current)])
    loaded = op.load_entries([tuple(r) for r in state.collect()])
    for group in groups:
        stale = [r for r in h.output.elements()
                 if tuple(r[i] for i in op.group_columns()) == group]
        h.output.subtract(stale)
        h.output = +h.output
        if group in loaded:
            h.fill({group: loaded[group]})


def test_exhaustion_refill_is_exercised(spark):
    op = TopK(COLS, (0,), [(2, True)], 1, 1)
    h = Harness(op)
    rows = [("a", 1, v, 0.0, "x") for v in (5, 4, 3)]
    h.insert(0, *rows)
    out = h.delete(0, rows[0])
    assert out.exhausted == [("a",)]
    refill(spark, h, op, "topk", rows[1:], out.exhausted)
    assert h.rows() == {rows[1]: 1}


def test_join_and_union_match_spark(spark):
    left_rows = random_rows(11, 40)
    right_rows = random_rows(12, 40)
    for kind in ("inner", "left"):
        op = Join(COLS + COLS, (0, 1), (0, 1), kind, left_width=5)
        h = Harness(op)
        current_l, current_r = list(left_rows), list(right_rows)
        h.insert(0, *left_rows)
        h.insert(1, *right_rows)
        h.delete(0, *current_l[:10])
        h.delete(1, *current_r[:15])
        h.insert(0, *current_r[:5])
        current_l = current_l[10:] + current_r[:5]
        current_r = current_r[15:]
        expected = compile_output(op, [frame(spark, current_l), frame(spark, current_r)])
        assert norm(h.rows().elements()) == spark_rows(expected), kind
    union = Union(COLS, 2)
    h = Harness(union)
    h.insert(0, *left_rows)
    h.insert(1, *right_rows)
    expected = compile_output(union, [frame(spark, left_rows), frame(spark, right_rows)])
    assert norm(h.rows().elements()) == spark_rows(expected)


def test_state_frame_filters_by_group_key(spark):
    op = aggregate(group_by=(1, 0), candidates=2)
    rows = random_rows(3, 50)
    state = compile_state(op, [frame(spark, rows)])
    picked = state.where("_c0 = 2 AND _c1 = 'a'").collect()
    assert len(picked) <= 1
    groups = {(r[1], r[0]) for r in rows}
    assert len(picked) == ((2, "a") in groups)
