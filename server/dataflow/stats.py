"""Counters of the dataflow (global and per view) and upquery latencies.

Written on the executor thread under its lock; read under the same lock by ``stats()``.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

# Latencies kept for percentiles: trimmed to the newest half when this many pile up.
MAX_LATENCIES = 20_000


class Stats:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.views: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.upquery_ms: list[float] = []

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    def count_view(self, view: str, name: str, n: int = 1) -> None:
        self.views[view][name] += n

    def view(self, view: str) -> Counter[str]:
        return self.views[view]

    def record_upquery(self, ms: float) -> None:
        self.upquery_ms.append(ms)
        if len(self.upquery_ms) > MAX_LATENCIES:
            del self.upquery_ms[: MAX_LATENCIES // 2]

    def upquery_percentiles(self) -> dict[str, float]:
        return percentiles(sorted(self.upquery_ms[-10_000:]))


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    qs = (
        statistics.quantiles(values, n=100, method="inclusive")
        if len(values) > 1
        else [values[0]] * 99
    )
    return {
        "p50": round(qs[49], 2),
        "p90": round(qs[89], 2),
        "p99": round(qs[98], 2),
        "count": len(values),
    }
