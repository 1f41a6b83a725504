"""Free space on the data directory's filesystem: writes are refused before the disk is
full, and background work that failed for lack of space is retried with backoff.

Running out of space is foreseeable and recoverable, unlike a failed fsync (after which
the page cache can no longer be trusted, so that stays fail-stop: see ``wal.py``). So a
write is checked *before* it takes an LSN: it is accepted only if the filesystem keeps,
after it and every write queued before it, room for the next flush of the memtable (about
the memtable's Arrow size) plus a fixed reserve (``--disk-reserve``: the log's next file,
the row index, manifests, checkpoints). Otherwise it is refused with RESOURCE_EXHAUSTED and
nothing is written; reads need no space and go on. Writes resume by themselves once space
is freed: every write measures the filesystem again (one ``statvfs``, a few microseconds).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from partialflow.server.errors import ResourceExhausted

log = logging.getLogger(__name__)

# The errors that mean "no room": the disk is full, or the user's quota is.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13
# How Java (Spark) and Arrow spell ENOSPC when it reaches us as text only.
_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "database or disk is full")

RESERVE_CAP = 64 << 20  # the default reserve: 64 MiB...
RESERVE_FRACTION = 16  # ...or 1/16 of the filesystem when that is smaller (small volumes)


def is_space_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk or quota is full."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
            return True
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(exc, sqlite3.Error) and code == _SQLITE_FULL:
            return True
        if any(t in str(exc) for t in _SPACE_TEXT):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def fmt_bytes(n: int) -> str:
    """``12.3 MiB`` style, for messages."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover - the loop always returns


def default_reserve(filesystem_bytes: int) -> int:
    """64 MiB, or 1/16 of the filesystem when that is less (so a few-MB volume is usable)."""
    return min(RESERVE_CAP, filesystem_bytes // RESERVE_FRACTION)


class DiskSpace:
    """The free-space check of one data directory, and its figures.

    ``check`` runs under the storage lock (its counters rely on that); ``free_bytes`` and
    ``stats`` may run anywhere. An episode starts with a refused write and ends when a write
    finds a reserve's worth of room beyond what it needs; its start is logged as a warning
    and its end once, not every refused write.
    """

    def __init__(self, path: Path, reserve: int | None = None) -> None:
        self.path = Path(path)
        vfs = os.statvfs(self.path)
        self.reserve = (
            int(reserve) if reserve is not None else default_reserve(vfs.f_blocks * vfs.f_frsize)
        )
        self.refused = 0  # writes refused for space since start
        self.episodes = 0  # runs of refusals
        self._short = False
        self._episode_refused = 0
        self._last_free = vfs.f_bavail * vfs.f_frsize
        self._lock = threading.Lock()
        # Table ids whose background compaction waits for room (the compactor's, logged once).
        self.deferred: set[int] = set()

    def free_bytes(self) -> int:
        """Bytes this process may still write on the data directory's filesystem."""
        vfs = os.statvfs(self.path)
        free = vfs.f_bavail * vfs.f_frsize
        self._last_free = free
        return free

    @property
    def short(self) -> bool:
        return self._short

    def check(self, free: int, write_bytes: int, queued_bytes: int, flush_bytes: int) -> None:
        """Refuse (ResourceExhausted) unless ``free`` leaves, after this write's log frame and
        the ``queued_bytes`` accepted before it, room for a flush of ``flush_bytes`` plus the
        reserve. Call under the storage lock, before the write takes an LSN."""
        need = write_bytes + queued_bytes + flush_bytes + self.reserve
        if free >= need:
            self.settle(free - write_bytes, queued_bytes, flush_bytes)
            return
        with self._lock:
            self.refused += 1
        self._episode_refused += 1
        if not self._short:
            self._short = True
            self._episode_refused = 1
            with self._lock:
                self.episodes += 1
            log.warning(
                "disk nearly full on %s: %s free, a write needs %s with the reserve; refusing "
                "writes (RESOURCE_EXHAUSTED) until space is freed, reads go on",
                self.path, fmt_bytes(free), fmt_bytes(need))
        raise ResourceExhausted(
            f"disk full: the data directory {self.path} has {fmt_bytes(free)} free, and a "
            f"write needs {fmt_bytes(need)} (this write {fmt_bytes(write_bytes)}, writes "
            f"queued before it {fmt_bytes(queued_bytes)}, the next flush "
            f"{fmt_bytes(flush_bytes)}, the reserve {fmt_bytes(self.reserve)} "
            "(--disk-reserve)); nothing was written. Free space on that filesystem and "
            "retry: writes resume by themselves"
        )

    def settle(self, free: int, queued_bytes: int, flush_bytes: int) -> None:
        """End the episode if ``free`` leaves a reserve's worth of room to spare beyond what
        writes need (so small writes squeezing in between refused big ones do not start a
        new episode each time). Called by ``check`` and, while short, by the flusher, so an
        idle server notices too. Under the storage lock."""
        if self._short and free >= queued_bytes + flush_bytes + 2 * self.reserve:
            self._short = False
            log.info("disk space available again on %s (%s free): writes accepted after %d "
                     "were refused", self.path, fmt_bytes(free), self._episode_refused)

    def refuse_group(self, n: int, err: BaseException) -> ResourceExhausted:
        """The error for ``n`` writes whose log append ran out of space (a race past
        ``check``); counts them and starts an episode like ``check`` does."""
        with self._lock:
            self.refused += n
            if not self._short:
                self.episodes += 1
        if not self._short:
            self._short = True
            self._episode_refused = 0
            log.warning("disk full on %s while appending to the log (%s): refusing writes "
                        "until space is freed", self.path, err)
        self._episode_refused += n
        return ResourceExhausted(
            f"disk full: the write-ahead log in {self.path} could not be appended to ({err}); "
            "the write was undone and nothing was written. Free space on that filesystem and "
            "retry: writes resume by themselves"
        )

    def stats(self) -> dict[str, Any]:
        try:
            free = self.free_bytes()
        except OSError:
            free = self._last_free
        with self._lock:
            return {
                "disk_free_bytes": free,
                "disk_reserve_bytes": self.reserve,
                "disk_short": int(self._short),
                "writes_refused_disk_full": self.refused,
                "disk_full_episodes": self.episodes,
            }


class Backoff:
    """Retries of one background task (flush, compaction, index update): the wait after
    each consecutive failure doubles from ``first`` up to ``cap`` seconds. The first failure
    of a run is logged with its traceback, later ones in one line at debug level, and the
    recovery once, so a full disk does not flood the log."""

    def __init__(self, what: str, first: float = 0.25, cap: float = 8.0) -> None:
        self.what = what
        self.first = first
        self.cap = cap
        self.failures = 0  # consecutive
        self.total = 0  # since start

    def failed(self, exc: BaseException) -> float:
        """Record a failure; returns the seconds to wait before trying again."""
        self.failures += 1
        self.total += 1
        delay = min(self.cap, self.first * 2 ** (self.failures - 1))
        why = "no space left" if is_space_error(exc) else "error"
        if self.failures == 1:
            log.error("%s failed (%s); retrying with backoff, up to every %.0f s",
                      self.what, why, self.cap, exc_info=exc)
        else:
            log.debug("%s failed again (%d in a row, %s: %s); next try in %.2f s",
                      self.what, self.failures, why, exc, delay)
        return delay

    def succeeded(self) -> None:
        if self.failures:
            log.warning("%s succeeded again after %d failed tries", self.what, self.failures)
            self.failures = 0
