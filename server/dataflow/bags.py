"""Bags of rows (row -> multiplicity): how rows states (state.py) store their rows.

A rows state keeps, per filled fill key, either one bag (a ``flat`` state, whose index
key is its fill key) or a dict of bags by index key. These functions are the loops over
them, apart from the state's bookkeeping of which keys are filled, pending or blocked;
the state passes in its own dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from partialflow.operators.base import Row
from partialflow.operators.values import canonical_row

Delta = tuple[Row, int]


def apply_deltas(buckets: dict[Row, Any], counts: dict[Row, int], deltas: list[Delta],
                 fk_of: Callable[[Row], Row], ik_of: Callable[[Row], Row] | None,
                 dirty: set[Row] | None, applied: list[Row] | None
                 ) -> tuple[dict[Row, list[Delta]], int, list[tuple[Row, Row]]]:
    """Apply each delta whose fill key has a bucket (``ik_of`` None: the bucket is the
    key's one bag; else a dict of bags by index key), counting its rows in ``counts``.

    Returns the deltas of other keys by fill key (in order), the rows added in all, and
    the anomalies: (row, fill key) of rows whose multiplicity fell below zero. A negative count (a
    retraction of a row never seen) would mean the state diverged from its stream; it is
    kept (so a later insert cancels it) and counted, never shown (reads skip counts
    <= 0). ``dirty`` collects the index keys changed, ``applied`` the fill keys (once
    per delta)."""
    missed: dict[Row, list[Delta]] = {}
    anomalies: list[tuple[Row, Row]] = []
    rows = 0
    for d in deltas:
        row, sign = d
        fk = fk_of(row)
        bucket = buckets.get(fk)
        if bucket is None:
            held = missed.get(fk)
            if held is None:
                missed[fk] = [d]
            else:
                held.append(d)
            continue
        if ik_of is None:
            ik, bag = fk, bucket
        else:
            ik = ik_of(row)
            bag = bucket.get(ik)
            if bag is None:
                bag = bucket[ik] = {}
        # This loop runs for every row every state stores: no call per row.
        for v in row:
            if v != v:
                row = canonical_row(row)
                break
        n = bag.get(row, 0) + sign
        if n > 0:
            bag[row] = n
        elif n == 0:
            del bag[row]
            if not bag and ik_of is not None:
                del bucket[ik]
        else:
            bag[row] = n
            anomalies.append((row, fk))
        counts[fk] += sign
        rows += sign
        if dirty is not None:
            dirty.add(ik)
        if applied is not None:
            applied.append(fk)
    return missed, rows, anomalies


def log_changes(watched: dict[Row, Any], buckets: dict[Row, Any], deltas: list[Delta],
                fk_of: Callable[[Row], Row]) -> None:
    """Add each delta of a watched, filled key to its log (row -> net count; a None log
    stays None), rows canonical as ``apply_deltas`` stores them."""
    for row, sign in deltas:
        fk = fk_of(row)
        log = watched.get(fk)
        if log is not None and fk in buckets:
            log[canonical_row(row)] += sign


def listed(bag: dict[Row, int]) -> list[Row]:
    """A bag's rows, each repeated by its multiplicity."""
    if len(bag) == 1:  # the common case of a key index: one distinct row
        for r, n in bag.items():
            return [r] * n
    return [r for r, n in bag.items() for _ in range(n)]


def rows_of(bags: Any) -> list[Row]:
    """Every row of several bags, repeated by multiplicity."""
    # Published for every changed reader key after every packet: no range() per row.
    out: list[Row] = []
    add_one, extend = out.append, out.extend
    for bag in bags:
        for r, n in bag.items():
            if n == 1:
                add_one(r)
            elif n > 1:
                extend([r] * n)
    return out
