"""The memtable: durable writes not yet in Parquet, per table, in LSN order.

Its data is guarded by the storage lock (one lock shared with the file set, admission, the
committer and the indexer, because a snapshot must see the memtable and the manifest
together, and a flush must move rows from one to the other in one step): every method here
is called with that lock held. The committer appends to it, a flush trims what it wrote, a
snapshot copies the entries up to its LSN.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from operator import attrgetter

from partialflow.server.storage.record import Pending
from partialflow.server.storage.segments import MemEntry

_lsn_key = attrgetter("lsn")


class Memtable:
    """Per table id the durable writes not yet flushed, with their row and Arrow byte totals;
    ``lsn`` is the durable LSN (every write up to it is here or in Parquet)."""

    def __init__(self, entries: dict[int, list[MemEntry]], lsn: int,
                 upstream_marks: list[tuple[int, int]]) -> None:
        self._mem = entries
        self.lsn = lsn
        self.rows = sum(e.batch.num_rows for ents in entries.values() for e in ents)
        # Arrow bytes held: about what the next flush writes (the disk-space checks use it).
        self.nbytes = sum(e.batch.nbytes for ents in entries.values() for e in ents)
        # (LSN, upstream LSN) of durable writes not yet flushed: a flush stores the largest
        # of those it covers in the manifest.
        self._marks = upstream_marks

    def add_table(self, tid: int) -> None:
        self._mem[tid] = []

    def drop_table(self, tid: int) -> None:
        dropped = self._mem.pop(tid, [])
        self.rows -= sum(e.batch.num_rows for e in dropped)
        self.nbytes -= sum(e.batch.nbytes for e in dropped)

    def append(self, group: Iterable[Pending], live: set[int], last: int) -> int:
        """Add a durable group ending at LSN ``last`` (entries of tables not in ``live`` are
        left out); returns the group's rows."""
        rows = 0
        for p in group:
            n = p.batch.num_rows
            rows += n
            mem = self._mem.get(p.table_id)
            if mem is not None and p.table_id in live:
                mem.append(MemEntry(p.lsn, p.ndel, p.batch))
                self.rows += n
                self.nbytes += p.batch.nbytes
            if p.upstream is not None:
                self._marks.append((p.lsn, p.upstream))
        self.lsn = last
        return rows

    def upto(self, tid: int, lsn: int) -> tuple[MemEntry, ...]:
        """The table's entries with LSN <= ``lsn`` (a snapshot's share)."""
        mem = self._mem.get(tid, [])
        cut = len(mem) if not mem or mem[-1].lsn <= lsn else bisect_right(mem, lsn, key=_lsn_key)
        return tuple(mem[:cut])

    def work(self) -> dict[int, list[MemEntry]]:
        """What a flush writes now: every non-empty table's entries (all durable)."""
        return {tid: list(ents) for tid, ents in self._mem.items() if ents}

    def marks_upto(self, lsn: int) -> list[int]:
        """Upstream LSNs of the writes up to ``lsn``."""
        return [u for at, u in self._marks if at <= lsn]

    def flushed(self, work: dict[int, list[MemEntry]], upto: int) -> None:
        """Drop what a flush (``work``, writes up to ``upto``) published."""
        self._marks = [(at, u) for at, u in self._marks if at > upto]
        for tid, ents in work.items():
            mem = self._mem.get(tid)
            if mem is not None:
                del mem[: len(ents)]
                self.rows -= sum(e.batch.num_rows for e in ents)
                self.nbytes -= sum(e.batch.nbytes for e in ents)
