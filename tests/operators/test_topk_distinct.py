"""↑ and δ on the shared harness."""

from __future__ import annotations

import pytest
from harness import Harness, as_counter

from partialflow.operators.candidates import Candidates
from partialflow.operators.distinct import Distinct
from partialflow.operators.topk import TopK

COLS = ("cat", "price", "name")


def topk(k=2, order=((1, True),), group_by=(0,), candidates=None) -> TopK:
    return TopK(COLS, tuple(group_by), list(order), k, candidates)


def test_insert_enters_and_pushes_out():
    h = Harness(topk())
    h.insert(0, ("a", 5, "x"), ("a", 3, "y"), ("b", 1, "z"))
    assert h.rows() == {("a", 5, "x"): 1, ("a", 3, "y"): 1, ("b", 1, "z"): 1}
    out = h.insert(0, ("a", 4, "w"))
    assert as_counter(out.deltas) == {("a", 3, "y"): -1, ("a", 4, "w"): 1}
    assert h.insert(0, ("a", 1, "v")).deltas == []  # below the top 2


def test_delete_promotes_the_next_candidate():
    h = Harness(topk())
    h.insert(0, ("a", 5, "x"), ("a", 3, "y"), ("a", 4, "w"))
    out = h.delete(0, ("a", 5, "x"))
    assert as_counter(out.deltas) == {("a", 5, "x"): -1, ("a", 3, "y"): 1}
    h.delete(0, ("a", 3, "y"), ("a", 4, "w"))
    assert h.rows() == {} and ("a",) not in h.state.entries


def test_ties_broken_by_all_columns_ascending():
    h = Harness(topk(k=2))
    h.insert(0, ("a", 5, "m"), ("a", 5, "c"), ("a", 5, "z"))
    assert h.rows() == {("a", 5, "c"): 1, ("a", 5, "m"): 1}


def test_duplicate_rows_count_separately():
    h = Harness(topk(k=3))
    h.insert(0, ("a", 5, "m"), ("a", 5, "m"), ("a", 1, "q"), ("a", 2, "r"))
    assert h.rows() == {("a", 5, "m"): 2, ("a", 2, "r"): 1}
    assert as_counter(h.delete(0, ("a", 5, "m")).deltas) == {("a", 5, "m"): -1, ("a", 1, "q"): 1}


def test_nulls_first_ascending_last_descending():
    h = Harness(topk(k=2, order=((1, False),)))
    h.insert(0, ("a", 3, "x"), ("a", None, "y"), ("a", 1, "z"))
    assert h.rows() == {("a", None, "y"): 1, ("a", 1, "z"): 1}
    h2 = Harness(topk(k=2, order=((1, True),)))
    h2.insert(0, ("a", 3, "x"), ("a", None, "y"), ("a", 1, "z"))
    assert h2.rows() == {("a", 3, "x"): 1, ("a", 1, "z"): 1}


def test_descending_strings_and_multiple_keys():
    op = topk(k=2, order=((2, True), (1, False)))
    h = Harness(op)
    h.insert(0, ("a", 2, "pear"), ("a", 1, "pear"), ("a", 0, "apple"))
    assert h.rows() == {("a", 1, "pear"): 1, ("a", 2, "pear"): 1}


def test_bounded_candidates_exhaust():
    h = Harness(topk(k=1, candidates=2))
    h.insert(0, *[("a", p, "n") for p in (1, 2, 3, 4)])
    entry = h.state.entries[("a",)]
    assert entry.items == [("a", 4, "n"), ("a", 3, "n")] and entry.total == 4
    h.delete(0, ("a", 1, "n"))  # unseen
    h.delete(0, ("a", 4, "n"))
    assert h.rows() == {("a", 3, "n"): 1}
    out = h.delete(0, ("a", 3, "n"))  # kept list empty, one row (price 2) unseen
    assert out.exhausted == [("a",)] and out.deltas == []


def test_global_top_k_and_wiring():
    op = topk(k=1, group_by=())
    h = Harness(op)
    h.insert(0, ("a", 1, "x"), ("b", 2, "y"))
    assert h.rows() == {("b", 2, "y"): 1}
    assert op.group_columns() == () and op.resolve(2) == [(0, 2)]
    assert topk().description() == "↑[2 by price DESC per cat]"
    assert op.entry_size(h.state.entries[()]) > 0
    with pytest.raises(ValueError, match="candidates"):
        topk(k=3, candidates=2)


def test_load_entries_rows():
    op = topk(k=1, candidates=2)
    entries = op.load_entries([("a", "a", 3, "x", 1, 5), ("a", "a", 4, "y", 2, 5)])
    assert entries == {("a",): Candidates([("a", 4, "y"), ("a", 3, "x")], [2, 1], 5)}
    assert op.output_rows(("a",), entries[("a",)]) == [("a", 4, "y")]


def test_distinct_counts_rows():
    op = Distinct(("a", "b"))
    h = Harness(op)
    out = h.insert(0, (1, None), (1, None), (2, "x"))
    assert as_counter(out.deltas) == {(1, None): 1, (2, "x"): 1}
    assert h.delete(0, (1, None)).deltas == []
    assert h.delete(0, (1, None)).deltas == [((1, None), -1)]
    assert h.feed(0, [((3, "y"), 1), ((3, "y"), -1)]).deltas == []
    assert h.rows() == {(2, "x"): 1} == h.entry_rows()
    assert op.group_columns() == (0, 1) and op.input_group(0, (2, "x")) == (2, "x")
    assert op.load_entries([(2, "x", 3)]) == {(2, "x"): 3}
    assert op.description() == "δ[a, b]"
