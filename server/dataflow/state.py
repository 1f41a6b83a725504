"""Materialized state: rows or group entries, filled per fill key, with holes.

A state materializes one stream (a node's input or output) for lookups by its index
columns. It is filled in units of *fill keys* (the values of its partial columns): a
fill key is a **hole** (absent: updates for it are dropped here), **pending** (being
filled by an upquery from snapshot V: updates with LSN > V are held until the reply
lands) or **filled** (a bucket, possibly empty, that is exact). A full state has no
partial columns: its one fill key ``()`` is loaded when the view is created and is never
evicted.

A filled key of a partial state is either in memory or *shelved* in the disk tier
(tier.py): still filled and exact, its contents on disk. Whatever reads or changes a
shelved key's contents through the methods below brings it back into memory first
(``_unshelve``), so callers see one kind of filled key; only the evictor, the publisher
and the checkpointer ask which kind (``in_memory``, ``resident``, ``shelved``).

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
from partialflow.server.checkpoint.merge import Shelved
from partialflow.server.dataflow import bags
from partialflow.server.dataflow.changelog import ChangeLog
from partialflow.server.dataflow.meter import SizeMeter

if TYPE_CHECKING:
    from partialflow.server.dataflow.fill import Fill
    from partialflow.server.dataflow.graph import Node
    from partialflow.server.dataflow.tier import Tier

_log = logging.getLogger("partialflow.state")

Mode = Literal["partial", "miss", "full"]
# partial: holes per fill key, filled together with the states above it (same key);
# miss:    a join index whose holes are tolerated: a lookup miss drops the update and
#          evicts the downstream keys it could affect, then fills that index key;
# full:    always complete, loaded at view creation.

KeyStatus = Literal["hit", "hole", "pending"]

# A filled key's contents: index key -> bag (row -> multiplicity) for a rows state,
# group key -> operator entry for a grouped state. A rows state whose index key is its
# fill key (a join index or reader keyed by exactly its partial columns) stores the one
# bag itself instead (``State.flat``): its keys are the many small ones, and the dict
# around each bag cost a second lookup per row (cache misses, in a state of a million
# rows). ``bucket`` hands out what is stored; ``index_entries`` the {index key: bag} view.
Bucket = dict[Row, Any]

# States are sized by counting (meter.py, ``SizeMeter``) and log what changes for
# checkpoints and subscriptions (changelog.py, ``ChangeLog``): parts each state owns.
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
    # Each filled (or blocked) key's rows or groups, their total and mean size.
    meter: SizeMeter = field(default_factory=SizeMeter, repr=False)
    _pending: dict[Row, Fill] = field(default_factory=dict, repr=False)
    # Filled keys blocked on an index fill (fill.py): their buckets, kept aside while the
    # key is pending on that fill.
    _blocked: dict[Row, Bucket] = field(default_factory=dict, repr=False)
    # What changed, for checkpoints and subscriptions.
    changelog: ChangeLog = field(default_factory=ChangeLog, repr=False)
    # The disk tier (set by the evictor for a partial state when there is one), and the
    # filled keys shelved in it: each one's row in the tier's store (only that stays in
    # memory; tier.py).
    tier: Tier | None = field(default=None, repr=False)
    _shelved: dict[Row, int] = field(default_factory=dict, repr=False)
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
        # partial columns): the state stores each key's one bag as its bucket.
        self.flat = same and bool(self.partial_cols) and self.kind == "rows"
        self._rows = self.kind == "rows"

    def release(self) -> None:
        """Drop every key's contents (the state is no longer used: its view was dropped
        or the dataflow closed), so the memory is freed now by reference counting."""
        self._buckets.clear()
        self._blocked.clear()
        self.drop_shelved()
        self.meter.clear()
        self._pending.clear()
        self.changelog.untrack()

    # -- hole, pending or filled -------------------------------------------------------
    def lookup(self, fk: Row) -> KeyStatus:
        if fk in self._buckets or fk in self._shelved:
            return "hit"
        return "pending" if fk in self._pending else "hole"

    def is_filled(self, fk: Row) -> bool:
        return fk in self._buckets or fk in self._shelved

    def in_memory(self, fk: Row) -> bool:
        """Filled, and not shelved (what the publisher may copy, the LRU may hold)."""
        return fk in self._buckets

    def resident(self, fk: Row) -> Bucket | None:
        """``bucket`` without bringing a shelved key back (None for one)."""
        return self._buckets.get(fk)

    def is_pending(self, fk: Row) -> bool:
        return fk in self._pending

    def bucket(self, fk: Row) -> Bucket | None:
        """What a filled key stores (its bucket; for a ``flat`` state, its one bag), or
        None for a hole or a pending key (hot path). Hand it back to ``apply_rows``."""
        bucket = self._buckets.get(fk)
        if bucket is None and fk in self._shelved:
            bucket = self._unshelve(fk, False)
        return bucket

    def _held(self, fk: Row, read: bool = False) -> Bucket:
        """A filled key's bucket, brought back if shelved (KeyError for any other key)."""
        bucket = self._buckets.get(fk)
        if bucket is None:
            if fk not in self._shelved:
                raise KeyError(fk)
            bucket = self._unshelve(fk, read)
        return bucket

    def index_keys(self, fk: Row) -> list[Row]:
        """A filled key's index keys (group keys) that hold something."""
        bucket = self._held(fk)
        if self.flat:
            return [fk] if bucket else []
        return list(bucket)

    def index_entries(self, fk: Row, iks: list[Row]) -> list[tuple[Row, Any]]:
        """(index key, its bag or entry, None if it has none) for ``iks`` of filled
        ``fk``: a checkpoint's copy, the same whatever the layout."""
        bucket = self._held(fk)
        if self.flat:
            return [(ik, bucket if ik == fk and bucket else None) for ik in iks]
        return [(ik, bucket.get(ik)) for ik in iks]

    def pending_fill(self, fk: Row) -> Fill | None:
        return self._pending.get(fk)

    def filled_keys(self) -> list[Row]:
        """Every filled key, in memory or shelved."""
        return [*self._buckets, *self._shelved]

    def pending_keys(self) -> list[Row]:
        return list(self._pending)

    def pending_fills(self) -> list[Fill]:
        """Each fill this state has keys pending on, once, in the order they came."""
        return list({id(f): f for f in self._pending.values()}.values())

    @property
    def keys_filled(self) -> int:
        return len(self._buckets) + len(self._shelved)

    @property
    def keys_shelved(self) -> int:
        return len(self._shelved)

    def has_pending(self) -> bool:
        return bool(self._pending)

    def holds_nothing(self) -> bool:
        """A partial state with no filled, pending or blocked key: every update for it
        is dropped here (hot path: checked per node per packet)."""
        return self.mode != "full" and not (self._buckets or self._pending or self._blocked
                                            or self._shelved)

    # -- checkpoints -------------------------------------------------------------------
    def restore(self, fk: Row, bucket: Bucket | Shelved) -> bool:
        """Make ``fk`` filled with a checkpointed bucket ({index key: bag or entry}:
        recovery, before any update), counted and sampled as if written; or, for a key
        the checkpoint has in the disk tier, shelved there again. False when it can't be
        (the tier was emptied: the key stays a hole)."""
        if isinstance(bucket, Shelved):
            if self.tier is None or self.tier.broken:
                return False
            self.tier.adopt(bucket.ref)
            self._shelved[fk] = bucket.ref
            self.changelog.moved(fk)
            return True
        if self._rows:
            rows = 0
            for bag in bucket.values():
                self.meter.sample(bag.items(), _stored_row_size)  # (row, multiplicity)
                rows += sum(bag.values())
            self._buckets[fk] = bucket.get(fk, {}) if self.flat else bucket
            self.meter.set_size(fk, rows)
        else:
            self._buckets[fk] = {}
            self.meter.set_size(fk, 0)
            self.set_entries(bucket, self._entry_size)
        self.changelog.moved(fk)
        return True

    # -- moving keys (executor thread only) ------------------------------------------
    def fill(self, fk: Row) -> Bucket:
        """Make ``fk`` filled with an empty bucket (the caller loads it); returns it."""
        if fk in self._shelved:  # not expected (only holes are filled): the new one wins
            self.tier.drop(self._shelved.pop(fk))  # type: ignore[union-attr]
        bucket: Bucket = {}
        self._buckets[fk] = bucket
        self.meter.set_size(fk, 0)
        self.changelog.moved(fk)
        return bucket

    def mark_pending(self, fk: Row, fill: Fill) -> None:
        self._pending[fk] = fill

    def clear_pending(self, fk: Row, fill: Fill) -> bool:
        """``fk`` is no longer pending on ``fill`` (if it still was); True if it was. It
        is a hole then (a blocked key's rows are dropped: use ``unblock`` to keep them)."""
        if self._pending.get(fk) is fill:
            del self._pending[fk]
            if self._blocked.pop(fk, None) is not None:
                self.meter.drop(fk)
                self.changelog.moved(fk)
            return True
        return False

    def forget_pending(self) -> None:
        for fk in self._blocked:
            self.meter.drop(fk)
            self.changelog.moved(fk)
        self._blocked.clear()
        self._pending.clear()

    def block(self, fk: Row, fill: Fill) -> None:
        """Keep filled ``fk``'s rows aside, pending on index fill ``fill``: readers wait
        and updates are held by the fill until ``unblock``."""
        self._blocked[fk] = self._held(fk)
        del self._buckets[fk]
        self._pending[fk] = fill
        self.changelog.moved(fk)  # a checkpoint records a blocked key as a hole

    def unblock(self, fk: Row, fill: Fill) -> bool:
        """``fill`` landed: blocked ``fk`` is filled with its rows again; False if it was
        not blocked on ``fill`` (evicted meanwhile)."""
        if self._pending.get(fk) is not fill or fk not in self._blocked:
            return False
        del self._pending[fk]
        self._buckets[fk] = self._blocked.pop(fk)
        self.changelog.moved(fk)
        return True

    def is_blocked(self, fk: Row) -> bool:
        return fk in self._blocked

    def mark_hole(self, fk: Row) -> int:
        """Turn a filled (or blocked) key back into a hole; returns the bytes released
        (from memory)."""
        self._buckets.pop(fk, None)
        self._blocked.pop(fk, None)
        ref = self._shelved.pop(fk, None)
        if ref is not None:
            self.tier.drop(ref)  # type: ignore[union-attr]  # shelved: there is a tier
        self.changelog.moved(fk)
        return self.meter.drop(fk)

    # -- the disk tier ---------------------------------------------------------------
    def to_shelve(self, fk: Row) -> tuple[int, Row, Bucket, int]:
        """What the tier stores for filled ``fk`` (``Tier.put_many``): this state's id,
        the key, its contents and its rows or groups."""
        return self.sid, fk, self._buckets[fk], self.meter.sizes.get(fk, 0)

    def shelve(self, fk: Row, ref: int) -> int:
        """``fk``'s contents are in the disk tier at row ``ref`` (the evictor stored what
        ``to_shelve`` gave, under memory pressure): out of memory it goes; returns the
        memory bytes released."""
        del self._buckets[fk]
        self._shelved[fk] = ref
        self.changelog.moved(fk)  # a checkpoint now records where it is, not its rows
        return self.meter.drop(fk)

    def shelved(self, fk: Row) -> int | None:
        """Shelved ``fk``'s row in the tier's store (None if not shelved)."""
        return self._shelved.get(fk)

    def shelved_keys(self) -> list[Row]:
        return list(self._shelved)

    def unshelve(self, fks: list[Row], read: bool = False) -> None:
        """Bring back those of ``fks`` that are shelved, with one read of the store (a
        write's batch is about to change them, or reads to read them: one trip to the
        disk, not one per key). ``read``: for readers (recently used)."""
        shelved = self._shelved
        if not shelved:
            return
        back = list(dict.fromkeys([fk for fk in fks if fk in shelved]))
        if len(back) > 1:
            got = self.tier.take_many([shelved[fk] for fk in back])  # type: ignore[union-attr]
            for fk in back:
                self._unshelve(fk, read, got[shelved[fk]])
        elif back:
            self._unshelve(back[0], read)

    def _unshelve(self, fk: Row, read: bool, got: tuple[Any, int] | None = None) -> Bucket:
        """Bring shelved ``fk`` back into memory (something reads or changes it; ``read``:
        a reader does, so it counts as recently used; ``got``: its contents, read
        already)."""
        bucket: Bucket
        bucket, items = got or self.tier.take(self._shelved[fk])  # type: ignore[union-attr]
        del self._shelved[fk]
        self._buckets[fk] = bucket
        self.meter.set_size(fk, items)
        self.changelog.moved(fk)
        self.tier.on_unshelve(self, fk, read)  # type: ignore[union-attr]
        return bucket

    def drop_shelved(self) -> None:
        """Every shelved key becomes a hole (the state is dropped)."""
        for fk in list(self._shelved):
            self.mark_hole(fk)

    # -- rows states -----------------------------------------------------------------
    def apply_row(self, bucket: Bucket, fk: Row, row: Row, sign: int) -> None:
        """Apply one delta to a filled rows key (``bucket``: what ``bucket(fk)`` gave)."""
        self.apply_rows(bucket, fk, [(row, sign)])

    def apply_rows(self, bucket: Bucket, fk: Row, deltas: list[tuple[Row, int]]) -> None:
        """Apply deltas, in order, to filled rows key ``fk`` (``bucket``: what
        ``bucket(fk)`` gave): each row's multiplicity in its index key's bag."""
        self._apply({fk: bucket}, lambda row: fk, deltas, None)

    def apply_deltas(self, deltas: list[tuple[Row, int]], applied: list[Row] | None
                     ) -> dict[Row, list[tuple[Row, int]]]:
        """Apply each delta whose fill key is filled (a live write's hot path: one call
        per state and batch); returns the others by fill key, in order. ``applied``, if
        given, collects the fill keys changed (once per delta)."""
        return self._apply(self._buckets, self.fill_key_of_row, deltas, applied)

    def _apply(self, buckets: dict[Row, Bucket], fk_of: Callable[[Row], Row],
               deltas: list[tuple[Row, int]], applied: list[Row] | None
               ) -> dict[Row, list[tuple[Row, int]]]:
        meter, log = self.meter, self.changelog
        if len(deltas) > meter.until_sample:  # else no sample falls in them (meter.py)
            meter.sample(deltas, _stored_row_size)
        else:
            meter.until_sample -= len(deltas)
        if log.watched:  # before the deltas go in: whether a key is filled decides
            bags.log_changes(log.watched, buckets, deltas, fk_of)
        missed, rows, anomalies = bags.apply_deltas(
            buckets, meter.sizes, deltas, fk_of,
            None if self.flat else self.index_key_of_row, log.dirty_ik, applied)
        if missed and self._shelved:  # shelved keys are filled: back, then apply
            back = [fk for fk in missed if fk in self._shelved]
            if back:
                self.unshelve(back)
                self._apply(buckets, fk_of, [d for fk in back for d in missed.pop(fk)],
                            applied)
        meter.total += rows
        for row, fk in anomalies:
            self.anomalies += 1
            if fk in log.watched:
                log.watched[fk] = None
            _log.warning("state %s: count of row %r fell below zero (fill key %r)",
                         self.label, row, fk)
        return missed

    def rows_at(self, ik: Row) -> list[Row] | None:
        """The bag of rows at index key ``ik``, or None when its fill key is a hole or
        pending (lookups can't use data that isn't there yet)."""
        if self.flat:
            bag = self._buckets.get(ik)
            if bag is None:
                if ik not in self._shelved:
                    return None
                bag = self._unshelve(ik, False)
        else:
            fk = self.fill_key_of_index(ik)
            bucket = self._buckets.get(fk)  # not self.bucket(): a join's hot path
            if bucket is None:
                if fk not in self._shelved:
                    return None
                bucket = self._unshelve(fk, False)
            bag = bucket.get(ik)
        return bags.listed(bag) if bag else []

    def bucket_rows(self, fk: Row) -> list[Row]:
        """Every row of a filled key of a rows state, repeated by multiplicity (a read:
        a shelved key comes back as recently used)."""
        bucket = self._held(fk, True)
        return bags.rows_of((bucket,) if self.flat else bucket.values())

    def copy_if_small(self, fk: Row, most: int) -> tuple[Row, ...] | None:
        """A filled rows key's rows as ``bucket_rows`` gives them, or None when it holds
        more than ``most`` (publish.py: too big to copy at every change)."""
        if self.meter.sizes.get(fk, 0) > most:
            return None
        return tuple(self.bucket_rows(fk))

    # -- grouped states --------------------------------------------------------------
    def set_entry(self, fk: Row, group: Row, entry: Any) -> None:
        """Set (``entry`` None: remove) a group's entry in filled key ``fk``."""
        self.set_entries({group: entry}, self._entry_size)

    def set_entries(self, writes: dict[Row, Any], size_of: Callable[[Any], int]) -> None:
        """Set (None: remove) each group's entry in its filled key; ``size_of`` gives an
        entry's bytes, for the mean (one write in meter.SAMPLE_EVERY)."""
        meter = self.meter
        fk_of, buckets, sizes, dirty = (self.fill_key_of_index, self._buckets, meter.sizes,
                                        self.changelog.dirty_ik)
        if len(writes) > meter.until_sample:  # else no sample falls in them (meter.py)
            meter.sample(writes.items(), lambda group, entry: None if entry is None
                         else size_of(entry) + row_size(group))
        else:
            meter.until_sample -= len(writes)
        groups = 0
        for group, entry in writes.items():
            fk = fk_of(group)
            bucket = buckets.get(fk)
            if bucket is None:
                bucket = self._held(fk)
            if dirty is not None:
                dirty.add(group)
            if entry is not None:
                if group not in bucket:
                    sizes[fk] += 1
                    groups += 1
                bucket[group] = entry
            elif bucket.pop(group, None) is not None:
                sizes[fk] -= 1
                groups -= 1
        meter.total += groups

    def entry(self, group: Row) -> Any | None:
        """A group's entry, or None when the group is absent or its key not filled."""
        fk = self.fill_key_of_index(group)
        bucket = self._buckets.get(fk)  # not self.bucket(): an aggregate's hot path
        if bucket is None:
            if fk not in self._shelved:
                return None
            bucket = self._unshelve(fk, False)
        return bucket.get(group)

    def entries(self, fk: Row) -> list[tuple[Row, Any]]:
        """(group, entry) pairs of a filled key of a grouped state."""
        return list(self._held(fk).items())

    def _entry_size(self, entry: Any) -> int:
        op = self.node.op
        return op.entry_size(entry) if op is not None else 0  # type: ignore[attr-defined]

    # -- sizes (the meter's) -------------------------------------------------------------
    def size_of(self, fk: Row) -> int:
        """A filled (or blocked) key's bytes; 0 for any other."""
        return self.meter.size_of(fk)

    @property
    def memory_bytes(self) -> int:
        """Bytes of every filled and blocked key (kept as they change: O(1))."""
        return self.meter.memory_bytes

    def recounted_items(self) -> dict[Row, int]:
        """Each filled (or blocked) key's rows (a rows state) or groups, counted afresh
        from what it stores (for checks: the counts kept as they change must equal it)."""
        out = {}
        for fk, bucket in (*self._buckets.items(), *self._blocked.items()):
            if not self._rows:
                out[fk] = len(bucket)
                continue
            parts = (bucket,) if self.flat else bucket.values()
            out[fk] = sum([n for bag in parts for n in bag.values()])
        return out


def _same(key: Row) -> Row:
    return key


def _stored_row_size(row: Row, sign: int) -> int | None:
    """A written row's bytes, if it is stored (an insert); see ``SizeMeter.sample``."""
    return row_size(row) if sign > 0 else None
