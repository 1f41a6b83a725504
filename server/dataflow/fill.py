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

An *index fill* (``index=True``) fetches keys of an evict-on-miss join index that a write's
join delta missed, from the snapshot just before that write. It holds the delta, and the
filled downstream keys the delta will reach are *gated* on it: a filled one is *blocked*
(its rows kept aside, pending on the fill, so readers wait and updates are held in LSN
order) until the reply lands; one pending on another fill is blocked on this one when
that fill lands (``gates``). Readers then wait for one small fill instead of a refill.
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

    Written on the executor thread, read by the reading thread once ``event`` is set.
    ``floor``: the lowest LSN the read may be answered at (its ``min_lsn``); a key kept
    blocked by a chain of index fills may be answered at an LSN below the applied one,
    never below this.

    ``woken``: when set (a read's waiter, by the executor), a complete waiter is put
    there instead of woken at once, and the executor wakes it at the end of the packet,
    after it published: the read's next read then finds the filled keys published, and
    keys shelved in the disk tier readable by readers (shelfreads.py). Woken at once, a
    client's next lookup of the same keys came in before the publish and went through
    the executor again (a Miss packet per read, nothing read from the tier)."""

    keys: set[Row]
    floor: int = 0
    results: dict[Row, tuple[list[Row], int]] = field(default_factory=dict)
    error: Exception | None = None
    event: threading.Event = field(default_factory=threading.Event)
    woken: list[Waiter] | None = None

    def deliver(self, key: Row, rows: list[Row], lsn: int) -> None:
        self.results[key] = (rows, lsn)
        if self.keys <= self.results.keys():
            if self.woken is not None:
                self.woken.append(self)
            else:
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

    def target(self) -> tuple[int, Row]:
        return (self.state.sid, self.fk)


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

    def target(self) -> tuple[int, Row]:
        return (self.node.own.sid, self.fk)  # type: ignore[union-attr]


@dataclass(slots=True)
class HeldJoin:
    """A delta from parent ``parent`` of join ``node`` whose lookup met pending key ``fk``
    of side ``side``; ``captured``: the other sides' rows at that moment."""

    lsn: int
    fk: Row
    node: Node
    parent: int
    delta: Delta
    captured: Captured
    side: int

    def batch_key(self) -> tuple:
        return (self.lsn, "join", self.node.nid, self.parent)

    def target(self) -> tuple[int, Row]:
        return (self.node.sides[self.side].sid, self.fk)


Held = HeldRows | HeldNode | HeldJoin


@dataclass(eq=False)
class Fill:
    """One upquery in flight: what it fills, from which snapshot, and what it holds.

    Owned by the fill coordinator; the runner only reads ``fid``, ``lsn``, ``roots`` and
    ``keys`` (of the roots)."""

    requester: State
    lsn: int  # the snapshot: the executor's position when the fill was issued
    started: float  # on the coordinator's clock, for the deadline
    index: bool = False  # an index fill (see the module docstring), not a read's fill
    keys: dict[State, set[Row]] = field(default_factory=dict)
    # States the runner must answer (the rest are derived in Python from states below).
    roots: list[State] = field(default_factory=list)
    # Reads waiting for (state, fill key): the requester's keys, and for an index fill
    # the keys blocked on it.
    waiters: dict[tuple[State, Row], list[Waiter]] = field(default_factory=dict)
    # Updates with LSN > self.lsn that met a pending key, in the order they were held.
    held: list[Held] = field(default_factory=list)
    cancelled: set[tuple[int, Row]] = field(default_factory=set)  # (state sid, fill key)
    # Index fill: the filled keys its held deltas will reach (blocked on it, or gated
    # through the fill they are pending on), each with the LSN it is gated from: held
    # updates after that LSN reach it, earlier ones are in it already.
    gated: dict[tuple[State, Row], int] = field(default_factory=dict)
    # Keys of this fill that index fills gated meanwhile, with the LSN: blocked on them
    # at that LSN when this fill lands.
    gates: dict[tuple[State, Row], list[tuple[Fill, int]]] = field(default_factory=dict)
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
        return sorted((h for h in self.held if h.target() not in self.cancelled), key=_lsn_of)

    def label(self) -> str:
        return self.requester.label

    def __repr__(self) -> str:
        keys = sum(len(k) for k in self.keys.values())
        kind = "index fill" if self.index else "Fill"
        return f"{kind}(#{self.fid} {self.requester.label} @{self.lsn}, {keys} keys)"


def _lsn_of(h: Any) -> int:
    return h.lsn
