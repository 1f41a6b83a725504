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
    """A durable write's deltas (storage's WriteRecord: table, rows, diffs, lsn)."""

    record: Any


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
class Call:
    """Run ``fn`` on the executor thread, in order with everything else."""

    fn: Callable[[], Any]
    future: Future


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the executor loop."""


Packet = Write | Miss | FillDone | Tick | Call | Stop
