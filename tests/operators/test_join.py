"""⋈ and ⟕ on the shared harness: both sides, batches, holes, NULL keys."""

from __future__ import annotations

import pytest
from harness import Harness, as_counter

from partialflow.operators.base import Miss
from partialflow.operators.join import Join

# info(product, category) ⋈ visit(product, user, length) on product.
COLS = ("product", "category", "v_product", "user", "length")


def inner() -> Join:
    return Join(COLS, (0,), (0,), "inner", left_width=2)


def left() -> Join:
    return Join(COLS, (0,), (0,), "left", left_width=2)


def test_inner_from_left_and_right():
    h = Harness(inner()).seed(1, [("Apple", "Alice", 10), ("Apple", "Bob", 20)])
    out = h.insert(0, ("Apple", "Fruit"), ("Kiwi", "Fruit"))
    assert as_counter(out.deltas) == {("Apple", "Fruit", "Apple", "Alice", 10): 1,
                                      ("Apple", "Fruit", "Apple", "Bob", 20): 1}
    out = h.insert(1, ("Kiwi", "Eve", 5))
    assert out.deltas == [(("Kiwi", "Fruit", "Kiwi", "Eve", 5), 1)]
    out = h.delete(1, ("Apple", "Bob", 20))
    assert out.deltas == [(("Apple", "Fruit", "Apple", "Bob", 20), -1)]
    assert len(h.rows()) == 2


def test_inner_batch_with_several_deltas_for_one_key():
    h = Harness(inner()).seed(1, [("Apple", "Alice", 10)])
    out = h.feed(0, [(("Apple", "Fruit"), 1), (("Apple", "Fruit"), 1), (("Apple", "Fruit"), -1)])
    assert as_counter(out.deltas) == {("Apple", "Fruit", "Apple", "Alice", 10): 1}
    assert h.state.lookups == [(1, ("Apple",))]  # one lookup per key per batch
    # Both sides in one "write" (two batches): the right batch sees the left rows.
    out = h.insert(1, ("Apple", "Bob", 1))
    assert out.deltas == [(("Apple", "Fruit", "Apple", "Bob", 1), 1)]


def test_inner_miss_on_hole_drops_the_delta():
    h = Harness(inner()).hole(1, ("Apple",)).seed(1, [("Pear", "Al", 1)])
    d = (("Apple", "Fruit"), 1)
    out = h.feed(0, [d, (("Pear", "Fruit"), 1)])
    assert out.misses == [Miss(1, ("Apple",), d)]
    assert out.deltas == [(("Pear", "Fruit", "Pear", "Al", 1), 1)]
    h.hole(0, ("Fig",))
    d2 = (("Fig", "Z", 3), 1)
    assert h.feed(1, [d2]).misses == [Miss(0, ("Fig",), d2)]


def test_null_keys_never_match():
    h = Harness(inner()).seed(1, [(None, "Al", 1)])
    assert h.insert(0, (None, "Fruit")).deltas == []
    assert h.insert(1, (None, "Bo", 2)).deltas == []
    assert h.state.lookups == []  # not even looked up
    h2 = Harness(left())
    assert h2.insert(0, (None, "Fruit")).deltas == [((None, "Fruit", None, None, None), 1)]


def test_left_join_pads_then_retracts_on_first_match():
    h = Harness(left())
    assert h.insert(0, ("Apple", "Fruit")).deltas == [(("Apple", "Fruit", None, None, None), 1)]
    out = h.insert(1, ("Apple", "Alice", 10))
    assert as_counter(out.deltas) == {("Apple", "Fruit", None, None, None): -1,
                                      ("Apple", "Fruit", "Apple", "Alice", 10): 1}
    out = h.insert(1, ("Apple", "Bob", 20))  # second match: no padding change
    assert out.deltas == [(("Apple", "Fruit", "Apple", "Bob", 20), 1)]


def test_left_join_last_match_gone_restores_padding():
    h = Harness(left()).seed(0, [("Apple", "Fruit"), ("Apple", "Food")])
    h.seed(1, [("Apple", "Alice", 10), ("Apple", "Bob", 20)])
    h.assume_output(*[(p, c, "Apple", u, n) for p, c in [("Apple", "Fruit"), ("Apple", "Food")]
                      for u, n in [("Alice", 10), ("Bob", 20)]])
    out = h.delete(1, ("Apple", "Alice", 10))
    assert as_counter(out.deltas) == {("Apple", "Fruit", "Apple", "Alice", 10): -1,
                                      ("Apple", "Food", "Apple", "Alice", 10): -1}
    out = h.delete(1, ("Apple", "Bob", 20))
    assert as_counter(out.deltas) == {("Apple", "Fruit", "Apple", "Bob", 20): -1,
                                      ("Apple", "Food", "Apple", "Bob", 20): -1,
                                      ("Apple", "Fruit", None, None, None): 1,
                                      ("Apple", "Food", None, None, None): 1}


def test_left_join_batch_overlay_on_right_deltas():
    h = Harness(left()).seed(0, [("Apple", "Fruit")])
    h.assume_output(("Apple", "Fruit", None, None, None))
    # +a, +b, -a, -b in one batch: padding retracted once at the start, back at the end.
    batch = [(("Apple", "A", 1), 1), (("Apple", "B", 2), 1),
             (("Apple", "A", 1), -1), (("Apple", "B", 2), -1)]
    out = h.feed(1, batch)
    assert as_counter(out.deltas) == {}
    assert [d for d in out.deltas if d[0][2] is None] == [
        (("Apple", "Fruit", None, None, None), -1), (("Apple", "Fruit", None, None, None), 1)]
    assert h.rows() == {("Apple", "Fruit", None, None, None): 1}


def test_left_join_right_hole_misses():
    h = Harness(left()).seed(0, [("Apple", "Fruit")]).hole(1, ("Apple",))
    d = (("Apple", "A", 1), 1)
    assert h.feed(1, [d]).misses == [Miss(1, ("Apple",), d)]
    d0 = (("Apple", "Food"), 1)
    assert h.feed(0, [d0]).misses == [Miss(1, ("Apple",), d0)]


def test_right_rows_without_left_rows_emit_nothing():
    h = Harness(left())
    assert h.insert(1, ("Apple", "A", 1)).deltas == []


def test_multi_column_keys():
    op = Join(("a", "b", "c", "d", "e"), (0, 1), (1, 0), "inner", left_width=2)
    h = Harness(op).seed(1, [(2, 1, "x")])
    assert h.insert(0, (1, 2)).deltas == [((1, 2, 2, 1, "x"), 1)]


def test_provenance_and_display():
    op = inner()
    assert op.side_indexes() == {0: (0,), 1: (0,)}
    assert op.resolve(0) == [(0, 0), (1, 0)]
    assert op.resolve(1) == [(0, 1)]
    assert op.resolve(2) == [(1, 0), (0, 0)]
    assert op.resolve(4) == [(1, 2)]
    assert left().resolve(0) == [(0, 0)] and left().resolve(2) == [(1, 0)]
    assert op.description() == "⋈[product = v_product]"
    assert left().description().startswith("⟕")
    assert op.signature() != left().signature()


def test_bad_arguments():
    with pytest.raises(ValueError, match="kinds are inner, left"):
        Join(COLS, (0,), (0,), "full", left_width=2)
    with pytest.raises(ValueError, match="out of range"):
        Join(COLS, (5,), (0,), "inner", left_width=2)
