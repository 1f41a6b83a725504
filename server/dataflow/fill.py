"""One upquery in flight (``Fill``), the updates it holds, and a read waiting on it.

A ``Fill`` is a set of (state, fill key) pairs filled together from one snapshot LSN V:
the state that missed plus every hole below it on its trace path. While it is in flight,
updates with LSN > V that reach one of its keys are *held* by it (they are not in the
reply); when the reply lands they are replayed in LSN order. The three kinds of held
update say what was interrupted and how to resume it:

* ``HeldRows``: a delta for a pending key of a rows state (an index or a reader);
* ``HeldNode``: a delta whose group is pending at a grouped node (the node's input);
* ``HeldJoin``: a join delta whose lookup met a pending key of the other side, with the
  other sides' rows as they were then (``captured``).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from partialflow.operators.base import Delta, Row

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Node
    from partialflow.server.dataflow.state import State

_fids = itertools.count(1)

# Rows of join index (side, index key) as they were when a join delta was held.
Captured = dict[tuple[int, Row], list[Row]]


@dataclass(eq=False)
class Waiter:
    """A read blocked on misses; the executor delivers each key's rows and LSN.

    Written on the executor thread, read by the reading thread once ``event`` is set."""

    keys: set[Row]
    results: dict[Row, tuple[list[Row], int]] = field(default_factory=dict)
    error: Exception | None = None
    event: threading.Event = field(default_factory=threading.Event)

    def deliver(self, key: Row, rows: list[Row], lsn: int) -> None:
        self.results[key] = (rows, lsn)
        if self.keys <= self.results.keys():
            self.event.set()

    def fail(self, error: Exception) -> None:
        self.error = error
        self.event.set()


@dataclass(slots=True)
class HeldRows:
    """A delta for pending key ``fk`` of rows state ``state``."""

    lsn: int
    fk: Row
    state: State
    delta: Delta

    def batch_key(self) -> tuple:
        return (self.lsn, "rows", self.state.sid, 0)


@dataclass(slots=True)
class HeldNode:
    """A delta from parent ``parent`` of grouped ``node`` whose group (key ``fk``) is pending."""

    lsn: int
    fk: Row
    node: Node
    parent: int
    delta: Delta

    def batch_key(self) -> tuple:
        return (self.lsn, "node", self.node.nid, self.parent)


@dataclass(slots=True)
class HeldJoin:
    """A delta from parent ``parent`` of join ``node`` whose lookup met pending key ``fk``
    of the other side; ``captured``: the other sides' rows at that moment."""

    lsn: int
    fk: Row
    node: Node
    parent: int
    delta: Delta
    captured: Captured

    def batch_key(self) -> tuple:
        return (self.lsn, "join", self.node.nid, self.parent)


Held = HeldRows | HeldNode | HeldJoin


@dataclass(eq=False)
class Fill:
    """One upquery in flight: what it fills, from which snapshot, and what it holds.

    Owned by the fill coordinator; the runner only reads ``fid``, ``lsn``, ``roots`` and
    ``keys`` (of the roots)."""

    requester: State
    lsn: int  # the snapshot: the executor's position when the fill was issued
    started: float  # on the coordinator's clock, for the deadline
    keys: dict[State, set[Row]] = field(default_factory=dict)
    # States the runner must answer (the rest are derived in Python from states below).
    roots: list[State] = field(default_factory=list)
    waiters: dict[Row, list[Waiter]] = field(default_factory=dict)
    # Updates with LSN > self.lsn that met a pending key, in the order they were held.
    held: list[Held] = field(default_factory=list)
    cancelled: set[Row] = field(default_factory=set)
    fid: int = field(default_factory=lambda: next(_fids))
    dead: bool = False  # answered, failed or aborted: a later reply is ignored

    def add(self, st: State, fk: Row) -> None:
        """Fill ``fk`` of ``st`` with this fill (the key becomes pending on it)."""
        self.keys.setdefault(st, set()).add(fk)
        st.mark_pending(fk, self)

    def hold(self, held: Held) -> None:
        self.held.append(held)

    def held_in_order(self) -> list[Held]:
        """Held updates of keys not cancelled, in LSN order. The sort is stable, so
        updates of one LSN keep the order they were held in (a replay of an earlier
        fill's held updates may hold older LSNs after newer ones)."""
        return sorted((h for h in self.held if h.fk not in self.cancelled), key=_lsn_of)

    def label(self) -> str:
        return self.requester.label

    def __repr__(self) -> str:
        keys = sum(len(k) for k in self.keys.values())
        return f"Fill(#{self.fid} {self.requester.label} @{self.lsn}, {keys} keys)"


def _lsn_of(h: Any) -> int:
    return h.lsn
