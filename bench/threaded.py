"""Timed writer threads for the in-process storage benchmarks (storage_writes.py,
transactions.py, disk_check.py): start ``threads`` threads running ``work(t)`` until
``stop`` is set, let them run ``seconds``, stop and join them. Kept apart from common.py,
which imports the in-process server (and so pyspark) that these benchmarks do without."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def run_threads(work: Callable[[int], None], threads: int, seconds: float,
                stop: threading.Event) -> tuple[float, float]:
    """Runs ``work(0)`` .. ``work(threads - 1)`` in threads for ``seconds``; each must
    return soon after ``stop`` is set. Returns (wall seconds, CPU seconds of this whole
    process meanwhile: every thread, the storage's own threads and fsync calls included)."""
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, time.process_time() - cpu0
