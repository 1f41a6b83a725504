"""Write records and the in-memory bookkeeping of writes between acceptance and indexing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from partialflow.server.storage.schema import TableSchema


@dataclass(frozen=True)
class WriteRecord:
    """One committed write: ``rows[i]`` with ``diffs[i]`` (+1 insert / -1 delete).

    Deletes come before inserts, so an update is its deletes followed by its inserts.
    """

    lsn: int
    table: str
    rows: tuple[tuple[Any, ...], ...]
    diffs: tuple[int, ...]


class Pending:
    """A write that has its LSN but is not yet in the WAL (and then not yet in the index)."""

    __slots__ = ("lsn", "table_id", "ndel", "body", "batch", "record", "ins_h", "del_h", "ins_k", "del_k")

    def __init__(
        self,
        lsn: int,
        table_id: int,
        ndel: int,
        body: pa.Buffer,
        batch: pa.RecordBatch,
        record: WriteRecord,
        ins_h: list[bytes],
        del_h: list[bytes],
        ins_k: list[bytes],
        del_k: list[bytes],
    ) -> None:
        self.lsn = lsn
        self.table_id = table_id
        self.ndel = ndel
        self.body = body
        self.batch = batch
        self.record = record
        self.ins_h = ins_h  # row digests inserted / deleted (for the row index)
        self.del_h = del_h
        self.ins_k = ins_k  # primary-key digests inserted / deleted (empty for bag tables)
        self.del_k = del_k


def net_keys(group: Sequence[Pending]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """Net effect of consecutive writes of one PRIMARY KEY table on its key index:
    ((key digest, row digest) now present, key digests now absent).

    Order matters for keys (delete k then insert k leaves k present), so writes are replayed
    in LSN order; an insert-only run is simply all its (key, row) pairs.
    """
    if not any(p.del_k for p in group):
        return [kr for p in group for kr in zip(p.ins_k, p.ins_h)], []
    state: dict[bytes, bytes | None] = {}
    for p in group:
        for k in p.del_k:
            state[k] = None
        for k, h in zip(p.ins_k, p.ins_h):
            state[k] = h
    return [(k, h) for k, h in state.items() if h is not None], [k for k, h in state.items() if h is None]


class Overlay:
    """Row-count and key deltas of accepted writes of one table not yet in the row index.

    The writers' digest lists are kept as they are and merged lazily, only when a delete or a
    primary-key check needs a count: an insert-only bag table never pays for merging.
    """

    __slots__ = ("_entries", "_rows", "_keys", "_nrows", "_nkeys")

    def __init__(self) -> None:
        self._entries: list[Pending] = []
        self._rows: Counter[bytes] = Counter()
        self._keys: Counter[bytes] = Counter()
        self._nrows = 0
        self._nkeys = 0

    def add(self, p: Pending) -> None:
        self._entries.append(p)

    def counts(self, hashes: Sequence[bytes], keys: bool, out: dict[bytes, int]) -> None:
        """Add this overlay's net delta for each of ``hashes`` into ``out``."""
        if keys:
            merged, done = self._keys, self._nkeys
            for p in self._entries[done:]:
                merged.update(p.ins_k)
                merged.subtract(p.del_k)
            self._nkeys = len(self._entries)
        else:
            merged, done = self._rows, self._nrows
            for p in self._entries[done:]:
                merged.update(p.ins_h)
                merged.subtract(p.del_h)
            self._nrows = len(self._entries)
        if not merged:
            return
        for h in hashes:
            v = merged.get(h)
            if v:
                out[h] = out.get(h, 0) + v


def fmt_key(schema: TableSchema, row: Sequence[Any]) -> str:
    """``(id)=(5)`` style description of a row's primary key for messages."""
    pk = schema.primary_key
    names = ", ".join(schema.columns[i].name for i in pk)
    vals = ", ".join(repr(row[i]) for i in pk)
    return f"({names})=({vals})"
