"""Row sizes for the memory limit: the fast path of ``row_size`` (no call for floats and
one-digit ints) must agree with ``sys.getsizeof`` of the tuple plus ``value_size`` of
each value, the definition the state accounting and checkpoints rely on."""

from __future__ import annotations

import sys

import pytest

from partialflow.operators.sizes import row_size, value_size

EDGES = [
    None, True, False, 0, -5, -6, 256, 257, 2**29, 2**30 - 1, 2**30, -(2**30) + 1, -(2**30),
    2**62, -(2**63), 2**64, 0.5, -0.0, float("nan"), float("inf"), "", "abc", "é" * 5,
    "\U0001f600", b"bytes",
]


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_row_size_of_one_value_is_getsizeof_plus_value_size(value: object) -> None:
    assert row_size((value,)) == sys.getsizeof((value,)) + value_size(value)


def test_row_size_of_mixed_rows() -> None:
    rows = [tuple(EDGES), (), ("p1", "u2", 10**6), (1, 2**40, 3.25, None)]
    for row in rows:
        assert row_size(row) == sys.getsizeof(row) + sum(value_size(v) for v in row)
