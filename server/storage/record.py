"""Write records and the in-memory bookkeeping of writes between acceptance and indexing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

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
    """A write that has its LSN but is not yet in the WAL."""

    __slots__ = ("lsn", "table_id", "ndel", "body", "batch", "record", "row_delta", "key_delta")

    def __init__(
        self,
        lsn: int,
        table_id: int,
        ndel: int,
        body: pa.Buffer,
        batch: pa.RecordBatch,
        record: WriteRecord,
        row_delta: Mapping[bytes, int],
        key_delta: Mapping[bytes, int] | None,
    ) -> None:
        self.lsn = lsn
        self.table_id = table_id
        self.ndel = ndel
        self.body = body
        self.batch = batch
        self.record = record
        self.row_delta = row_delta
        self.key_delta = key_delta


class Overlay:
    """Row-count and key deltas of accepted writes of one table not yet in the row index.

    Deltas are kept as the writers' own dicts and merged lazily, only when a delete or a
    primary-key check actually needs a count: an insert-only workload never pays for merging.
    """

    __slots__ = ("_rows", "_keys", "_mrows", "_mkeys", "_nrows", "_nkeys")

    def __init__(self) -> None:
        self._rows: list[Mapping[bytes, int]] = []
        self._keys: list[Mapping[bytes, int]] = []
        self._mrows: dict[bytes, int] = {}
        self._mkeys: dict[bytes, int] = {}
        self._nrows = 0
        self._nkeys = 0

    def add(self, rows: Mapping[bytes, int], keys: Mapping[bytes, int] | None) -> None:
        self._rows.append(rows)
        if keys:
            self._keys.append(keys)

    def counts(self, hashes: Sequence[bytes], keys: bool, out: dict[bytes, int]) -> None:
        """Add this overlay's net delta for each of ``hashes`` into ``out``."""
        if keys:
            deltas, merged, done = self._keys, self._mkeys, self._nkeys
        else:
            deltas, merged, done = self._rows, self._mrows, self._nrows
        for d in deltas[done:]:
            for h, k in d.items():
                merged[h] = merged.get(h, 0) + k
        if keys:
            self._nkeys = len(deltas)
        else:
            self._nrows = len(deltas)
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
