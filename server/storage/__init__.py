"""Durable, LSN-versioned base tables: WAL with group commit, Parquet segments, Spark reads.

Public interface (other packages code against exactly these names)::

    from partialflow.server.storage import (
        Storage, Snapshot, TableSchema, Column, ColumnType, WriteRecord, normalize_type,
        TableChange, TxRecord,
    )
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partialflow.operators.types import COLUMN_TYPES, ColumnType, normalize_type
from partialflow.server.storage.record import TableChange, TxRecord, WriteRecord
from partialflow.server.storage.schema import Column, TableSchema, check_identifier

if TYPE_CHECKING:
    from partialflow.server.storage.snapshot import Snapshot
    from partialflow.server.storage.store import Storage


def __getattr__(name: str) -> Any:
    # Storage and Snapshot load pyspark; they are imported on first use, so the dataflow
    # can import the write records (``storage.record``) and stay free of the JVM.
    if name == "Storage":
        from partialflow.server.storage.store import Storage

        return Storage
    if name == "Snapshot":
        from partialflow.server.storage.snapshot import Snapshot

        return Snapshot
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLUMN_TYPES",
    "Column",
    "ColumnType",
    "Snapshot",
    "Storage",
    "TableChange",
    "TableSchema",
    "TxRecord",
    "WriteRecord",
    "check_identifier",
    "normalize_type",
]
