"""Admitting a write: validate and encode each table's change, check it against the table.

A write (``Storage.write_many``; ``write`` is its one-table case) is a list of changes, each
one table's deletes then inserts. Everything here that needs no lock runs on the writer's
thread before the storage lock is taken (``prepare``, ``net``, ``encode``); the checks against
the row index and the overlay of accepted writes (``check_deletes``, ``check_keys``) run
under the lock. Changes are checked in their order, each against the table as the earlier
changes of the same write leave it (``Local``): a write may insert a row and delete it again,
or delete a key and insert it again. Several changes to one table are then stored as their
net effect (``net``): one log frame, one memtable entry and one delivered record per table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from partialflow.server.errors import AlreadyExists, InvalidArgument, NotFound
from partialflow.server.storage.catalog import TableEntry
from partialflow.server.storage.record import (
    Overlay,
    Pending,
    TableChange,
    TxRecord,
    WriteRecord,
    fmt_key,
)
from partialflow.server.storage.rowindex import key_hashes, row_hashes
from partialflow.server.storage.schema import coerce_rows
from partialflow.server.storage.wal import META_TABLE, encode_upstream

_NO_ROWS = pa.RecordBatch.from_arrays([], schema=pa.schema([]))  # a META_TABLE frame's batch


def checked_changes(changes: Any, upstream_lsn: Any) -> list[TableChange]:
    """``write_many``'s arguments, or InvalidArgument saying what is wrong with them."""
    if isinstance(changes, (str, bytes)) or not isinstance(changes, Sequence):
        raise InvalidArgument(
            f"changes must be a list of TableChange, got {type(changes).__name__}"
        )
    for i, c in enumerate(changes):
        if not isinstance(c, TableChange):
            raise InvalidArgument(f"change {i}: expected a TableChange, got {type(c).__name__}")
    if upstream_lsn is not None and (
        isinstance(upstream_lsn, bool) or not isinstance(upstream_lsn, int)
        or not 0 <= upstream_lsn < 1 << 64
    ):
        raise InvalidArgument(
            f"upstream_lsn must be an unsigned 64-bit integer, got {upstream_lsn!r}"
        )
    return list(changes)


@dataclass(slots=True)
class Part:
    """One change, coerced and digested (or several changes' net effect on one table)."""

    entry: TableEntry
    where: str  # prefix for messages: "" for a one-change write, else "change N: "
    del_rows: list[tuple]
    ins_rows: list[tuple]
    del_cols: list[list[Any]]
    ins_cols: list[list[Any]]
    del_h: list[bytes]
    ins_h: list[bytes]
    del_k: list[bytes]
    ins_k: list[bytes]
    committed: dict[bytes, Any] = field(default_factory=dict)  # index entries it needs

    @property
    def needs_index(self) -> bool:
        return bool(self.del_h) or bool(self.ins_k)


def prepare(
    entry: TableEntry, inserts: Sequence[Sequence[Any]], deletes: Sequence[Sequence[Any]],
    where: str,
) -> Part:
    """Coerce and digest one change (InvalidArgument naming table, row and column)."""
    schema = entry.schema
    try:
        del_rows, del_cols = coerce_rows(schema, deletes, "delete row")
        ins_rows, ins_cols = coerce_rows(schema, inserts, "row")
    except Exception as err:
        if where:
            raise type(err)(f"{where}{err}") from None
        raise
    pk = schema.primary_key
    return Part(
        entry, where, del_rows, ins_rows, del_cols, ins_cols,
        row_hashes(del_rows) if del_rows else [], row_hashes(ins_rows),
        key_hashes(del_rows, schema) if pk and del_rows else [],
        key_hashes(ins_rows, schema) if pk else [],
    )


def net(parts: Sequence[Part]) -> Part:
    """The net effect of several checked changes to one table, in their order, as one
    change (deletes of rows the table held before, then inserts of rows it holds after)."""
    if len(parts) == 1:
        return parts[0]
    count: dict[bytes, int] = {}
    row_of: dict[bytes, tuple] = {}
    for p in parts:
        for h, r in zip(p.del_h, p.del_rows, strict=True):
            count[h] = count.get(h, 0) - 1
            row_of.setdefault(h, r)
        for h, r in zip(p.ins_h, p.ins_rows, strict=True):
            count[h] = count.get(h, 0) + 1
            row_of.setdefault(h, r)
    dels = [(h, row_of[h]) for h, n in count.items() if n < 0 for _ in range(-n)]
    ins = [(h, row_of[h]) for h, n in count.items() if n > 0 for _ in range(n)]
    entry = parts[0].entry
    schema = entry.schema
    ncols = len(schema.columns)
    del_rows = [r for _, r in dels]
    ins_rows = [r for _, r in ins]

    def cols(rows: list[tuple]) -> list[list[Any]]:
        return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(ncols)]

    pk = schema.primary_key
    return Part(
        entry, parts[0].where, del_rows, ins_rows, cols(del_rows), cols(ins_rows),
        [h for h, _ in dels], [h for h, _ in ins],
        key_hashes(del_rows, schema) if pk and del_rows else [],
        key_hashes(ins_rows, schema) if pk and ins_rows else [],
    )


def encode(part: Part) -> tuple[pa.RecordBatch, pa.Buffer]:
    """The change as one Arrow batch (deletes, then inserts) and its serialized body."""
    schema = part.entry.schema.arrow_schema()
    arrays = [
        pa.array(d + i, type=f.type)
        for d, i, f in zip(part.del_cols, part.ins_cols, schema, strict=True)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return batch, batch.serialize()


class Local:
    """The row and key deltas of a write's changes checked so far, per table id: a later
    change of the same write is checked against the table as they leave it."""

    __slots__ = ("rows", "keys")

    def __init__(self) -> None:
        self.rows: dict[int, Counter[bytes]] = {}
        self.keys: dict[int, Counter[bytes]] = {}

    def add(self, part: Part) -> None:
        tid = part.entry.id
        rows = self.rows.setdefault(tid, Counter())
        rows.update(part.ins_h)
        rows.subtract(part.del_h)
        if part.ins_k or part.del_k:
            keys = self.keys.setdefault(tid, Counter())
            keys.update(part.ins_k)
            keys.subtract(part.del_k)

    def merge(self, tid: int, keys: bool, hashes: Sequence[bytes], out: dict[bytes, int]) -> None:
        """Add this write's own delta for each of ``hashes`` into ``out``."""
        got = (self.keys if keys else self.rows).get(tid)
        if not got:
            return
        for h in hashes:
            v = got.get(h)
            if v:
                out[h] = out.get(h, 0) + v


def check_deletes(part: Part, pending: dict[bytes, int]) -> None:
    """NotFound unless the table holds every row ``part`` deletes (as many copies);
    ``pending``: row digest -> copies accepted but not in the committed index."""
    entry, rows, hashes, keys = part.entry, part.del_rows, part.del_h, part.del_k
    committed = part.committed
    need = Counter(hashes)
    if entry.schema.primary_key:
        # A keyed table holds a row iff its key maps to exactly this row's digest.
        have = {h: 1 for h, k in zip(hashes, keys, strict=True) if committed.get(k) == h}
    else:
        have = committed
    for h, k in need.items():
        n = have.get(h, 0) + pending.get(h, 0)
        if n < k:
            i = hashes.index(h)
            name = entry.schema.name
            if n <= 0:
                raise NotFound(
                    f"{part.where}table '{name}' delete row {i}: row {rows[i]!r} is not in "
                    "the table"
                )
            raise NotFound(
                f"{part.where}table '{name}' delete row {i}: deletes {k} copies of "
                f"{rows[i]!r} but the table holds {n}"
            )


def check_keys(part: Part, pending: dict[bytes, int]) -> None:
    """AlreadyExists if an inserted primary key is held after ``part``'s deletes, or twice
    in its inserts; ``pending``: key digest -> net count not in the committed index."""
    schema = part.entry.schema
    rows, ins_k = part.ins_rows, part.ins_k
    if len(set(ins_k)) < len(ins_k):
        seen: dict[bytes, int] = {}
        for i, h in enumerate(ins_k):
            if h in seen:
                raise AlreadyExists(
                    f"{part.where}table '{schema.name}' row {i}: primary key "
                    f"{fmt_key(schema, rows[i])} appears twice in this batch "
                    f"(rows {seen[h]} and {i})"
                )
            seen[h] = i
    removed = set(part.del_k)
    committed = part.committed
    for i, h in enumerate(ins_k):
        n = (h in committed) + pending.get(h, 0) - (h in removed)
        if n > 0:
            raise AlreadyExists(
                f"{part.where}table '{schema.name}' row {i}: primary key "
                f"{fmt_key(schema, rows[i])} already exists"
            )


def _overlay_counts(
    overlays: dict[int, Overlay], tid: int, hashes: Sequence[bytes], keys: bool
) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    ov = overlays.get(tid)
    if ov is not None:
        ov.counts(hashes, keys, out)
    return out


def check(overlays: dict[int, Overlay], part: Part, local: Local | None) -> None:
    """Check one change against its committed index entries, the overlay of accepted writes
    not yet indexed and (``local``) the changes of the same write before it. Call under the
    storage lock; raises NotFound / AlreadyExists naming table and row."""
    tid = part.entry.id
    if part.del_h:
        uniq = list(dict.fromkeys(part.del_h))
        pending = _overlay_counts(overlays, tid, uniq, keys=False)
        if local is not None:
            local.merge(tid, False, uniq, pending)
        check_deletes(part, pending)
    if part.ins_k:
        uniq = list(dict.fromkeys(part.ins_k))
        pending = _overlay_counts(overlays, tid, uniq, keys=True)
        if local is not None:
            local.merge(tid, True, uniq, pending)
        check_keys(part, pending)
    if local is not None:
        local.add(part)


def queue_entries(
    lsn: int, nets: list[tuple[Part, pa.RecordBatch, pa.Buffer]], upstream_lsn: int | None,
) -> list[Pending]:
    """The queue entries of a checked write: one per table, plus a frame without rows when
    there is no table or an upstream LSN; the last one carries the record subscribers get
    (a WriteRecord for one table, else a TxRecord)."""
    out: list[Pending] = []
    records: list[WriteRecord] = []
    for part, batch, body in nets:
        rows = tuple(part.del_rows) + tuple(part.ins_rows)
        diffs = (-1,) * len(part.del_rows) + (1,) * len(part.ins_rows)
        records.append(WriteRecord(lsn, part.entry.schema.name, rows, diffs))
        out.append(Pending(lsn, part.entry.id, len(part.del_rows), body, batch, None,
                           part.ins_h, part.del_h, part.ins_k, part.del_k))
    if upstream_lsn is not None or not out:
        meta = Pending(lsn, META_TABLE, 0, encode_upstream(upstream_lsn), _NO_ROWS, None,
                       [], [], [], [])
        meta.upstream = upstream_lsn
        out.append(meta)
    for p in out[:-1]:
        p.more = True
    out[-1].record = (
        records[0] if len(records) == 1 else TxRecord(lsn, tuple(records), upstream_lsn)
    )
    return out
