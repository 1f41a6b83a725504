"""Sizes for the memory limit: the fast paths of ``value_size`` and ``row_size`` (no
``sys.getsizeof`` call for floats and one-digit ints) must give exactly what the
definition gives: ``sys.getsizeof`` of the value, except the singletons CPython shares
(None, the booleans, the cached small ints -5..256), which a row only points to."""

from __future__ import annotations

import sys

import pytest

from partialflow.operators.sizes import row_size, value_size

EDGES = [
    None, True, False, 0, -5, -6, 256, 257, 2**29, 2**30 - 1, 2**30, -(2**30) + 1, -(2**30),
    2**62, -(2**63), 2**64, 0.5, -0.0, float("nan"), float("inf"), "", "abc", "é" * 5,
    "\U0001f600", b"bytes",
]


def owned(v: object) -> int:
    """The definition, written plainly."""
    if v is None or isinstance(v, bool) or (type(v) is int and -5 <= v <= 256):
        return 0
    return sys.getsizeof(v)


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_value_and_row_size_follow_the_definition(value: object) -> None:
    assert value_size(value) == owned(value)
    assert row_size((value,)) == sys.getsizeof((value,)) + owned(value)


def test_row_size_of_mixed_rows() -> None:
    rows = [tuple(EDGES), (), ("p1", "u2", 10**6), (1, 2**40, 3.25, None)]
    for row in rows:
        assert row_size(row) == sys.getsizeof(row) + sum(owned(v) for v in row)
