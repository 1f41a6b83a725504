"""Durable, LSN-versioned base tables: WAL with group commit, Parquet segments, Spark reads.

Public interface (other packages code against exactly these names)::

    from partialflow.server.storage import (
        Storage, Snapshot, TableSchema, Column, ColumnType, WriteRecord, normalize_type,
        TableChange, TxRecord,
    )
"""

from __future__ import annotations

from partialflow.operators.types import COLUMN_TYPES, ColumnType, normalize_type
from partialflow.server.storage.record import TableChange, TxRecord, WriteRecord
from partialflow.server.storage.schema import Column, TableSchema, check_identifier
from partialflow.server.storage.snapshot import Snapshot
from partialflow.server.storage.store import Storage

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
