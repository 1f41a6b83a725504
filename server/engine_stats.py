"""The engine's figures (``Engine.figures``): the dataflow's, storage's and the parts' the
engine owns, typed, and rendered by ``as_dict`` under the names the stats RPC, the CLI, the
metrics and the docs use (``Engine.stats``).

Like ``DataflowStats``, the figures of the layers below stay as those layers report them
(storage's, the verifier's, Spark's, the follower's); the engine's own write counters are
``WriteCounts``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from partialflow.server.dataflow.stats import DataflowStats
from partialflow.server.storage import TableChange


class WriteCounts:
    """Writes, transactions, rows and bulk loads the engine has made durable: counted from
    any thread. A figure appears once first counted (``as_dict`` keeps that order)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def write(self, changes: Sequence[TableChange]) -> None:
        """A write is durable (a commit that fails counts nothing)."""
        with self._lock:
            self._counts["writes"] += 1
            if len({c.table.lower() for c in changes}) > 1:
                self._counts["transactions"] += 1
            self._counts["rows_inserted"] += sum(len(c.inserts) for c in changes)
            self._counts["rows_deleted"] += sum(len(c.deletes) for c in changes)

    def load(self, rows: int) -> None:
        """A bulk load is done."""
        with self._lock:
            self._counts["loads"] += 1
            self._counts["load_rows"] += rows

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True)
class EngineStats:
    """What ``Engine.stats`` reports, taken at one call. ``lsn`` is the last durable write
    (storage's), ``dataflow.applied_lsn`` how far the views have got; ``verifier`` and
    ``follow`` are there only when the server runs a verifier or follows a database."""

    dataflow: DataflowStats
    lsn: int
    memory_limit: int | None  # Config.memory_limit (None: no limit)
    storage: dict[str, Any]  # Storage.stats
    writes: dict[str, int]  # WriteCounts.as_dict
    spark: dict[str, Any]  # SparkSupervisor.stats
    verifier: dict[str, Any] | None = None  # Verifier.stats
    follow: dict[str, Any] | None = None  # the follower's stats

    def as_dict(self) -> dict[str, Any]:
        """The figures under their wire names, in the order clients have always seen them:
        ``views`` first, then the dataflow's (with storage's ``lsn`` and the engine's
        ``memory_limit`` in the places of the dataflow's own), ``applied_lsn``, then the
        parts' sections."""
        out: dict[str, Any] = {"views": {}, **self.dataflow.as_dict()}
        out["applied_lsn"] = self.dataflow.applied_lsn
        out["lsn"] = self.lsn
        out["memory_limit"] = self.memory_limit
        out["storage"] = self.storage
        out["writes"] = self.writes
        if self.verifier is not None:
            out["verifier"] = self.verifier
        out["spark"] = self.spark
        if self.follow is not None:
            out["follow"] = self.follow
        return out
