"""σ, π and ⋃ on the shared harness."""

from __future__ import annotations

import sqlglot
from harness import Harness, as_counter

from partialflow.operators.expressions import compile_expr
from partialflow.operators.filter import Filter
from partialflow.operators.project import Project
from partialflow.operators.union import Union


def expr(text: str):
    return compile_expr(sqlglot.parse_one(text))


def test_filter_keeps_true_only():
    op = Filter(("a", "b"), expr("_c0 > 1 AND _c1 <> 'x'"))
    h = Harness(op)
    out = h.insert(0, (2, "y"), (2, "x"), (0, "y"), (None, "y"), (2, None), (5, "z"))
    # NULL AND TRUE is NULL: dropped like FALSE.
    assert out.deltas == [((2, "y"), 1), ((5, "z"), 1)]
    assert h.delete(0, (2, "y"), (None, "y")).deltas == [((2, "y"), -1)]
    assert h.rows() == {(5, "z"): 1}


def test_filter_three_valued_or_and_not():
    op = Filter(("a",), expr("NOT (_c0 = 1) OR _c0 IS NULL"))
    out = Harness(op).insert(0, (1,), (2,), (None,))
    # NOT(NULL = 1) is NULL, OR TRUE -> TRUE; NOT(1 = 1) OR FALSE -> FALSE.
    assert out.deltas == [((2,), 1), ((None,), 1)]


def test_filter_description_and_provenance():
    op = Filter(("a", "b"), expr("_c0 > 1"))
    assert op.description() == "σ[_c0 > 1]"
    assert op.resolve(1) == [(0, 1)]
    assert op.signature() == Filter(("x", "y"), expr("_c0 > 1")).signature()


def test_project_expressions_and_provenance():
    op = Project(("b", "twice", "label"),
                 [expr("_c1"), expr("_c0 * 2"), expr("CASE WHEN _c0 > 1 THEN 'big' END")])
    h = Harness(op).assume_output(("w", None, None))
    out = h.feed(0, [((3, "u"), 1), ((1, None), 1), ((None, "w"), -1)])
    assert out.deltas == [(("u", 6, "big"), 1), ((None, 2, None), 1), (("w", None, None), -1)]
    assert op.resolve(0) == [(0, 1)] and op.resolve(1) == [] and op.resolve(2) == []
    assert op.description().startswith("π[_c1 AS b, _c0 * 2 AS twice")


def test_project_column_shuffle_fast_path():
    op = Project(("c", "a"), [expr("_c2"), expr("_c0")])
    assert Harness(op).insert(0, (1, 2, 3)).deltas == [((3, 1), 1)]


def test_union_passes_every_parent_through():
    op = Union(("a",), 3)
    h = Harness(op)
    h.insert(0, (1,), (2,))
    h.insert(2, (1,))
    out = h.delete(1, (2,))
    assert out.deltas == [((2,), -1)]
    assert h.rows() == {(1,): 2}
    assert op.resolve(0) == [(0, 0), (1, 0), (2, 0)]
    assert as_counter(h.insert(1, (7,)).deltas) == {(7,): 1}
