"""How far the follower has got, as readers see it: the upstream position every read is
exact at, waiting for an upstream commit (``wait_for``), and the upstream position of one
of our LSNs (``upstream_at``).

A commit counts only once its write is durable here. The map from our LSNs to upstream
commit LSNs takes each write when it is submitted (its LSN is known then, and no reader can
be at an LSN before it is durable and delivered), so a read at a write whose settling the
follower has not yet seen still gets that write's upstream position.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable

from partialflow.server.errors import DeadlineExceeded
from partialflow.server.follow.lsn import format_lsn

HISTORY_MAX = 100_000


class Position:
    def __init__(self, applied: int | None, last_write_lsn: int) -> None:
        self.cv = threading.Condition()
        # Every upstream commit up to here is applied (durable) here; past the last commit
        # when the walsender has reported a later position with nothing for us.
        self.caught_up = applied or 0
        self.last_write_lsn = last_write_lsn  # our LSN of the last durable commit
        self.history: list[tuple[int, int]] = []  # (our LSN, upstream end LSN), ascending
        if applied is not None:
            self.history.append((last_write_lsn, applied))
        self.waiters = 0

    def submitted(self, lsn: int, upstream_end: int) -> None:
        with self.cv:
            self.history.append((lsn, upstream_end))
            if len(self.history) > HISTORY_MAX:
                del self.history[: HISTORY_MAX // 2]

    def durable(self, lsn: int | None, upstream_end: int) -> None:
        """A commit is durable here (``lsn`` None: nothing of it was for us)."""
        with self.cv:
            if lsn is not None:
                self.last_write_lsn = max(self.last_write_lsn, lsn)
            self.caught_up = max(self.caught_up, upstream_end)
            self.cv.notify_all()

    def failed(self) -> None:
        """Submitted writes were refused: forget their LSNs (storage hands them back)."""
        with self.cv:
            while self.history and self.history[-1][0] > self.last_write_lsn:
                self.history.pop()

    def wait_for(self, upstream_lsn: int, timeout: float, why: Callable[[], str],
                 cancelled: Callable[[], bool] | None = None) -> int:
        """Wait until every upstream commit up to ``upstream_lsn`` is applied here; returns
        our LSN a read must be at (or later) to see them. DeadlineExceeded after
        ``timeout`` seconds, saying how far we got and ``why()``. Returns early once
        ``cancelled()`` is true (checked every 50 ms; the caller looks at it)."""
        deadline = time.monotonic() + timeout
        with self.cv:
            self.waiters += 1
            try:
                while self.caught_up < upstream_lsn:
                    if cancelled is not None and cancelled():
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DeadlineExceeded(
                            f"upstream LSN {format_lsn(upstream_lsn)} not applied within "
                            f"{timeout:g} s (applied up to {format_lsn(self.caught_up)}; "
                            f"{why()})")
                    self.cv.wait(left if cancelled is None else min(left, 0.05))
                return self.last_write_lsn
            finally:
                self.waiters -= 1

    def upstream_at(self, lsn: int) -> int | None:
        """The upstream position a read exact at our ``lsn`` is exact at, None if unknown."""
        with self.cv:
            h = self.history
            if not h:
                return self.caught_up or None
            if lsn >= h[-1][0] and h[-1][0] <= self.last_write_lsn:
                return self.caught_up  # nothing in flight: idle positions count too
            i = bisect_right(h, (lsn, 1 << 64)) - 1
            return h[i][1] if i >= 0 else None
