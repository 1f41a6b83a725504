"""Pieces shared by the grouped operators (aggregate, top-k, distinct)."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from partialflow.operators.base import Delta, Row


class Exhausted(Exception):
    """A group's bounded candidates ran out: its output can't be computed incrementally."""


def by_group(deltas: list[Delta], group_of: Callable[[Row], Row]) -> dict[Row, list[Delta]]:
    """The batch split by group, keeping each group's deltas in arrival order.

    A grouped operator reads each group's entry once per batch, folds all of the group's
    deltas into a copy and writes it back once: the state it reads is the state before
    the batch, so the batch's own deltas must be accumulated here.
    """
    groups: dict[Row, list[Delta]] = {}
    for d in deltas:
        g = group_of(d[0])
        bucket = groups.get(g)
        if bucket is None:
            groups[g] = [d]
        else:
            bucket.append(d)
    return groups


def column_getter(cols: tuple[int, ...]) -> Callable[[Row], Row]:
    """row -> tuple of the values at ``cols`` (always a tuple, even for 0 or 1 columns)."""
    if not cols:
        return lambda row: ()
    if len(cols) == 1:
        c = cols[0]
        return lambda row: (row[c],)
    return itemgetter(*cols)  # a tuple for two or more columns, built in C
