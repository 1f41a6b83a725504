"""What a stress run remembers: every acknowledged write, every read, every error.

Threads append to shared lists (a list append is atomic in CPython, so recording adds no
lock to the measured path); the verifier and the report read them after the threads stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

# Errors a read may show while Spark scans fail, hang or crawl: the server's clean answers.
CLEAN_ERRORS = ("Unavailable", "DeadlineExceeded")


@dataclass
class Write:
    """One acknowledged write: its LSN and what it did to one table."""

    lsn: int
    table: str  # logical name (no prefix)
    op: str  # insert, delete or update
    deletes: list[tuple]
    inserts: list[tuple]


@dataclass
class Read:
    """One key a lookup answered: the rows and the LSN they claim to be exact at."""

    view: str  # logical name
    key: tuple
    lsn: int
    rows: list[tuple]
    start: float  # seconds since the load began
    ms: float  # latency of the whole call (a lookup_many's keys share it)
    call: str  # lookup, lookup_many or recovery
    reader: int


@dataclass
class Failure:
    """A call that raised: which kind of error, when, and on what."""

    what: str  # read, write or evict
    kind: str  # the client error class name (Unavailable, DeadlineExceeded, ...)
    message: str
    start: float
    end: float
    detail: str  # view and keys, or table and operation


@dataclass
class Stream:
    """One Subscribe stream of a subscriber: when its LSN moved (seconds since the load
    began: its snapshot, change batches and heartbeats at a newer LSN), and when it ended."""

    subscriber: int
    view: str
    opened: float
    events: list[float] = field(default_factory=list)
    closed: float | None = None  # None: open when the load ended
    lsn: int = -1  # the last LSN it told

    def silences(self, end: float) -> list[tuple[float, float]]:
        """Each (from, to) between the stream's opening, the moves of its LSN and its end
        (or ``end``, the end of the load, if it was still open)."""
        times = [self.opened, *self.events,
                 min(self.closed, end) if self.closed is not None else end]
        return [(a, b) for a, b in pairwise(times) if b > a]


@dataclass
class FaultWindow:
    mode: str
    start: float
    end: float


@dataclass
class Journal:
    """Everything recorded during one run."""

    started: float = field(default_factory=time.monotonic)
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    windows: list[FaultWindow] = field(default_factory=list)
    lsn_regressions: list[str] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)  # subscribers' streams
    calls: list[tuple[float, str, int]] = field(
        default_factory=list
    )  # ms, call, keys: answered reads
    evictions: int = 0  # evict calls this run made
    evicted_keys: int = 0  # keys those calls evicted (the server's count)
    planted: str | None = None  # where --plant-wrong-answer planted its wrong row
    closed: bool = False  # set when verification starts: later answers are not taken
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(
        self,
        *,
        reads: Sequence[Read] = (),
        failure: Failure | None = None,
        call: tuple[float, str, int] | None = None,
    ) -> None:
        """Record a call's outcome, unless the journal is closed: a reader still blocked
        in a call when the load ended may answer during verification, and what is
        verified and what is reported must be the same reads."""
        with self._lock:
            if self.closed:
                return
            self.reads.extend(reads)
            if failure is not None:
                self.failures.append(failure)
            if call is not None:
                self.calls.append(call)

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def count(self, **amounts: int) -> None:
        """Add to the counters above (``+=`` on a shared int can lose updates)."""
        with self._lock:
            for name, n in amounts.items():
                setattr(self, name, getattr(self, name) + n)

    def now(self) -> float:
        return time.monotonic() - self.started

    def fault_at(self, start: float, end: float, settle: float) -> str | None:
        """The fault mode active at any time in [start, end], counting ``settle`` seconds
        after each window (replies to scans started in it can land later), else None."""
        for w in self.windows:
            if start <= w.end + settle and end >= w.start:
                return w.mode
        return None
