"""Materialized state: rows or group entries, filled per fill key, with holes.

A state materializes one stream (a node's input or output) for lookups by its index
columns. It is filled in units of *fill keys* (the values of its partial columns): a
fill key is a **hole** (absent: updates for it are dropped here), **pending** (being
filled by an upquery from snapshot V: updates with LSN > V are held until the reply
lands) or **filled** (a bucket, possibly empty, that is exact). A full state has no
partial columns: its one fill key ``()`` is loaded when the view is created and is never
evicted.

States store; they don't decide. The executor and its helpers (the only writers) move
keys between hole, pending and filled through the methods below, on the executor thread
under its lock; nothing outside this module touches the dicts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from partialflow.operators.base import Row
from partialflow.operators.grouped import column_getter
from partialflow.operators.sizes import row_size
from partialflow.operators.values import canonical_row

if TYPE_CHECKING:
    from partialflow.server.dataflow.fill import Fill
    from partialflow.server.dataflow.graph import Node

_log = logging.getLogger("partialflow.state")

Mode = Literal["partial", "miss", "full"]
# partial: holes per fill key, filled together with the states above it (same key);
# miss:    a join index whose holes are tolerated: a lookup miss drops the update and
#          evicts the downstream keys it could affect, then fills that index key;
# full:    always complete, loaded at view creation.

KeyStatus = Literal["hit", "hole", "pending"]

BUCKET_OVERHEAD = 240  # dict + bookkeeping per filled key, measured with sys.getsizeof

# A filled key's contents: index key -> bag (row -> multiplicity) for a rows state,
# group key -> operator entry for a grouped state.
Bucket = dict[Row, Any]


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
    # Trace links: states directly below whose same fill key must be filled before ours
    # (``below``) and states above that were filled relying on ours (``dependents``).
    below: list[State] = field(default_factory=list)
    dependents: list[State] = field(default_factory=list)
    # Deriving this state from a grouped state below through filter/project nodes only.
    source: tuple[State, list[Node]] | None = None
    anomalies: int = 0
    reason: str = ""  # why this mode was chosen (materialize.py; shown by explain)
    _buckets: dict[Row, Bucket] = field(default_factory=dict, repr=False)
    _sizes: dict[Row, int] = field(default_factory=dict, repr=False)
    # The sum of ``_sizes``, kept as they change: the evictor reads every state's total
    # at each packet's end instead of re-reading the size of each key a write changed.
    _total: int = field(default=0, repr=False)
    _pending: dict[Row, Fill] = field(default_factory=dict, repr=False)
    # Filled keys blocked on an index fill (fill.py): their buckets, kept aside while the
    # key is pending on that fill.
    _blocked: dict[Row, Bucket] = field(default_factory=dict, repr=False)
    # What changed since the last checkpoint capture (checkpointer.py), None while
    # checkpoints are off: fill keys that became filled or stopped being filled, and index
    # keys (group keys) whose contents changed.
    _dirty_fk: set[Row] | None = field(default=None, repr=False)
    _dirty_ik: set[Row] | None = field(default=None, repr=False)
    # Not yet captured since it was created: its next capture starts from nothing.
    fresh: bool = True
    # -- keys (set in __post_init__) -------------------------------------------------
    # row -> its fill key; row -> its index key; index key (for a grouped state: group
    # key) -> its fill key.
    fill_key_of_row: Callable[[Row], Row] = field(init=False, repr=False)
    index_key_of_row: Callable[[Row], Row] = field(init=False, repr=False)
    fill_key_of_index: Callable[[Row], Row] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Where the fill key sits inside an index key (partial ⊆ index columns).
        self.fk_in_index = tuple(self.index_cols.index(c) for c in self.partial_cols)
        # The key functions run for every delta: built once, as the cheapest closure for
        # their shape (an index key that is its own fill key is returned as it is).
        self.fill_key_of_row = column_getter(self.partial_cols)
        self.index_key_of_row = column_getter(self.index_cols)
        same = self.fk_in_index == tuple(range(len(self.index_cols)))
        self.fill_key_of_index = _same if same else column_getter(self.fk_in_index)
        # A row's index key is its fill key (a join index or reader keyed by exactly its
        # partial columns): a rows bucket then has that one index key.
        self._ik_is_fk = same

    def release(self) -> None:
        """Drop every key's contents (the state is no longer used: its view was dropped
        or the dataflow closed), so the memory is freed now by reference counting."""
        self._buckets.clear()
        self._blocked.clear()
        self._sizes.clear()
        self._total = 0
        self._pending.clear()
        self._dirty_fk = self._dirty_ik = None

    # -- hole, pending or filled -------------------------------------------------------
    def lookup(self, fk: Row) -> KeyStatus:
        if fk in self._buckets:
            return "hit"
        return "pending" if fk in self._pending else "hole"

    def is_filled(self, fk: Row) -> bool:
        return fk in self._buckets

    def is_pending(self, fk: Row) -> bool:
        return fk in self._pending

    def bucket(self, fk: Row) -> Bucket | None:
        """The filled key's bucket, or None for a hole or a pending key (hot path)."""
        return self._buckets.get(fk)

    def pending_fill(self, fk: Row) -> Fill | None:
        return self._pending.get(fk)

    def filled_keys(self) -> list[Row]:
        return list(self._buckets)

    def pending_keys(self) -> list[Row]:
        return list(self._pending)

    def pending_fills(self) -> list[Fill]:
        """Each fill this state has keys pending on, once, in the order they came."""
        return list({id(f): f for f in self._pending.values()}.values())

    @property
    def keys_filled(self) -> int:
        return len(self._buckets)

    def has_pending(self) -> bool:
        return bool(self._pending)

    def holds_nothing(self) -> bool:
        """A partial state with no filled, pending or blocked key: every update for it
        is dropped here (hot path: checked per node per packet)."""
        return self.mode != "full" and not (self._buckets or self._pending or self._blocked)

    # -- checkpoints -------------------------------------------------------------------
    def track_changes(self) -> None:
        """Start recording what changes, for incremental checkpoints."""
        if self._dirty_fk is None:
            self._dirty_fk, self._dirty_ik = set(), set()

    def take_changes(self) -> tuple[set[Row], set[Row]]:
        """(fill keys, index keys) changed since the last call; tracking goes on."""
        fks, iks = self._dirty_fk or set(), self._dirty_ik or set()
        if self._dirty_fk is not None:
            self._dirty_fk, self._dirty_ik = set(), set()
        return fks, iks

    def restore(self, fk: Row, bucket: Bucket, size: int | None = None) -> None:
        """Make ``fk`` filled with a checkpointed bucket (recovery, before any update),
        sized as recorded, or as ``apply_row``/``set_entry`` would have sized it."""
        self._buckets[fk] = bucket
        self._set_size(fk, size if size is not None else self.measured_size(fk))
        self._moved(fk)

    def measured_size(self, fk: Row) -> int:
        """A filled key's bytes measured afresh (what the running total must equal)."""
        bucket = self._buckets[fk]
        size = BUCKET_OVERHEAD
        if self.kind == "rows":
            for bag in bucket.values():
                for row, n in bag.items():
                    size += row_size(row) * n
        else:
            for group, entry in bucket.items():
                size += self._entry_size(entry) + row_size(group)
        return size

    def mark_changed(self, fk: Row) -> None:
        """Record that ``fk`` changed (filled, or not) for the next checkpoint."""
        self._moved(fk)

    def _moved(self, fk: Row) -> None:
        if self._dirty_fk is not None:
            self._dirty_fk.add(fk)

    # -- moving keys (executor thread only) ------------------------------------------
    def fill(self, fk: Row) -> Bucket:
        """Make ``fk`` filled with an empty bucket (the caller loads it); returns it."""
        bucket: Bucket = {}
        self._buckets[fk] = bucket
        self._set_size(fk, BUCKET_OVERHEAD)
        self._moved(fk)
        return bucket

    def mark_pending(self, fk: Row, fill: Fill) -> None:
        self._pending[fk] = fill

    def clear_pending(self, fk: Row, fill: Fill) -> bool:
        """``fk`` is no longer pending on ``fill`` (if it still was); True if it was. It
        is a hole then (a blocked key's rows are dropped: use ``unblock`` to keep them)."""
        if self._pending.get(fk) is fill:
            del self._pending[fk]
            if self._blocked.pop(fk, None) is not None:
                self._total -= self._sizes.pop(fk, 0)
                self._moved(fk)
            return True
        return False

    def forget_pending(self) -> None:
        for fk in self._blocked:
            self._total -= self._sizes.pop(fk, 0)
            self._moved(fk)
        self._blocked.clear()
        self._pending.clear()

    def block(self, fk: Row, fill: Fill) -> None:
        """Keep filled ``fk``'s rows aside, pending on index fill ``fill``: readers wait
        and updates are held by the fill until ``unblock``."""
        self._blocked[fk] = self._buckets.pop(fk)
        self._pending[fk] = fill
        self._moved(fk)  # a checkpoint records a blocked key as a hole

    def unblock(self, fk: Row, fill: Fill) -> bool:
        """``fill`` landed: blocked ``fk`` is filled with its rows again; False if it was
        not blocked on ``fill`` (evicted meanwhile)."""
        if self._pending.get(fk) is not fill or fk not in self._blocked:
            return False
        del self._pending[fk]
        self._buckets[fk] = self._blocked.pop(fk)
        self._moved(fk)
        return True

    def is_blocked(self, fk: Row) -> bool:
        return fk in self._blocked

    def mark_hole(self, fk: Row) -> int:
        """Turn a filled (or blocked) key back into a hole; returns the bytes released."""
        self._buckets.pop(fk, None)
        self._blocked.pop(fk, None)
        self._moved(fk)
        size = self._sizes.pop(fk, 0)
        self._total -= size
        return size

    # -- rows states -----------------------------------------------------------------
    def apply_row(self, bucket: Bucket, fk: Row, row: Row, sign: int) -> None:
        """Apply one delta to a filled rows bucket (a bag: row -> multiplicity)."""
        # Rows computed afresh (an AVG of inf and -inf, a retraction rebuilt from an
        # aggregate's entry) carry NaN objects of their own; one NaN keeps them one row.
        row = canonical_row(row)
        ik = self.index_key_of_row(row)
        if self._dirty_ik is not None:
            self._dirty_ik.add(ik)
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
                self._anomaly(row, fk)
            bag[row] = n
        else:
            del bag[row]
            if not bag:
                del bucket[ik]
        self._grow(fk, size if sign > 0 else -size)

    def apply_rows(self, bucket: Bucket, fk: Row, deltas: list[tuple[Row, int]]) -> None:
        """``apply_row`` of each delta in order (all of fill key ``fk``), with the size
        total updated once."""
        if self._ik_is_fk and self.partial_cols:
            self._apply_rows_one_bag(bucket, fk, deltas)
            return
        ik_of, dirty = self.index_key_of_row, self._dirty_ik
        grown = 0
        for row, sign in deltas:
            row = canonical_row(row)
            ik = ik_of(row)
            if dirty is not None:
                dirty.add(ik)
            bag = bucket.get(ik)
            if bag is None:
                bag = bucket[ik] = {}
            n = bag.get(row, 0) + sign
            if n != 0:
                if n < 0:  # see apply_row
                    self._anomaly(row, fk)
                bag[row] = n
            else:
                del bag[row]
                if not bag:
                    del bucket[ik]
            size = row_size(row)
            grown += size if sign > 0 else -size
        self._grow(fk, grown)

    def _apply_rows_one_bag(self, bucket: Bucket, fk: Row, deltas: list[tuple[Row, int]]
                            ) -> None:
        """``apply_rows`` where every row's index key is ``fk``: one bag for the batch
        (the hot path of join indexes and readers; the general loop finds each row's
        bag anew)."""
        if self._dirty_ik is not None:
            self._dirty_ik.add(fk)
        bag = bucket.get(fk)
        if bag is None:
            bag = bucket[fk] = {}
        get = bag.get
        grown = 0
        for row, sign in deltas:
            for v in row:  # canonical_row inlined: NaN objects of their own are one row
                if v != v:
                    row = canonical_row(row)
                    break
            n = get(row, 0) + sign
            if n > 0:
                bag[row] = n
            elif n == 0:
                del bag[row]
            else:  # see apply_row
                self._anomaly(row, fk)
                bag[row] = n
            size = row_size(row)
            grown += size if sign > 0 else -size
        if not bag:
            del bucket[fk]
        self._grow(fk, grown)

    def _anomaly(self, row: Row, fk: Row) -> None:
        self.anomalies += 1
        _log.warning("state %s: count of row %r fell below zero (fill key %r)",
                     self.label, row, fk)

    def rows_at(self, ik: Row) -> list[Row] | None:
        """The bag of rows at index key ``ik``, or None when its fill key is a hole or
        pending (lookups can't use data that isn't there yet)."""
        bucket = self._buckets.get(self.fill_key_of_index(ik))
        if bucket is None:
            return None
        bag = bucket.get(ik)
        if not bag:
            return []
        if len(bag) == 1:  # the common case of a key index: one distinct row
            for r, n in bag.items():
                return [r] * n
        return [r for r, n in bag.items() for _ in range(n)]

    def bucket_rows(self, fk: Row) -> list[Row]:
        """Every row of a filled key of a rows state, repeated by multiplicity."""
        # Published for every changed reader key after every packet: no range() per row.
        out: list[Row] = []
        add, extend = out.append, out.extend
        for bag in self._buckets[fk].values():
            for r, n in bag.items():
                if n == 1:
                    add(r)
                elif n > 1:
                    extend([r] * n)
        return out

    # -- grouped states --------------------------------------------------------------
    def set_entry(self, fk: Row, group: Row, entry: Any, size: int) -> None:
        """Set (``entry`` None: remove) a group's entry in filled key ``fk``."""
        bucket = self._buckets[fk]
        if self._dirty_ik is not None:
            self._dirty_ik.add(group)
        if entry is not None:
            old = bucket.get(group)
            bucket[group] = entry
            # The group key's own bytes count only when the group comes or goes.
            delta = size - self._entry_size(old) if old is not None else size + row_size(group)
        else:
            old = bucket.pop(group, None)
            if old is None:
                return
            delta = -(self._entry_size(old) + row_size(group))
        self._grow(fk, delta)

    def set_entries(self, writes: dict[Row, Any], size_of: Callable[[Any], int]) -> list[Row]:
        """``set_entry`` of each group (``size_of`` gives an entry's size), the size total
        updated once per fill key; returns the fill keys touched, in order of first touch."""
        fk_of, buckets, dirty = self.fill_key_of_index, self._buckets, self._dirty_ik
        entry_size = self._entry_size
        grown: dict[Row, int] = {}
        for group, entry in writes.items():
            fk = fk_of(group)
            bucket = buckets[fk]
            if dirty is not None:
                dirty.add(group)
            if entry is not None:
                old = bucket.get(group)
                bucket[group] = entry
                size = size_of(entry)
                delta = size - entry_size(old) if old is not None else size + row_size(group)
            else:
                old = bucket.pop(group, None)
                delta = 0 if old is None else -(entry_size(old) + row_size(group))
            grown[fk] = grown.get(fk, 0) + delta
        grow = self._grow
        for fk, delta in grown.items():
            grow(fk, delta)
        return list(grown)

    def entry(self, group: Row) -> Any | None:
        """A group's entry, or None when the group is absent or its key not filled."""
        bucket = self._buckets.get(self.fill_key_of_index(group))
        return None if bucket is None else bucket.get(group)

    def entries(self, fk: Row) -> list[tuple[Row, Any]]:
        """(group, entry) pairs of a filled key of a grouped state."""
        return list(self._buckets[fk].items())

    def _entry_size(self, entry: Any) -> int:
        op = self.node.op
        return op.entry_size(entry) if op is not None else 0  # type: ignore[attr-defined]

    # -- sizes -----------------------------------------------------------------------
    def _set_size(self, fk: Row, size: int) -> None:
        self._total += size - self._sizes.get(fk, 0)
        self._sizes[fk] = size

    def _grow(self, fk: Row, delta: int) -> None:
        """A filled key's bytes changed by ``delta`` (a key without a recorded size
        starts from an empty bucket's)."""
        sizes = self._sizes
        old = sizes.get(fk)
        if old is None:
            old = BUCKET_OVERHEAD
            self._total += BUCKET_OVERHEAD
        sizes[fk] = old + delta
        self._total += delta

    def size_of(self, fk: Row) -> int:
        return self._sizes.get(fk, 0)

    @property
    def memory_bytes(self) -> int:
        """Bytes of every filled and blocked key (kept as they change: O(1))."""
        return self._total

    def recounted_bytes(self) -> int:
        """``memory_bytes`` summed afresh from the keys' sizes (for checks)."""
        return sum(self._sizes.values())

    def describe(self, live: bool = True) -> str:
        key = ",".join(map(str, self.partial_cols))
        idx = ",".join(map(str, self.index_cols))
        mode = {
            "partial": f"partial on [{key}]",
            "miss": f"partial (evict-on-miss) on [{key}]",
            "full": "full",
        }[self.mode]
        head = f"{self.kind} state {mode}, index [{idx}]"
        return f"{head}, {len(self._buckets)} keys filled, {self.memory_bytes} B" if live else head


def _same(key: Row) -> Row:
    return key


class StateAccess:
    """The read-only state an operator sees (operators/base.py StateView), for one node.

    ``own_bucket``: a grouped state being built in Python (a derivation), read instead of
    the node's own state."""

    __slots__ = ("node", "own_bucket")

    def __init__(self, node: Node, own_bucket: Bucket | None = None) -> None:
        self.node = node
        self.own_bucket = own_bucket

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        return self.node.sides[side].rows_at(key)

    def own(self, group: Row) -> Any | None:
        if self.own_bucket is not None:
            return self.own_bucket.get(group)
        st = self.node.own
        assert st is not None
        return st.entry(group)
