"""Materialized state: rows or group entries, filled per fill key, with holes.

A state materializes one stream (a node's input or output) for lookups by its index
columns. It is filled in units of *fill keys* (the values of its partial columns): a
fill key is a **hole** (absent: updates for it are dropped here), **pending** (being
filled by an upquery from snapshot V: updates with LSN > V are held until the reply
lands) or **filled** (a bucket, possibly empty, that is exact). A full state has no
partial columns: its one fill key ``()`` is loaded when the view is created and is never
evicted.

States store; they don't decide. The executor (the only writer) moves keys between hole,
pending and filled, and all mutation happens on its thread under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import logging

from partialflow.operators.base import Row
from partialflow.operators.sizes import row_size

if TYPE_CHECKING:
    from partialflow.server.graph import Node  # noqa: F401
    from partialflow.server.upquery import Fill

_log = logging.getLogger("partialflow.state")

Mode = Literal["partial", "miss", "full"]
# partial: holes per fill key, filled together with the states above it (same key);
# miss:    a join index whose holes are tolerated: a lookup miss drops the update and
#          evicts the downstream keys it could affect, then fills that index key;
# full:    always complete, loaded at view creation.

BUCKET_OVERHEAD = 240  # dict + bookkeeping per filled key, measured with sys.getsizeof


@dataclass(eq=False)
class State:
    """One materialization. ``kind`` is "rows" (a bag of rows per index key) or
    "grouped" (one entry per group key, owned by a grouped operator)."""

    sid: int
    node: Node
    kind: Literal["rows", "grouped"]
    index_cols: tuple[int, ...]
    partial_cols: tuple[int, ...]
    mode: Mode
    label: str = ""
    buckets: dict[Row, dict[Row, Any]] = field(default_factory=dict)
    sizes: dict[Row, int] = field(default_factory=dict)
    pending: dict[Row, Fill] = field(default_factory=dict)
    # Trace links: states directly below whose same fill key must be filled before ours
    # (``below``) and states above that were filled relying on ours (``dependents``).
    below: list[State] = field(default_factory=list)
    dependents: list[State] = field(default_factory=list)
    # Deriving this state from a grouped state below through filter/project nodes only.
    source: tuple[State, list[Node]] | None = None
    anomalies: int = 0
    reason: str = ""  # why the planner chose this mode (shown by explain)
    # Readers only: an immutable copy of each filled key's rows, republished by the
    # executor at the end of every packet, so reads of filled keys need no lock.
    published: dict[Row, tuple[Row, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Where the fill key sits inside an index key (partial ⊆ index columns).
        self.fk_in_index = tuple(self.index_cols.index(c) for c in self.partial_cols)

    # -- keys ------------------------------------------------------------------------
    def fill_key_of_row(self, row: Row) -> Row:
        return tuple([row[c] for c in self.partial_cols])

    def index_key_of_row(self, row: Row) -> Row:
        return tuple([row[c] for c in self.index_cols])

    def fill_key_of_index(self, key: Row) -> Row:
        return tuple([key[i] for i in self.fk_in_index])

    def is_filled(self, fk: Row) -> bool:
        return fk in self.buckets

    # -- rows states -----------------------------------------------------------------
    def apply_row(self, bucket: dict[Row, Any], fk: Row, row: Row, sign: int) -> None:
        """Apply one delta to a filled rows bucket (a bag: row -> multiplicity)."""
        ik = self.index_key_of_row(row)
        bag = bucket.get(ik)
        if bag is None:
            bag = bucket[ik] = {}
        n = bag.get(row, 0) + sign
        size = row_size(row)
        if n != 0:
            # A negative count (a retraction of a row never seen) would mean the state
            # diverged from its stream; it is kept (so a later insert cancels it) and
            # counted, never shown: reads skip counts <= 0, and stats report anomalies.
            if n < 0:
                self.anomalies += 1
                _log.warning("state %s: count of row %r fell below zero (fill key %r)", self.label, row, fk)
            bag[row] = n
        else:
            del bag[row]
            if not bag:
                del bucket[ik]
        self.sizes[fk] = self.sizes.get(fk, BUCKET_OVERHEAD) + (size if sign > 0 else -size)

    def rows_at(self, ik: Row) -> list[Row] | None:
        """The bag of rows at index key ``ik``, or None when its fill key is a hole or
        pending (lookups can't use data that isn't there yet)."""
        bucket = self.buckets.get(self.fill_key_of_index(ik))
        if bucket is None:
            return None
        bag = bucket.get(ik)
        if not bag:
            return []
        return [r for r, n in bag.items() for _ in range(n)]

    def bucket_rows(self, fk: Row) -> list[Row]:
        bucket = self.buckets[fk]
        return [r for bag in bucket.values() for r, n in bag.items() for _ in range(n)]


    # -- grouped states --------------------------------------------------------------
    def set_entry(self, fk: Row, group: Row, entry: Any, size: int) -> None:
        bucket = self.buckets[fk]
        old = bucket.pop(group, None)
        key_size = row_size(group)
        delta = -(self._entry_size(old) + key_size) if old is not None else 0
        if entry is not None:
            bucket[group] = entry
            delta += size + key_size
        self.sizes[fk] = self.sizes.get(fk, BUCKET_OVERHEAD) + delta

    def _entry_size(self, entry: Any) -> int:
        op = self.node.op
        return op.entry_size(entry) if op is not None else 0

    # -- filling and evicting (executor only) ----------------------------------------
    def new_bucket(self, fk: Row) -> dict[Row, Any]:
        self.buckets[fk] = bucket = {}
        self.sizes[fk] = BUCKET_OVERHEAD
        return bucket

    def drop(self, fk: Row) -> int:
        """Turn a filled key back into a hole; returns the bytes released."""
        self.buckets.pop(fk, None)
        return self.sizes.pop(fk, 0)

    @property
    def memory_bytes(self) -> int:
        return sum(self.sizes.values())

    def describe(self, live: bool = True) -> str:
        key = ",".join(map(str, self.partial_cols))
        idx = ",".join(map(str, self.index_cols))
        mode = {"partial": f"partial on [{key}]", "miss": f"partial (evict-on-miss) on [{key}]", "full": "full"}[self.mode]
        head = f"{self.kind} state {mode}, index [{idx}]"
        return f"{head}, {len(self.buckets)} keys filled, {self.memory_bytes} B" if live else head


class StateAccess:
    """The read-only state an operator sees (operators/base.py StateView), for one node."""

    __slots__ = ("node", "own_bucket")

    def __init__(self, node: Node, own_bucket: dict | None = None) -> None:
        self.node = node
        self.own_bucket = own_bucket

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        return self.node.sides[side].rows_at(key)

    def own(self, group: Row) -> Any | None:
        if self.own_bucket is not None:
            return self.own_bucket.get(group)
        st = self.node.own
        bucket = st.buckets.get(tuple([group[i] for i in st.fk_in_index]))
        return None if bucket is None else bucket.get(group)
