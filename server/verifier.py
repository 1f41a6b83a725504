"""The background read sampler (``serve --verify-sample RATE``).

A fraction of the keys that lookups serve are re-checked against the base tables: the
view's SQL, with its ``?`` parameters bound to the key and any views it reads inlined as
subqueries, runs through ``storage.query(sql, as_of=lsn)`` — a Spark job over the
snapshot at the read's own LSN that shares nothing with the dataflow — and the answers are
compared as multisets. A mismatch is counted in ``stats()["verifier"]`` and logged with
the view, key, LSN and both answers.

The sampler must never slow reads down or pile up work: the read observer only draws a
random number and, if sampled, puts the read on a bounded queue without blocking (a full
queue drops it, counted). One background thread runs the checks, at most
``max_per_second`` of them, so the extra Spark load has a fixed ceiling.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from partialflow.server.errors import InvalidArgument, NotFound, Unavailable
from partialflow.server.sql.oracle import oracle_sql

log = logging.getLogger("partialflow.verifier")

# (view, key, rows as served, LSN they are exact at)
Sample = tuple[str, tuple, list[tuple], int]


def norm_value(v: Any) -> Any:
    """A value as compared: floats to 9 significant digits, because incremental sums and
    averages differ from Spark's in the last bits."""
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return float(f"{v:.9g}")
    return v


def same_rows(got: Sequence[Sequence[Any]], want: Sequence[Sequence[Any]]) -> bool:
    """Equal as multisets of rows (order is not compared; ORDER BY ... LIMIT picks *which*
    rows, and the oracle SQL makes that choice the same way)."""
    return _bag(got) == _bag(want)


def _bag(rows: Sequence[Sequence[Any]]) -> Counter:
    return Counter(tuple(norm_value(v) for v in r) for r in rows)


class Verifier:
    """Samples served reads and re-checks them on Spark in one background thread."""

    def __init__(
        self,
        storage: Any,
        view_sql: Callable[[str], str | None],
        *,
        sample: float,
        max_per_second: float = 2.0,
        queue_size: int = 64,
    ) -> None:
        if not 0.0 <= sample <= 1.0:
            raise ValueError(f"invalid verify sample {sample}: a fraction of reads, 0..1")
        if max_per_second <= 0:
            raise ValueError(
                f"invalid verify rate {max_per_second}: checks per second must be positive"
            )
        self.storage = storage
        self.view_sql = view_sql
        self.sample = sample
        self.max_per_second = max_per_second
        self._queue: queue.Queue[Sample] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._counts: Counter = Counter()
        self._last_mismatch: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="verifier", daemon=True)

    @property
    def enabled(self) -> bool:
        return self.sample > 0

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    # -- the read path ----------------------------------------------------------------
    def observe(self, view: str, key: tuple, rows: list[tuple], lsn: int) -> None:
        """A Dataflow read observer: sample, enqueue without blocking, drop when full."""
        if random.random() >= self.sample:
            return
        try:
            self._queue.put_nowait((view, tuple(key), list(rows), lsn))
            counted = "sampled"
        except queue.Full:
            counted = "dropped"
        with self._lock:
            self._counts[counted] += 1

    # -- the background thread --------------------------------------------------------
    def _loop(self) -> None:
        gap = 1.0 / self.max_per_second
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            # Pace the checks, not the sampling: what arrives meanwhile queues or drops.
            delay = next_at - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            next_at = max(next_at, time.monotonic()) + gap
            self._count(self.check(*item))

    def check(self, view: str, key: tuple, rows: list[tuple], lsn: int) -> str:
        """Re-check one read; returns "ok", "mismatches", "skipped" or "errors"."""
        try:
            sql = self.view_sql(view)
            if sql is None:
                return "skipped"  # dropped since it was read
            _, want, _ = self.storage.query(oracle_sql(sql, key, self.view_sql), as_of=lsn)
        except (InvalidArgument, NotFound, Unavailable) as err:
            # e.g. the LSN fell behind the retention horizon, a table was dropped, or
            # Spark is down and being restarted (no verdict on the read either way).
            log.debug("verifier skipped %s %r at LSN %d: %s", view, key, lsn, err)
            return "skipped"
        except Exception as err:  # noqa: BLE001 - a Spark failure is no verdict on the read
            log.warning("verifier could not check %s %r at LSN %d: %s", view, key, lsn, err)
            return "errors"
        if same_rows(rows, want):
            return "ok"
        got_s, want_s = sorted(map(repr, rows)), sorted(map(repr, want))
        log.error(
            "verifier MISMATCH in view %s key %r at LSN %d: served %s, Spark at that LSN %s",
            view,
            key,
            lsn,
            got_s,
            want_s,
        )
        with self._lock:
            self._last_mismatch = {
                "view": view,
                "key": list(key),
                "lsn": lsn,
                "served": got_s,
                "expected": want_s,
            }
        return "mismatches"

    def _count(self, outcome: str) -> None:
        with self._lock:
            if outcome in ("ok", "mismatches"):
                self._counts["checks"] += 1
            if outcome != "ok":
                self._counts[outcome] += 1

    def stats(self) -> dict[str, Any]:
        """Counters for ``engine.stats()["verifier"]`` (and the metrics collector)."""
        with self._lock:
            c = self._counts
            out: dict[str, Any] = {
                "enabled": self.enabled,
                "sample": self.sample,
                "max_per_second": self.max_per_second,
                "sampled": c["sampled"],
                "dropped": c["dropped"],
                "checks": c["checks"],
                "mismatches": c["mismatches"],
                "skipped": c["skipped"],
                "errors": c["errors"],
                "queued": self._queue.qsize(),
            }
            if self._last_mismatch is not None:
                out["last_mismatch"] = dict(self._last_mismatch)
            return out


def attach_verifier(
    storage: Any, dataflow: Any, *, sample: float, max_per_second: float
) -> Verifier:
    """A started Verifier fed by ``dataflow``'s read observers (none if ``sample`` is 0,
    so an unsampled server pays nothing on reads)."""

    def view_sql(name: str) -> str | None:
        reader = dataflow.graph.readers.get(name)
        return None if reader is None else reader.sql

    verifier = Verifier(storage, view_sql, sample=sample, max_per_second=max_per_second)
    if verifier.enabled:
        dataflow.read_observers.append(verifier.observe)
        verifier.start()
    return verifier
