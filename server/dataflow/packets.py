"""What goes on the executor's queue: one class per kind of packet.

The executor processes packets strictly one at a time, in queue order, so every state
changes at well-defined LSN boundaries. Anyone may enqueue (``Executor.submit``); only
the executor thread handles them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Row

if TYPE_CHECKING:
    from partialflow.server.dataflow.fill import Fill, Waiter
    from partialflow.server.dataflow.state import State


@dataclass(frozen=True, slots=True)
class Write:
    """A durable write's deltas (storage's WriteRecord: table, rows, diffs, lsn; or a
    TxRecord: one WriteRecord per table of a transaction, all at its LSN, applied whole)."""

    record: Any


@dataclass(frozen=True, slots=True)
class WriteRun:
    """Consecutive queued writes to one table, applied as one write (``Executor._coalesce``).

    Their rows, concatenated in LSN order, have a single write's shape (deletes, then
    inserts) because only the first may delete; the run is tagged with its last LSN."""

    records: list[Any]


def can_join(run: list[Any], rows: int, rec: Any, max_rows: int) -> bool:
    """Whether write ``rec`` may extend ``run`` (which holds ``rows`` rows): same table,
    inserts only, and the run stays under ``max_rows``. A delete after an insert of the
    same row would reach the operators in an order no single write has."""
    return (rec.table == run[0].table and rows + len(rec.rows) <= max_rows
            and min(rec.diffs, default=1) > 0)


@dataclass(frozen=True, slots=True)
class Miss:
    """A read missed ``keys`` of reader state ``state``; deliver them to ``waiter``."""

    state: State
    keys: list[Row]
    waiter: Waiter


@dataclass(frozen=True, slots=True)
class FillDone:
    """The runner's reply to a fill: rows per root state sid, or the error it failed with."""

    fill: Fill
    results: dict[int, list[Row]] | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class Tick:
    """Nothing to apply: run the end-of-packet work (issue misses whose gathering
    window has closed, expire fills)."""


@dataclass(frozen=True, slots=True)
class BringBack:
    """Bring the keys readers read from the disk tier themselves into memory
    (shelfreads.py): asked for by a reader, at most one on the queue at a time."""


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``fn`` on the executor thread, in order with everything else."""

    fn: Callable[[], Any]
    future: Future


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the executor loop."""


Packet = Write | WriteRun | Miss | FillDone | Tick | BringBack | Call | Stop
