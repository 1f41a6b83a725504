"""Approximate memory sizes of rows and state entries, for the memory limit.

Honest but cheap: ``sys.getsizeof`` of the containers and values, without following
shared objects (None, booleans and small ints are singletons in CPython and cost a
pointer only). Used by the executor for row states and by grouped operators for entries.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

_getsizeof = sys.getsizeof
# The pointer a container holds for each element.
POINTER = 8
# Per-key overhead of a dict slot (hash, key and value pointers, load factor slack).
DICT_SLOT = 3 * POINTER * 3 // 2


# Sizes that depend only on the type (and, for ints, on fitting in one 30-bit digit),
# taken from the running interpreter rather than assumed.
_FLOAT = _getsizeof(0.5)
_INT_ONE_DIGIT = _getsizeof(2**29)
_ONE_DIGIT = 2**30


def value_size(v: Any) -> int:
    """Bytes a value owns beyond the pointer to it."""
    c = v.__class__
    if c is float:
        return _FLOAT
    if c is int:
        if -5 <= v <= 256:  # CPython's cached small ints
            return 0
        return _INT_ONE_DIGIT if -_ONE_DIGIT < v < _ONE_DIGIT else _getsizeof(v)
    if v is None or c is bool:
        return 0
    return _getsizeof(v)


def row_size(row: tuple[Any, ...]) -> int:
    """Bytes held by a row tuple and its values: ``sys.getsizeof`` of the tuple plus
    ``value_size`` of each value."""
    size = _getsizeof(row)
    for v in row:  # value_size inlined, and no call for floats and one-digit ints:
        c = v.__class__  # this runs for every row a state stores
        if c is int:
            if -5 <= v <= 256:
                continue
            size += _INT_ONE_DIGIT if -_ONE_DIGIT < v < _ONE_DIGIT else _getsizeof(v)
        elif c is float:
            size += _FLOAT
        elif v is not None and c is not bool:
            size += _getsizeof(v)
    return size


def rows_size(rows: Iterable[tuple[Any, ...]]) -> int:
    """Bytes of several rows (not counting the container that holds them)."""
    return sum(row_size(r) for r in rows)


def list_size(items: list[Any]) -> int:
    """Bytes of a list object itself (its pointer array), not of its elements."""
    return _getsizeof(items)
