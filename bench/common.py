"""Shared pieces of the benchmark harness: the in-process server, the pool of load
processes, percentiles, Zipf keys, machine facts.

The server runs in the harness process on the harness's Spark session, so a "bare
PySpark" baseline can run on the very same session and snapshot. Load (gRPC clients)
runs in separate processes, so client-side Python does not compete with the server for
the harness's GIL.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from partialflow.testing.inprocess import InProcessServer

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

# rank -> key: a fixed permutation of 0..n-1, so hot keys are spread over the key space
# (a multiplier coprime to n; 999983 is prime and n is a power of ten here).
_SPREAD = 999_983


def zipf_key(rank: int, n: int) -> int:
    """The key of Zipf rank ``rank`` (0 = hottest) among ``n`` keys."""
    return (rank * _SPREAD) % n


def zipf_cdf(n: int, s: float) -> Any:
    """Cumulative probabilities of ranks 0..n-1 under Zipf(s) (numpy array)."""
    import numpy as np

    w = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), s)
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def zipf_ranks(cdf: Any, size: int, seed: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.searchsorted(cdf, rng.random(size), side="right")


def pct(values: list[float], scale: float = 1000.0) -> dict[str, float]:
    """p50/p90/p99/mean/max of latencies in seconds, reported in ms (``scale``)."""
    if not values:
        return {"n": 0}
    xs = sorted(values)

    def q(p: float) -> float:
        i = min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))
        return round(xs[i] * scale, 3)

    return {
        "n": len(xs),
        "p50": q(0.50),
        "p90": q(0.90),
        "p99": q(0.99),
        "mean": round(statistics.fmean(xs) * scale, 3),
        "min": round(xs[0] * scale, 3),
        "max": round(xs[-1] * scale, 3),
    }


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    """What the figures were taken on."""
    import pyspark

    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    java = ""
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        java = (out.stderr or out.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    commit = ""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": java,
        "platform": platform.platform(),
        "commit": commit,
        "loadavg_at_start": loadavg(),
    }


class LoadPool:
    """Worker processes that run load functions (bench/loadgen.py) against the server."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.pool = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"))
        # Start every worker now (imports grpc once), so no measurement pays for it.
        list(self.pool.map(_warm, range(processes)))

    def run(self, fn: Any, specs: list[dict]) -> list[Any]:
        """Run ``fn(spec)`` for each spec concurrently (at most ``processes`` at a time)."""
        assert len(specs) <= self.processes, "more specs than load processes"
        futures = [self.pool.submit(fn, s) for s in specs]
        return [f.result() for f in futures]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _warm(_: int) -> int:
    import loadgen  # noqa: F401  (bench/ is on the workers' sys.path: spawn copies it)

    return os.getpid()


class InProcServer(InProcessServer):
    """The tests' in-process server, with the harness's generous client timeout."""

    def __init__(self, data_dir: Path, spark: Any, *, memory_limit: int | None = None,
                 checkpoint_interval: float = 0.0, **config: Any) -> None:
        # Checkpoints off unless asked for: the data sets are shared between sections, and
        # a section must not start with the keys the one before it filled (the miss path
        # would measure hits). The checkpoints section measures what they cost.
        super().__init__(data_dir, spark, memory_limit=memory_limit,
                         checkpoint_interval=checkpoint_interval, **config)

    def client(self, timeout: float = 600.0, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().client(timeout=timeout, **kwargs)


def build_data(data_dir: Path, spark: Any, tables: list[str], views: list[str],
               load: Callable[[Any], int]) -> tuple[int, float]:
    """Make a data set in ``data_dir``: create ``tables``, fill them with ``load(storage)``
    (returns the rows it wrote), flush and compact them to one segment per table (so no
    background compaction runs during a measurement later), then create ``views``.
    Returns (rows, seconds the load took)."""
    with InProcServer(data_dir, spark) as srv:
        for sql in tables:
            srv.engine.execute(sql)
        t0 = time.perf_counter()
        rows = load(srv.engine.storage)
        loaded = time.perf_counter() - t0
        srv.engine.flush()
        srv.engine.compact()
        for sql in views:
            srv.engine.execute(sql)
    return rows, loaded


def executor_cpu_seconds(executor: Any) -> float | None:
    """CPU seconds the dataflow's executor thread has used (its own thread clock: what it
    spent, whatever else runs on the machine); None before it runs or off Linux."""
    thread = executor._thread  # the executor keeps its thread private; benchmarks only read it
    if thread is None or thread.ident is None:
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError):
        return None


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cdf_points(values: list[float], scale: float = 1000.0) -> list[float]:
    """101 quantiles (0%..100%) plus 99.9%, in ms: enough to redraw a latency CDF."""
    if not values:
        return []
    xs = sorted(values)
    n = len(xs)
    qs = [xs[min(n - 1, int(p / 100 * (n - 1) + 0.5))] for p in range(101)]
    qs.append(xs[min(n - 1, int(0.999 * (n - 1) + 0.5))])
    return [round(x * scale, 4) for x in qs]


def drive(pool: LoadPool, address: str, op: dict, *, procs: int = 1, threads: int = 1,
          seconds: float | None = None, calls: int | None = None, seed: int = 0,
          lead: float = 1.0, timeout: float = 600.0) -> dict:
    """Run ``op`` from ``procs`` load processes x ``threads`` threads, started together;
    returns the merged counts, rates and latency percentiles (ms)."""
    group = {"op": op, "procs": procs, "threads": threads, "seconds": seconds, "calls": calls,
             "seed": seed}
    return drive_mixed(pool, address, [group], lead=lead, timeout=timeout)[0]


def drive_mixed(pool: LoadPool, address: str, groups: list[dict], *, lead: float = 1.0,
                timeout: float = 600.0) -> list[dict]:
    """Several load groups at once (e.g. writers, readers and a probe), all started at
    the same instant; one merged result per group (see ``drive``)."""
    import loadgen

    start_at = time.time() + lead
    specs, owner = [], []
    for g, grp in enumerate(groups):
        for p in range(grp.get("procs", 1)):
            specs.append({
                "address": address, "op": grp["op"], "threads": grp.get("threads", 1),
                "seconds": grp.get("seconds"), "calls": grp.get("calls"),
                "seed": grp.get("seed", 0) * 100 + p, "start_at": start_at,
                "thread_base": p * grp.get("threads", 1), "timeout": timeout,
            })
            owner.append(g)
    parts = pool.run(loadgen.run, specs)
    bad = [p for p in parts if "error" in p]
    if bad:
        raise RuntimeError(f"load process failed: {bad[0]}")
    return [_merge([p for p, o in zip(parts, owner, strict=True) if o == g], groups[g], start_at)
            for g in range(len(groups))]


def _merge(parts: list[dict], grp: dict, start_at: float) -> dict:
    lat = [x for p in parts for x in p["lat"]]
    elapsed = max(p["elapsed"] for p in parts) or 1e-9
    calls_n = sum(p["calls"] for p in parts)
    items = sum(p["items"] for p in parts)
    out = {
        "procs": grp.get("procs", 1),
        "threads": grp.get("threads", 1),
        "calls": calls_n,
        "items": items,
        "errors": sum(p["errors"] for p in parts),
        "started_at": start_at,
        "elapsed_s": round(elapsed, 3),
        "calls_per_s": round(calls_n / elapsed, 1),
        "items_per_s": round(items / elapsed, 1),
        "latency_ms": pct(lat),
        "cdf_ms": cdf_points(lat),
    }
    samples = [e for p in parts for e in p["error_samples"]]
    if samples:
        out["error_samples"] = samples[:5]
    extra: dict[str, list[float]] = {}
    for p in parts:
        for k, v in p["extra"].items():
            extra.setdefault(k, []).extend(v)
    for k, v in extra.items():
        out[f"{k}_ms"] = pct(v)
        out[f"{k}_cdf_ms"] = cdf_points(v)
    return out
