"""Lock-free reads of filled reader keys: a seqlock, both halves.

Readers of filled keys must not queue behind writes, yet every answer must carry the one
LSN its rows are exact at. The executor therefore publishes, at the end of each packet,
an immutable copy of every reader key that changed, together with the LSN the packet
left it at. The writer half (``publish``) changes published rows and the LSN only while
``version`` is odd; the reader half (``read``) takes a consistent copy by reading the
version before and after and retrying if it was odd or moved.

A key holding more than ``EAGER_ROWS`` rows is published *stale* instead: copying it
after every packet that changes it would cost the executor O(key) per write (a view read
whole, keyed by ``()``, with 100,000 groups: 4.7 ms per 100-row write). A read that meets
a stale key takes the lock, reads the state (exact at the published LSN between packets)
and leaves the copy it made published (``cache``) for the reads after it, until the key
changes again: the copy is made once per change that is read, by the reader who needs it.
A big key read lock-free since the last packet is copied when it changes, as a small
one is: its readers are at it, and would otherwise queue for the lock after every
write (4 readers of 5,000 rows under 200 writes/s: read p99 16-20 ms, against 12 ms
copied; with this rule none of them took the lock, and p99 was 13-14 ms).

Lock-free reads can't touch the executor's LRU or counters, so they log what they saw
(``log_reads``) and the executor accounts for it under its lock (``drain_reads``).
"""

from __future__ import annotations

import time
from collections import deque
from itertools import groupby
from operator import itemgetter
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

# Reader keys of up to this many rows are copied when they change; bigger ones are
# published stale. The lock a stale read then takes costs about as much as copying a
# few hundred rows, and the answer itself costs O(rows) to send anyway.
EAGER_ROWS = 256

# Seconds between packets asked for to bring keys read from the disk tier into memory
# (``log_shelf_reads``): each is a packet of the executor, and asked for after every read
# of a shelved key they kept it busy under many readers, most of them bringing nothing
# back (shelfreads.py ``Promoter``; executor.py ``BRING_BACK``).
BRING_BACK_EVERY = 0.05


class _Stale:
    """The published value of a key whose rows were not copied (see module docstring)."""

    def __repr__(self) -> str:
        return "STALE"


STALE = _Stale()


class Publisher:
    def __init__(self, start_lsn: int) -> None:
        self.version = 0  # odd while the writer is changing what is published
        self.lsn = start_lsn  # the LSN the published rows are exact at
        self._rows: dict[State, dict[Row, tuple[Row, ...] | _Stale]] = {}
        # Stale keys published per state. Changed only under the executor's lock; a
        # lock-free reader that sees 0 (before reading rows) needn't look for STALE.
        self._stale: dict[State, int] = {}
        # Keys read lock-free since the last packet (``read_lately``): a big key among
        # them is copied when it changes, as its readers keep reading it.
        self._read: dict[State, set[Row]] = {}
        self._changed: dict[tuple[State, Row], None] = {}  # ordered (see executor)
        self._reads: deque[ReadEntry] = deque()  # appended by readers, drained by the executor
        # The disk tier's next row as of the last publish, written after ``lsn``: a key
        # shelved in a lower row is exact at the published LSN (shelfreads.py). 0: no tier.
        self.tier_floor = 0
        # Keys readers read from the disk tier themselves, for the executor to bring back
        # into memory (appended by readers, drained by the executor), and whether a packet
        # to do it is on its way (set by a reader, cleared by the executor).
        self._shelf_reads: deque[tuple[State, list[Row]]] = deque()
        self.bring_back_asked = False
        self.bring_back_every = BRING_BACK_EVERY  # (0 in stepped tests: at once)
        self._bring_back_next = 0.0  # (time.monotonic) not asked again before

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
            # By state (a packet's changes mostly come a state at a time): this runs
            # for every key a write changed, so the state's lookups are made once.
            for st, changes in groupby(self._changed, key=itemgetter(0)):
                rows = self._rows.setdefault(st, {})
                stale = self._stale.get(st, 0)
                # A key shelved in the disk tier is not published: a read brings it back.
                is_filled, copy = st.in_memory, st.copy_if_small
                read = self._read.get(st, ())
                for _, fk in changes:
                    if not is_filled(fk):
                        if rows.pop(fk, None) is STALE:
                            stale -= 1
                        continue
                    got = copy(fk, EAGER_ROWS)
                    if got is None and fk in read:  # big, but its readers are at it
                        got = tuple(st.bucket_rows(fk))
                    if got is None:  # big, and nobody read it since the last packet
                        if rows.get(fk) is not STALE:
                            rows[fk] = STALE
                            stale += 1
                        continue
                    if stale and rows.get(fk) is STALE:
                        stale -= 1
                    rows[fk] = got
                self._stale[st] = stale
            self._changed.clear()
            self.lsn = lsn
            self.version += 1
        else:
            # No reader rows changed: the published rows are exact at the new LSN too.
            self.lsn = lsn
        # Read since the last packet, not since each key's last change: a key its readers
        # are at is read between packets, and the set stays as small as one packet's reads.
        self._read.clear()

    def forget(self, st: State) -> None:
        """A dropped reader: nothing of it stays published."""
        self.version += 1
        self._rows.pop(st, None)
        self._stale.pop(st, None)
        self._read.pop(st, None)
        self._changed = {(s, k): None for s, k in self._changed if s is not st}
        self.version += 1

    def clear(self) -> None:
        """Nothing stays published (the dataflow is closing)."""
        self.version += 1
        self._rows.clear()
        self._stale.clear()
        self._read.clear()
        self._changed.clear()
        self.version += 1

    def read_lately(self, st: State, keys: list[Row]) -> None:
        """Lock-free reads hit ``keys`` (the executor, draining the reads' log)."""
        self._read.setdefault(st, set()).update(keys)

    def cache(self, st: State, fk: Row, rows: list[Row], lsn: int) -> None:
        """A read under the executor's lock, between packets, found ``rows`` at ``fk``
        exact at ``lsn``: if the key is published stale at that LSN, publish the copy.
        (Same rows, same LSN: nothing a lock-free reader could see changes meaning, so
        the version stays.)"""
        table = self._rows.get(st)
        if table is not None and lsn == self.lsn and table.get(fk) is STALE:
            table[fk] = tuple(rows)
            self._stale[st] -= 1

    def reads_logged(self) -> bool:
        """Lock-free readers logged reads since the last drain (executor thread)."""
        return bool(self._reads)

    def drain_reads(self) -> list[ReadEntry]:
        """What lock-free readers saw since the last drain (executor thread)."""
        out = []
        reads = self._reads
        while reads:
            out.append(reads.popleft())
        return out

    def shelf_reads(self) -> list[tuple[State, list[Row]]]:
        """Keys readers read from the disk tier since the last call (executor thread)."""
        self.bring_back_asked = False  # before draining: a key logged after it asks again
        out = []
        reads = self._shelf_reads
        while reads:
            out.append(reads.popleft())
        return out

    # -- reader half (any thread, no lock) ---------------------------------------------
    def read(
        self, st: State, keys: list[Row]
    ) -> tuple[list[tuple[Row, ...] | None], int] | None:
        """The published rows of each key, in the order given (None: not filled), and the
        one LSN they are exact at, or None if the writer kept changing them or a key is
        stale (take the lock instead). One C-level pass (``map``): a lookup_many of
        thousands of keys spends its server time here and in building the answer."""
        for _ in range(8):
            v1 = self.version
            if v1 & 1:
                time.sleep(0)
                continue
            lsn = self.lsn
            # Read before the rows: a stale key appears only with a new version.
            stale = self._stale.get(st, 0)
            got = list(map(self._rows.get(st, {}).get, keys))
            if self.version == v1:
                if stale and STALE in got:
                    return None
                return got, lsn  # type: ignore[return-value]  # no STALE in got
        return None

    def log_reads(self, st: State, keys: list[Row], hit: bool) -> None:
        """Record reads of ``keys`` (hits or misses) for the executor to account."""
        if keys:
            self._reads.append((st, keys, hit))

    def log_shelf_reads(self, st: State, keys: list[Row]) -> bool:
        """Record keys a reader read from the disk tier itself (to be brought back into
        memory); True if the caller should wake the executor for it (nobody asked yet)."""
        self._shelf_reads.append((st, keys))
        if self.bring_back_asked:
            return False
        now = time.monotonic()
        if now < self._bring_back_next:
            return False  # the next read after it asks
        self._bring_back_next = now + self.bring_back_every
        self.bring_back_asked = True
        return True
