"""Reads of keys shelved in the disk tier, on the reader's own thread.

A lock-free read (reads.py) that misses a reader key used to hand it to the executor,
which brought the key back from the disk tier and answered: under many readers every
such read queued behind the executor's packets and its trips to the store (32 readers
over 1M keys, 1% in memory: the executor busy 30 s of 30, 7.4k keys/s, p50 40 ms). A
shelved key's contents can't change while it stays shelved (anything that would change
it brings it back first, and it is shelved again under a new row: tier.py), so the reader
reads the row itself:

* a reader key shelved in row ``ref`` is exact at the published LSN ``L`` if the row was
  written before ``L`` was published: ``ref`` is below the tier's next row as of that
  publish (``Publisher.tier_floor``, written after the LSN, so a reader that reads it
  first and the LSN second only ever gets a floor older than its LSN: safe). The key was
  shelved then and still was when the reader looked (``State.shelved``), so nothing
  changed it in between, and its contents at ``L`` are the row's. A row shelved later (in
  a packet not yet published) may hold contents of a newer LSN: that key goes to the
  executor, as does one whose row is gone (brought back and collected meanwhile);
* a view's key derived from its aggregate's (``State.source``: a hole whenever it is out
  of memory, evictor.py) is derived here from the aggregate's shelved row under the same
  rule, through the filter and project nodes between them (pure functions of their
  input), as the executor would derive it (fills.py ``_derive``).

Each key read this way is logged (``Publisher.log_shelf_reads``) so that the executor
brings it back into memory later, between packets, as the most recently used, if it was
read from the tier recently before too (``Promoter``): hot keys still end up in memory,
but no read waits for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from partialflow.operators.base import Row
from partialflow.server.checkpoint.merge import load_value
from partialflow.server.dataflow import bags
from partialflow.server.dataflow.fills import derived_deltas

if TYPE_CHECKING:
    from partialflow.server.dataflow.state import State


def read_shelved(st: State, keys: list[Row], floor: int) -> dict[Row, list[Row]]:
    """The rows of those of ``keys`` (reader ``st``'s keys a lock-free read found not in
    memory) that can be read from the disk tier, exact at a published LSN whose
    ``tier_floor`` was ``floor`` or more (module docstring). The others are left to the
    executor."""
    src = st.source[0] if st.source is not None else None
    tier = st.tier if st.tier is not None else (src.tier if src is not None else None)
    if tier is None or st.kind != "rows" or not floor:
        return {}
    own: dict[Row, int] = {}
    derived: dict[Row, int] = {}
    for k in keys:
        ref = st.shelved(k)
        if ref is not None:
            if ref < floor:
                own[k] = ref
        elif src is not None:
            ref = src.shelved(k)
            if ref is not None and ref < floor:
                derived[k] = ref
    if not own and not derived:
        return {}
    blobs = tier.peek_many([*own.values(), *derived.values()])
    out: dict[Row, list[Row]] = {}
    for k, ref in own.items():
        blob = blobs.get(ref)
        if blob is not None:
            bucket = load_value(blob)
            out[k] = bags.rows_of((bucket,) if st.flat else bucket.values())
    if derived:
        assert src is not None and st.source is not None
        for k, ref in derived.items():
            blob = blobs.get(ref)
            if blob is not None:
                out[k] = _derive(src, st.source[1], load_value(blob))
    return out


def _derive(src: State, chain: list[Any], entries: dict[Row, Any]) -> list[Row]:
    """A view key's rows from its aggregate's key (its groups' entries)."""
    bag: dict[Row, int] = {}
    for row, sign in derived_deltas(src, chain, entries.items()):
        bag[row] = bag.get(row, 0) + sign
    return bags.rows_of((bag,))


class Promoter:
    """Between packets (the executor): which keys readers read from the disk tier come
    back into memory, as the most recently used. Only a key read from the tier a second
    time while it is among the last ``seen`` keys read from it: under a skewed load most
    keys read from the tier are the long tail's, read once in a long while, and bringing
    each back would push a hotter key out and cost the executor a trip to the store each
    way (100k keys, Zipf(0.99), 32 readers: every key read brought back kept the executor
    busy the whole run for a memory hit rate no better than without it)."""

    # 4,096 rather than 16,384: at 100k keys and 32 readers, a memory hit rate of 0.545
    # against 0.517, with fewer keys shuffled in and out.
    def __init__(self, seen: int = 4_096) -> None:
        self._seen: LRUCache[tuple[int, Row], None] = LRUCache(maxsize=seen)

    def run(self, reads: list[tuple[State, list[Row]]], derive: Callable[[State, Row], bool],
            most: int) -> None:
        """Bring back keys of ``reads`` read from the tier before; a view's key derived from
        its aggregate's is derived again (``derive``: fills.py ``derive_now``). At most
        ``most`` keys: the rest were hints, dropped. The caller then accounts the changes
        and keeps the memory limit."""
        seen = self._seen
        for st, keys in reads:
            part = []
            for k in keys:
                key = (st.sid, k)
                if key in seen:
                    del seen[key]
                    part.append(k)
                else:
                    seen[key] = None
            part = part[:most]
            most -= len(part)
            if not part:
                continue
            st.unshelve(part, read=True)
            if st.source is not None:
                st.source[0].unshelve(part, read=True)
                for k in part:
                    derive(st, k)
