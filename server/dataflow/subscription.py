"""One subscription's stream: its keys, the rows last sent per key, and its queue of
events (``Subscription``). The manager (subscriptions.py) fills the queue at packet ends,
on the executor thread; the streaming thread takes from it (``next_event``)."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from partialflow.operators.base import Row
from partialflow.server.errors import PartialflowError, ResourceExhausted

if TYPE_CHECKING:
    from partialflow.server.dataflow.cuts import KeyHistory
    from partialflow.server.dataflow.graph import Reader

DEFAULT_MAX_BUFFERED = 10_000  # change batches queued for one stream before it is cut off

Bag = Counter  # row -> multiplicity (rows as presented)
KeyChange = tuple[Row, list[Row], list[Row]]  # (key, inserted, deleted)


class Streams(Protocol):
    """What a stream needs from its manager: the lock its queue changes under, the LSN
    of the last packet end, and ending it (removed after the packet)."""

    @property
    def lock(self) -> threading.Lock: ...
    @property
    def packet_lsn(self) -> int: ...
    def drop(self, sub: Subscription) -> None: ...


@dataclass
class Event:
    """What a stream sends: ``kind`` "snapshot" (``changes`` hold every key's rows as
    inserted), "changes" or "heartbeat"; every key's rows are exact at ``lsn``."""

    kind: str
    lsn: int
    changes: list[KeyChange] = field(default_factory=list)


class Subscription:
    """One stream's keys and queue. The queue and ``exact_lsn`` change under the
    manager's lock, so a heartbeat never overtakes a change batch it follows."""

    def __init__(self, manager: Streams, reader: Reader, keys: list[Row],
                 start: dict[Row, list[Row]] | None, max_buffered: int) -> None:
        self.manager = manager
        self.reader = reader
        self.view = reader.name
        self.keys = list(dict.fromkeys(keys))
        self.max_buffered = max_buffered
        # Rows last sent per key (``start``: the rows at from_lsn the client holds).
        self.resumed = start is not None
        self.sent: dict[Row, Bag] = {
            k: Counter(start.get(k, []) if start else []) for k in self.keys
        }
        self.started = False  # snapshot (or the resume's first batch) queued
        self.unready: set[Row] = set()  # keys not readable at the last packet end
        self.dirty: set[Row] = set()  # keys changed since their last batch
        # Per key, its stored rows' net change not yet sent (None: compare it whole).
        self.pending: dict[Row, Counter[Row] | None] = {}
        self.queue: deque[Event] = deque()
        self.cond = threading.Condition(manager.lock)
        self.exact_lsn = 0  # every key's rows as sent are exact here (0: nothing sent yet)
        # Every key was readable at the last packet end that touched it: then the rows sent
        # are exact at every later packet end too, until a key changes (and touches it).
        self.ready = False
        self.error: PartialflowError | None = None  # set: the stream ends with it
        self.closed = False
        # While some key is not readable: where each key's rows are known since the
        # cut (cuts.py); None while all are (or for a view whose changes don't add up).
        self.hist: dict[Row, KeyHistory] | None = None

    # -- streaming thread ----------------------------------------------------------------
    def next_event(self, timeout: float) -> Event | None:
        """The next event, a heartbeat after ``timeout`` s of nothing (None before the
        snapshot), or raise the error that ends the stream once what precedes it is sent."""
        with self.cond:
            if not self.queue and self.error is None:
                self.cond.wait(timeout)
            if self.queue:
                return self.queue.popleft()
            if self.error is not None:
                raise self.error
            return Event("heartbeat", self.cut_lsn()) if self.started else None

    def cut_lsn(self) -> int:
        """The latest LSN every key's rows as queued are exact at (under the lock)."""
        return max(self.exact_lsn, self.manager.packet_lsn) if self.ready else self.exact_lsn

    def close(self) -> None:
        """The client went away: wake the streaming thread (it then unsubscribes)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # -- executor thread, under the manager's lock -----------------------------------------
    def _push(self, event: Event) -> None:
        if len(self.queue) >= self.max_buffered:
            # Everything queued is a consistent prefix; the client resumes from its end.
            self._end(ResourceExhausted(
                f"subscriber too slow: more than {self.max_buffered} change batches buffered; "
                f"resume from LSN {self.cut_lsn()}"), self.cut_lsn())
            return
        self.queue.append(event)
        self.exact_lsn = event.lsn
        self.ready = True
        self.cond.notify_all()

    def _end(self, error: PartialflowError, resume_lsn: int) -> None:
        if self.error is None:
            error.resume_lsn = resume_lsn  # type: ignore[attr-defined]
            self.error = error
            self.cond.notify_all()
            self.manager.drop(self)
