"""Counters of the dataflow (global and per view) and upquery latencies.

Written on the executor thread under its lock; read under the same lock by ``stats()``.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

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


# -- what the dataflow reports (Dataflow.stats) ---------------------------------------------
@dataclass(frozen=True)
class ViewStats:
    """One view's figures (the contract's per-view keys)."""

    keys_filled: int
    hits: int
    misses: int
    upqueries: int
    evictions: int
    memory_bytes: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class DataflowStats:
    """The dataflow's figures at one moment (taken under the executor's lock). ``as_dict``
    renders them under the names the stats RPC, the CLI, the metrics and the docs use:
    ``applied_lsn`` is ``lsn`` there (the engine calls it ``applied_lsn`` again beside
    storage's ``lsn``), the runner's and the subscriptions' figures and the executor's
    counters are top-level keys, and ``checkpoint`` is there only when checkpoints are."""

    applied_lsn: int
    memory_limit: int
    memory_bytes: int
    partial_bytes: int
    full_bytes: int
    views: dict[str, ViewStats]
    upquery_ms: dict[str, float]
    spark_jobs: int
    runner: dict[str, Any]  # the runner's own figures (runner.UpqueryRunner.stats)
    fills_in_flight: int
    state_anomalies: int
    subscriptions: int
    subscribed_keys: int
    counters: dict[str, int] = field(default_factory=dict)  # Stats.counters, by name
    checkpoint: dict[str, Any] | None = None  # Checkpointer.stats, None when off
    tier: dict[str, Any] | None = None  # Tier.stats (tier_* keys), None without a tier

    def as_dict(self) -> dict[str, Any]:
        return {
            "lsn": self.applied_lsn,
            "memory_limit": self.memory_limit,
            "memory_bytes": self.memory_bytes,
            "partial_bytes": self.partial_bytes,
            "full_bytes": self.full_bytes,
            "views": {name: v.as_dict() for name, v in self.views.items()},
            "upquery_ms": self.upquery_ms,
            "spark_jobs": self.spark_jobs,
            **self.runner,
            "fills_in_flight": self.fills_in_flight,
            "state_anomalies": self.state_anomalies,
            "subscriptions": self.subscriptions,
            "subscribed_keys": self.subscribed_keys,
            **self.counters,
            **({"checkpoint": self.checkpoint} if self.checkpoint is not None else {}),
            **(self.tier or {}),
        }
