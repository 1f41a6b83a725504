"""Lock-free reads of filled reader keys: a seqlock, both halves.

Readers of filled keys must not queue behind writes, yet every answer must carry the one
LSN its rows are exact at. The executor therefore publishes, at the end of each packet,
an immutable copy of every reader key that changed, together with the LSN the packet
left it at. The writer half (``publish``) changes published rows and the LSN only while
``version`` is odd; the reader half (``read``) takes a consistent copy by reading the
version before and after and retrying if it was odd or moved.

Lock-free reads can't touch the executor's LRU or counters, so they log what they saw
(``log_reads``) and the executor accounts for it under its lock (``drain_reads``).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from partialflow.operators.base import Row

if TYPE_CHECKING:
    from partialflow.server.dataflow.state import State

# (reader state, the keys one read found filled (hits) or not, hit?). One entry per read,
# not per key: entries live until the executor drains them, and a lookup of thousands of
# keys logging one tuple per key made that many objects survive into the garbage
# collector's oldest generation, whose full collections (of the whole state) then ran
# every second or so and stalled reads for hundreds of milliseconds.
ReadEntry = tuple["State", list[Row], bool]


class Publisher:
    def __init__(self, start_lsn: int) -> None:
        self.version = 0  # odd while the writer is changing what is published
        self.lsn = start_lsn  # the LSN the published rows are exact at
        self._rows: dict[State, dict[Row, tuple[Row, ...]]] = {}
        self._changed: dict[tuple[State, Row], None] = {}  # ordered (see executor)
        self._reads: deque[ReadEntry] = deque()  # appended by readers, drained by the executor

    # -- writer half (executor thread, under its lock) ---------------------------------
    def changed(self, st: State, fk: Row) -> None:
        """A key of reader ``st`` was filled, changed or evicted in this packet."""
        self._changed[(st, fk)] = None

    def peek_changed(self) -> list[tuple[State, Row]]:
        """The reader keys this packet changed so far (for subscriptions.py)."""
        return list(self._changed)

    def publish(self, lsn: int) -> None:
        """Make this packet's reader changes visible, atomically with ``lsn``."""
        if self._changed:
            self.version += 1  # odd: readers retry
            for st, fk in self._changed:
                rows = self._rows.setdefault(st, {})
                if st.is_filled(fk):
                    rows[fk] = tuple(st.bucket_rows(fk))
                else:
                    rows.pop(fk, None)
            self._changed.clear()
            self.lsn = lsn
            self.version += 1
        else:
            # No reader rows changed: the published rows are exact at the new LSN too.
            self.lsn = lsn

    def forget(self, st: State) -> None:
        """A dropped reader: nothing of it stays published."""
        self.version += 1
        self._rows.pop(st, None)
        self._changed = {(s, k): None for s, k in self._changed if s is not st}
        self.version += 1

    def clear(self) -> None:
        """Nothing stays published (the dataflow is closing)."""
        self.version += 1
        self._rows.clear()
        self._changed.clear()
        self.version += 1

    def drain_reads(self) -> list[ReadEntry]:
        """What lock-free readers saw since the last drain (executor thread)."""
        out = []
        reads = self._reads
        while reads:
            out.append(reads.popleft())
        return out

    # -- reader half (any thread, no lock) ---------------------------------------------
    def read(
        self, st: State, keys: list[Row]
    ) -> tuple[list[tuple[Row, ...] | None], int] | None:
        """The published rows of each key, in the order given (None: not filled), and the
        one LSN they are exact at, or None if the writer kept changing them (take the lock
        instead). One C-level pass (``map``): a lookup_many of thousands of keys spends
        its server time here and in building the answer."""
        for _ in range(8):
            v1 = self.version
            if v1 & 1:
                time.sleep(0)
                continue
            lsn = self.lsn
            got = list(map(self._rows.get(st, {}).get, keys))
            if self.version == v1:
                return got, lsn
        return None

    def log_reads(self, st: State, keys: list[Row], hit: bool) -> None:
        """Record reads of ``keys`` (hits or misses) for the executor to account."""
        if keys:
            self._reads.append((st, keys, hit))
