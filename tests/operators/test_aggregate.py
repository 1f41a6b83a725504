"""γ on the shared harness: every function, NULLs, group life cycle, MIN/MAX bounds."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import Harness, as_counter

from partialflow.operators.aggregate import AggEntry, Aggregate, AggSpec
from partialflow.operators.base import Output
from partialflow.operators.candidates import Candidates


def agg(*specs: tuple[str, int | None], group_by=(0,), candidates=None) -> Aggregate:
    names = tuple(f"g{i}" for i in range(len(group_by))) + tuple(f"a{i}" for i in range(len(specs)))
    return Aggregate(names, tuple(group_by), [AggSpec(f, c) for f, c in specs], candidates)


def test_seed_example_max_after_deleting_the_max():
    # category, MAX(length) over the joined visits (running example 1).
    h = Harness(agg(("MAX", 1)))
    h.insert(0, ("Fruit", 10), ("Fruit", 20), ("Vegetable", 50), ("Fruit", 40), ("Vegetable", 60))
    assert h.rows() == {("Fruit", 40): 1, ("Vegetable", 60): 1}
    out = h.delete(0, ("Vegetable", 60))
    assert as_counter(out.deltas) == {("Vegetable", 60): -1, ("Vegetable", 50): 1}
    assert out.writes[("Vegetable",)].rows == 1


def test_count_sum_avg_min_max_together():
    h = Harness(agg(("COUNT_STAR", None), ("COUNT", 1), ("SUM", 1), ("AVG", 1), ("MIN", 1),
                    ("MAX", 1)))
    h.insert(0, ("a", 4), ("a", None), ("a", 1), ("b", None))
    assert h.rows() == {("a", 3, 2, 5, 2.5, 1, 4): 1, ("b", 1, 0, None, None, None, None): 1}
    h.delete(0, ("a", 1), ("b", None))
    assert h.rows() == {("a", 2, 1, 4, 4.0, 4, 4): 1}
    assert h.entry_rows() == h.rows()


def test_sum_of_floats_and_null_only_groups():
    h = Harness(agg(("SUM", 1), ("AVG", 1)))
    h.insert(0, ("x", 0.5), ("x", 0.25), ("y", None))
    assert h.rows() == {("x", 0.75, 0.375): 1, ("y", None, None): 1}
    h.delete(0, ("x", 0.5), ("x", 0.25))
    h.insert(0, ("x", None))
    assert h.rows() == {("x", None, None): 1, ("y", None, None): 1}
    assert h.state.entries[("x",)].states[0] == (0, 0, 0, 0, 0)  # no float residue left


def test_sum_and_avg_recover_from_nan_and_infinities():
    # A running sum that met inf and -inf is NaN, and subtracting can never bring it back;
    # the specials are counted apart, so deleting them gives the sum a fresh one would.
    inf, nan = float("inf"), float("nan")
    h = Harness(agg(("SUM", 1), ("AVG", 1)))
    h.insert(0, ("x", 1.5), ("x", inf), ("x", -inf))
    (row,) = h.rows()
    assert row[1] != row[1] and row[2] != row[2]  # NaN, as Spark: inf + -inf
    h.delete(0, ("x", -inf))
    assert h.rows() == {("x", inf, inf): 1}
    h.insert(0, ("x", nan))
    (row,) = h.rows()
    assert row[1] != row[1]
    h.delete(0, ("x", nan), ("x", inf))
    assert h.rows() == {("x", 1.5, 1.5): 1}


def test_sum_keeps_int_type():
    h = Harness(agg(("SUM", 1)))
    h.insert(0, ("x", 2), ("x", 3))
    (row,) = h.rows()
    assert row == ("x", 5) and type(row[1]) is int


def test_group_disappears_with_its_last_row():
    h = Harness(agg(("COUNT_STAR", None)))
    h.insert(0, ("x",), ("x",))
    out = h.delete(0, ("x",), ("x",))
    assert out.deltas == [(("x", 2), -1)]
    assert out.writes == {("x",): None}
    assert h.rows() == {}


def test_unchanged_output_emits_nothing():
    h = Harness(agg(("MAX", 1)))
    h.insert(0, ("x", 5))
    out = h.insert(0, ("x", 3))
    assert out.deltas == [] and out.writes[("x",)].rows == 2


def test_insert_and_delete_in_one_batch():
    h = Harness(agg(("COUNT_STAR", None)))
    out = h.feed(0, [(("x",), 1), (("x",), -1)])
    assert out.deltas == [] and out.writes == {("x",): None}


def test_global_aggregate_over_empty_input():
    op = agg(("COUNT_STAR", None), ("SUM", 0), ("MIN", 0), group_by=())
    assert op.output_rows((), op.load_entries([(0, 0, None, [0, 0, 0], 0, None)])[()]) == [
        (0, None, None)]
    h = Harness(op).fill(op.load_entries([(0, 0, None, [0, 0, 0], 0, [])]))
    assert h.rows() == {(0, None, None): 1}
    h.insert(0, (3,), (5,))
    assert h.rows() == {(2, 8, 3): 1}
    out = h.delete(0, (3,), (5,))
    assert as_counter(out.deltas) == {(2, 8, 3): -1, (0, None, None): 1}
    assert out.writes[()] is not None  # the one row never disappears


def test_global_aggregate_without_entry_counts_as_empty():
    h = Harness(agg(("COUNT_STAR", None), group_by=())).assume_output((0,))
    assert as_counter(h.insert(0, (1,)).deltas) == {(0,): -1, (1,): 1}


def test_min_max_bounded_candidates_and_exhaustion():
    op = agg(("MAX", 1), candidates=2)
    h = Harness(op)
    h.insert(0, ("g", 10), ("g", 20), ("g", 30), ("g", 30), ("g", 5))
    entry = h.state.entries[("g",)]
    # Kept: the two best distinct values with multiplicities; total counts them all.
    assert entry.states[0] == Candidates([30, 20], [2, 1], 5)
    h.insert(0, ("g", 25))  # better than the worst kept: enters, 20 drops out
    assert h.state.entries[("g",)].states[0] == Candidates([30, 25], [2, 1], 6)
    h.delete(0, ("g", 30), ("g", 25))
    assert h.rows() == {("g", 30): 1}
    out = h.delete(0, ("g", 30))  # nothing kept, values unseen: can't know the max
    assert out.exhausted == [("g",)] and out.deltas == [] and ("g",) not in out.writes


def test_min_deletions_of_unseen_values_and_full_drain():
    h = Harness(agg(("MIN", 1), candidates=1))
    h.insert(0, ("g", 3), ("g", 7), ("g", 9))
    h.delete(0, ("g", 9))  # unseen: only the total changes
    assert h.state.entries[("g",)].states[0] == Candidates([3], [1], 2)
    h.delete(0, ("g", 7))
    out = h.delete(0, ("g", 3))  # last value gone, nothing unseen: group simply empties
    assert out.exhausted == [] and h.rows() == {}


def test_exhaustion_mid_batch_is_not_undone_by_later_inserts():
    h = Harness(agg(("MAX", 1), candidates=1))
    h.insert(0, ("g", 9), ("g", 8))
    out = h.feed(0, [(("g", 9), -1), (("g", 1), 1)])
    assert out.exhausted == [("g",)]


def test_unbounded_when_candidates_none():
    op = agg(("MIN", 1), candidates=2)
    op.candidates = None  # what the graph does for full state
    h = Harness(op)
    h.insert(0, *[("g", v) for v in range(10)])
    h.delete(0, *[("g", v) for v in range(9)])
    assert h.rows() == {("g", 9): 1}


def test_strings_min_max():
    h = Harness(agg(("MIN", 1), ("MAX", 1), candidates=2))
    h.insert(0, ("g", "pear"), ("g", "apple"), ("g", "zucchini"), ("g", "fig"))
    assert h.rows() == {("g", "apple", "zucchini"): 1}


def test_wiring_and_sizes():
    op = agg(("COUNT", 2), ("MAX", 3), group_by=(1, 0), candidates=4)
    assert op.group_columns() == (0, 1)
    assert op.resolve(0) == [(0, 1)] and op.resolve(1) == [(0, 0)] and op.resolve(2) == []
    assert op.input_group(0, ("a", "b", 1, 2)) == ("b", "a")
    assert op.description() == "γ[#1, #0: COUNT(#2), MAX(#3)]"
    entry = AggEntry(2, (2, Candidates([5, 4], [1, 1], 2)))
    assert 100 < op.entry_size(entry) < 1000
    with pytest.raises(ValueError, match="COUNT_STAR needs no column"):
        Aggregate(("a",), (), [AggSpec("COUNT_STAR", 0)])
    with pytest.raises(ValueError, match="unknown aggregate"):
        Aggregate(("a",), (), [AggSpec("MEDIAN", 0)])



@pytest.mark.parametrize("largest", [True, False])
def test_batched_insert_fold_equals_one_insert_at_a_time(largest):
    """MIN/MAX merge an insert-only batch in one pass (aggfuncs._merge_inserts): the
    candidates must be exactly those of inserting the values one by one, from every kind
    of starting state (empty, with room, full, truncated), with ties and NULLs."""
    import random

    from partialflow.operators.aggfuncs import Extremum
    from partialflow.operators.grouped import Exhausted

    rng = random.Random(7)
    f = Extremum(0, largest)
    merged_some = False
    for trial in range(600):
        cap = rng.choice([1, 2, 3, 5, None])
        kind = rng.choice([int, float, str])
        state = f.initial()
        # A random history of inserts and deletes of inserted values (one that exhausts
        # the candidates: start over).
        present: list = []
        for _ in range(rng.randrange(0, 12)):
            delete = present and rng.random() < 0.3
            v = present.pop(rng.randrange(len(present))) if delete else kind(rng.randrange(20))
            try:
                state = f.apply(state, [(v, -1 if delete else 1)], cap)
            except Exhausted:
                state, present = f.initial(), []
            if not delete:
                present.append(v)
        batch = [((None if rng.random() < 0.1 else kind(rng.randrange(25)),), 1)
                 for _ in range(rng.randrange(1, 40))]
        one_by_one = state
        for (v,), sign in batch:
            if v is not None:
                one_by_one = f.apply(one_by_one, [(v, sign)], cap)
        got = f.fold(state, batch, cap)
        assert got == one_by_one, (trial, state, batch, cap)
        assert got.kept == one_by_one.kept
        merged_some |= len(batch) >= 8
    assert merged_some


@pytest.mark.parametrize("largest", [True, False])
def test_small_batch_fold_equals_apply_and_leaves_the_old_entry_alone(largest):
    """Batches under the merge size are folded one diff at a time, and copy the
    candidates only at the first diff that changes the kept items: inserts beneath a
    list with no room only count (``Candidates.beneath``/``counted``, sharing the old
    lists). The result must equal ``apply`` of the same diffs (exhaustion included), its
    size must be what measuring it afresh gives, and the old entry must not change."""
    import copy
    import random

    from partialflow.operators.aggfuncs import Extremum
    from partialflow.operators.candidates import Candidates
    from partialflow.operators.grouped import Exhausted

    rng = random.Random(11)
    f = Extremum(0, largest)
    counted_only = 0
    for trial in range(1500):
        cap = rng.choice([1, 2, 3, 8, None])
        kind = rng.choice([int, float, str])
        state, present = f.initial(), []
        for _ in range(rng.randrange(0, 30)):
            v = kind(rng.randrange(40))
            state = f.apply(state, [(v, 1)], cap)
            present.append(v)
        state.size()  # measured, as a stored entry is
        before = copy.deepcopy((state.items, state.counts, state.kept, state.total))
        batch = []
        for _ in range(rng.randrange(1, 8)):
            if present and rng.random() < 0.25:
                batch.append(((present.pop(rng.randrange(len(present))),), -1))
            else:
                batch.append(((None if rng.random() < 0.1 else kind(rng.randrange(45)),), 1))
        try:
            want = f.apply(state, [(v, s) for (v,), s in batch if v is not None], cap)
        except Exhausted:
            with pytest.raises(Exhausted):
                f.fold(state, batch, cap)
            continue
        got = f.fold(state, batch, cap)
        assert got == want and got.kept == want.kept, (trial, state, batch, cap)
        fresh = Candidates(got.items, got.counts, got.total)  # payload measured afresh
        assert got.size() == fresh.size()
        assert (state.items, state.counts, state.kept, state.total) == before
        counted_only += got is not state and got.items is state.items
    assert counted_only > 50  # the no-copy path ran


@pytest.mark.parametrize("func", ["COUNT_STAR", "COUNT", "SUM", "AVG", "MIN", "MAX"])
def test_the_one_aggregate_path_gives_what_the_general_path_gives(func):
    """A single aggregate with GROUP BY runs an inlined loop (``_on_groups_one``); over
    random batches (inserts, deletes of present rows, NULLs, NaN and infinities, groups
    coming and going, bounded MIN/MAX running out) its output must equal the general
    loop's (``_on_groups_any``) delta for delta, with the same entries and exhaustions."""
    import random

    inf, nan = float("inf"), float("nan")
    rng = random.Random(func)
    col = None if func == "COUNT_STAR" else 1
    paths_differ = 0
    for trial in range(150):
        cap = rng.choice([1, 2, None])
        fast = Harness(agg((func, col), candidates=cap))
        slow_op = agg((func, col), candidates=cap)
        slow_op.on_groups = lambda parent, groups, state, op=slow_op: _general(op, groups, state)
        slow = Harness(slow_op)
        present: list = []
        for step in range(rng.randrange(1, 12)):
            batch = []
            for _ in range(rng.randrange(1, 10)):
                if present and rng.random() < 0.35:
                    batch.append((present.pop(rng.randrange(len(present))), -1))
                else:
                    v = rng.choice([None, nan, inf, -inf, 0.5, *range(6)])
                    row = (rng.choice("abc"), v)
                    batch.append((row, 1))
                    present.append(row)
            got, want = fast.feed(0, batch), slow.feed(0, batch)
            assert repr(got.deltas) == repr(want.deltas), (trial, step, batch)
            assert repr(got.writes) == repr(want.writes), (trial, step, batch)
            assert got.exhausted == want.exhausted, (trial, step, batch)
            paths_differ += bool(got.deltas)
            for group in got.exhausted:  # what the executor does: the group is refilled
                present = [r for r in present if (r[0],) != group]
                fast.output = Counter({r: n for r, n in fast.output.items() if (r[0],) != group})
                slow.output = Counter({r: n for r, n in slow.output.items() if (r[0],) != group})
    assert paths_differ  # the batches changed outputs (the comparison saw deltas)


def _general(op: Aggregate, groups, state) -> Output:
    out = Output()
    op._on_groups_any(groups, state, out)
    return out
