"""Upstream commits on their way to being durable here, settled in order.

The follower submits each upstream transaction as one write (``Engine.submit_many``: checked
and given its LSN at once) and goes on decoding the next, so several upstream commits share
one fsync. This module's thread waits for those writes in submission order and reports each
one durable (``durable``): only then may the upstream be told it is flushed, and readers
waiting for it be woken. At most ``limit`` commits are in flight (``room`` blocks).

Once a write fails (the log ran out of space, say), nothing after it counts as applied: the
writes queued after it were refused with it. Should one of them have been accepted all the
same (storage hands a refused write's LSN back, and a write submitted just after can take
it), the tables here hold an upstream commit without one before it: ``reordered`` is told,
and only a new copy of the tables repairs that.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class Entry:
    """One upstream commit: its write here (None when nothing of it is followed)."""

    ticket: Any | None
    end: int  # the upstream commit's end LSN
    rows: int
    commit_time: datetime


class InFlight:
    def __init__(self, limit: int, durable: Callable[[Entry, int | None], None],
                 reordered: Callable[[Entry], None]) -> None:
        self.limit = max(1, limit)
        self._durable = durable
        self._reordered = reordered
        self._queue: deque[Entry] = deque()
        self._cv = threading.Condition()
        self.error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="follow-commits", daemon=True)
        self._thread.start()

    def room(self) -> None:
        """Wait until another commit may be submitted; raises the error that stopped an
        earlier one (so nothing is submitted after a failure)."""
        with self._cv:
            while len(self._queue) >= self.limit and self.error is None:
                self._cv.wait()
            self._check()

    def put(self, entry: Entry) -> None:
        """After ``room``: the commit just submitted (in upstream commit order)."""
        with self._cv:
            self._queue.append(entry)
            self._cv.notify_all()

    def busy(self) -> bool:
        with self._cv:
            return bool(self._queue)

    def drain(self) -> None:
        """Wait until every commit put is settled; raises the first failure."""
        with self._cv:
            while self._queue:
                self._cv.wait()
            self._check()

    def close(self) -> None:
        """Settle what is in flight (failures are kept in ``error``) and stop the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                entry = self._queue[0]
            lsn: int | None = None
            err: BaseException | None = None
            if entry.ticket is not None:
                try:
                    lsn = int(entry.ticket.wait())
                except BaseException as e:  # noqa: BLE001 - kept, raised on the follower's thread
                    err = e
            if err is None:
                if self.error is None:
                    self._durable(entry, lsn)
                elif entry.ticket is not None:
                    self._reordered(entry)
            with self._cv:
                if err is not None and self.error is None:
                    self.error = err
                self._queue.popleft()
                self._cv.notify_all()
