"""Write records and the in-memory bookkeeping of writes between acceptance and indexing."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

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


@dataclass(frozen=True, slots=True)
class TableChange:
    """One table's part of a transaction (``Storage.write_many``): its deletes apply before
    its inserts, as in ``write()``; several changes to one table apply in their order."""

    table: str
    inserts: Sequence[Sequence[Any]] = ()
    deletes: Sequence[Sequence[Any]] = ()


@dataclass(frozen=True)
class TxRecord:
    """One committed transaction over several tables (or none): every change has the
    transaction's LSN, one WriteRecord per table (its net effect: deletes, then inserts).
    Subscribers get it instead of a WriteRecord when a write touched other than one table;
    they must apply it whole."""

    lsn: int
    changes: tuple[WriteRecord, ...]
    upstream_lsn: int | None = None


class Pending:
    """One table's part of a write that has its LSN but is not yet in the WAL (and then not
    yet in the index). A write over several tables is several Pendings with one LSN, queued
    together; only the last carries the record subscribers get, and every one but the last
    is marked ``more`` (its log frame says another frame of the same write follows)."""

    __slots__ = (
        "lsn",
        "table_id",
        "ndel",
        "body",
        "batch",
        "record",
        "ins_h",
        "del_h",
        "ins_k",
        "del_k",
        "more",
        "upstream",
        "error",
    )

    def __init__(
        self,
        lsn: int,
        table_id: int,
        ndel: int,
        body: pa.Buffer,
        batch: pa.RecordBatch,
        record: WriteRecord | TxRecord | None,
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
        self.more = False  # another Pending of the same write follows in the queue
        self.upstream: int | None = None  # the upstream LSN stored with this write
        # Set (under the storage lock) when the write is refused after it took its LSN:
        # the log ran out of space while appending its group. Its writer raises it.
        self.error: Exception | None = None


def net_keys(group: Sequence[Pending]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """Net effect of consecutive writes of one PRIMARY KEY table on its key index:
    ((key digest, row digest) now present, key digests now absent).

    Order matters for keys (delete k then insert k leaves k present), so writes are replayed
    in LSN order; an insert-only run is simply all its (key, row) pairs.
    """
    if not any(p.del_k for p in group):
        return [kr for p in group for kr in zip(p.ins_k, p.ins_h, strict=True)], []
    state: dict[bytes, bytes | None] = {}
    for p in group:
        for k in p.del_k:
            state[k] = None
        for k, h in zip(p.ins_k, p.ins_h, strict=True):
            state[k] = h
    return [(k, h) for k, h in state.items() if h is not None], [
        k for k, h in state.items() if h is None
    ]


class Overlay:
    """Row-count and key deltas of one table's accepted writes not yet in the row index.

    Writes are appended in LSN order and retired (by the indexer) in LSN order once the index
    has them. Counts are merged lazily, only when a delete or primary-key check needs them, so
    an insert-only bag table never pays for merging; retiring an already merged write
    subtracts it again.
    """

    __slots__ = ("_entries", "_rows", "_keys", "_merged")

    def __init__(self) -> None:
        self._entries: deque[Pending] = deque()
        self._rows: Counter[bytes] = Counter()
        self._keys: Counter[bytes] = Counter()
        self._merged = 0  # how many entries (from the left) are included in the counters

    def add(self, p: Pending) -> None:
        self._entries.append(p)

    def counts(self, hashes: Sequence[bytes], keys: bool, out: dict[bytes, int]) -> None:
        """Add the pending net delta of each of ``hashes`` (rows, or keys) into ``out``."""
        if self._merged < len(self._entries):
            for p in islice(self._entries, self._merged, None):
                self._rows.update(p.ins_h)
                self._rows.subtract(p.del_h)
                if p.ins_k or p.del_k:
                    self._keys.update(p.ins_k)
                    self._keys.subtract(p.del_k)
            self._merged = len(self._entries)
        merged = self._keys if keys else self._rows
        if not merged:
            return
        get = merged.get
        for h in hashes:
            v = get(h)
            if v:
                out[h] = out.get(h, 0) + v

    def retire(self, upto_lsn: int) -> None:
        """Forget writes with LSN <= ``upto_lsn`` (they are in the committed index now)."""
        entries = self._entries
        while entries and entries[0].lsn <= upto_lsn:
            p = entries.popleft()
            if self._merged:
                self._merged -= 1
                self._rows.subtract(p.ins_h)
                self._rows.update(p.del_h)
                if p.ins_k or p.del_k:
                    self._keys.subtract(p.ins_k)
                    self._keys.update(p.del_k)
        if not self._merged:
            # Nothing merged is left: drop the zero entries retiring leaves behind.
            self._rows.clear()
            self._keys.clear()
        elif len(self._rows) > 4 * sum(len(p.ins_h) + len(p.del_h) for p in entries) + 4096:
            self._rows, self._keys, self._merged = Counter(), Counter(), 0

    def drop_from(self, lsn: int) -> None:
        """Forget writes with LSN >= ``lsn`` (refused after taking their LSNs: never in the
        log, so never in the index either)."""
        entries = self._entries
        while entries and entries[-1].lsn >= lsn:
            p = entries.pop()
            if self._merged > len(entries):
                self._merged -= 1
                self._rows.subtract(p.ins_h)
                self._rows.update(p.del_h)
                if p.ins_k or p.del_k:
                    self._keys.subtract(p.ins_k)
                    self._keys.update(p.del_k)

    def __len__(self) -> int:
        return len(self._entries)


def fmt_key(schema: TableSchema, row: Sequence[Any]) -> str:
    """``(id)=(5)`` style description of a row's primary key for messages."""
    pk = schema.primary_key
    names = ", ".join(schema.columns[i].name for i in pk)
    vals = ", ".join(repr(row[i]) for i in pk)
    return f"({names})=({vals})"
