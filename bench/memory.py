"""Memory and hit rate: Zipf reads under memory limits against full materialization,
against recomputation on Spark per request, and after a restart.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from common import (
    REPO,
    InProcServer,
    LoadPool,
    drive,
    executor_cpu_seconds,
    log,
    pct,
    ratio,
    zipf_cdf,
    zipf_key,
)

# Stats counters of the disk tier (absent without one), reported per measured window.
TIER_COUNTERS = ("tier_shelved", "tier_unshelved", "tier_evictions", "tier_commits",
                 "tier_read")


def materialize_all(srv: InProcServer, view: str, n: int, batch: int) -> dict:
    """Read every key once (lookup_many in batches): the full view, filled on demand."""
    t0 = time.perf_counter()
    with srv.client(timeout=3600) as c:
        for i in range(0, n, batch):
            c.lookup_many(view, list(range(i, min(n, i + batch))))
        st = c.stats()["views"][view]
    secs = time.perf_counter() - t0
    out = {
        "keys": n, "batch": batch, "seconds": round(secs, 2),
        "keys_per_s": round(n / secs), "memory_bytes": st["memory_bytes"],
        "keys_filled": st["keys_filled"], "bytes_per_key": round(st["memory_bytes"] / n, 1),
        "upqueries": st["upqueries"],
    }
    log(f"full materialization: {n} keys in {secs:.1f} s ({out['keys_per_s']} keys/s), "
        f"{st['memory_bytes'] / 2**20:.1f} MiB ({out['bytes_per_key']} B/key)")
    return out


def prefill_hottest(srv: InProcServer, view: str, n: int, count: int, batch: int) -> None:
    """Fill the ``count`` hottest keys, coldest of them first, so the LRU starts close to
    its steady state instead of empty (a warm-up by Zipf reads alone would take minutes)."""
    ranks = list(range(count - 1, -1, -1))
    with srv.client(timeout=3600) as c:
        for i in range(0, count, batch):
            c.lookup_many(view, [zipf_key(r, n) for r in ranks[i : i + batch]])


def zipf_reads(srv: InProcServer, pool: LoadPool, *, view: str, n: int, s: float,
               batch: int, procs: int, threads: int, warm: float, seconds: float,
               seed: int) -> dict:
    """A Zipf read workload: warm-up, then measured; hit rate from the server's counters."""
    op = {"kind": "lookup", "view": view, "batch": batch,
          "keys": {"type": "zipf", "n": n, "s": s}}
    if warm:
        drive(pool, srv.address, op, procs=procs, threads=threads, seconds=warm, seed=seed)
    before = srv.view_counters(view)
    with srv.client() as c:
        st0 = c.stats()
    cpu0 = executor_cpu_seconds(srv.engine.dataflow.executor)
    r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds,
              seed=seed + 1)
    cpu1 = executor_cpu_seconds(srv.engine.dataflow.executor)
    after = srv.view_counters(view)
    hits = after["hits"] - before["hits"]
    misses = after["misses"] - before["misses"]
    with srv.client() as c:
        st = c.stats()
    # With a disk tier: how many keys came back from disk (read misses answered locally,
    # and keys a fill's neighbours needed) and went to it, over the measured window.
    tier = {k: st[k] - st0[k] for k in TIER_COUNTERS if k in st}
    if tier:
        tier.update(tier_keys=st["tier_keys"], tier_bytes=st["tier_bytes"])
    return {
        "tier": tier,
        "executor_cpu_s": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
        "executor_busy_s": round((st.get("busy_ns", 0) - st0.get("busy_ns", 0)) / 1e9, 2),
        "reads": r, "hits": hits, "misses": misses,
        "hit_rate": round(hits / max(1, hits + misses), 4),
        "upqueries": after["upqueries"] - before["upqueries"],
        "memory_bytes": st["memory_bytes"], "view_memory_bytes": st["views"][view]["memory_bytes"],
        "keys_filled": st["views"][view]["keys_filled"],
    }


def simulate_lru(n: int, s: float, capacity: int, draws: int, seed: int) -> float:
    """Hit rate of an LRU of ``capacity`` keys, prefilled like the server's, over ``draws``
    Zipf reads: what the measured hit rate should approach."""
    import numpy as np

    cdf = zipf_cdf(n, s)
    ranks = np.searchsorted(cdf, np.random.default_rng(seed).random(draws), side="right")
    lru: OrderedDict[int, None] = OrderedDict((r, None) for r in range(capacity - 1, -1, -1))
    hits = 0
    half = draws // 2
    for i, r in enumerate(ranks.tolist()):
        if r in lru:
            lru.move_to_end(r)
            if i >= half:
                hits += 1
        else:
            lru[r] = None
            if len(lru) > capacity:
                lru.popitem(last=False)
    return round(hits / (draws - half), 4)


def memory_limits(data_dir: Path, spark: Any, pool: LoadPool, *, view: str, n: int, s: float,
                  full_bytes: int, bytes_per_key: float, fractions: list[float], batch: int,
                  procs: int, threads: int, warm: float, seconds: float) -> list[dict]:
    """For each fraction: a fresh server with memory limit = fraction x full size,
    prefilled with the hottest keys that fit, then Zipf reads."""
    out = []
    cdf = zipf_cdf(n, s)
    for frac in fractions:
        limit = int(full_bytes * frac)
        capacity = max(1, int(limit / bytes_per_key))
        with InProcServer(data_dir, spark, memory_limit=limit) as srv:
            t0 = time.perf_counter()
            prefill_hottest(srv, view, n, int(capacity * 0.95), batch=20_000)
            prefill_s = time.perf_counter() - t0
            r = zipf_reads(srv, pool, view=view, n=n, s=s, batch=batch, procs=procs,
                           threads=threads, warm=warm, seconds=seconds, seed=int(frac * 1000))
        r.update({
            "fraction": frac, "memory_limit": limit, "capacity_keys": capacity,
            "prefill_s": round(prefill_s, 1),
            "ideal_static_hit_rate": round(float(cdf[capacity - 1]), 4),
            "simulated_lru_hit_rate": simulate_lru(n, s, capacity, max(200_000, 4 * capacity), 7),
            "state_vs_full": ratio(r["memory_bytes"], full_bytes),
        })
        out.append(r)
        log(f"zipf limit {frac:.0%} ({limit / 2**20:.1f} MiB, ~{capacity} keys): hit rate "
            f"{r['hit_rate']:.3f} (LRU sim {r['simulated_lru_hit_rate']}, static top-k "
            f"{r['ideal_static_hit_rate']}), state {r['memory_bytes'] / 2**20:.1f} MiB, "
            f"{r['reads']['items_per_s']:.0f} keys/s, p50 {r['reads']['latency_ms']['p50']} ms "
            f"p99 {r['reads']['latency_ms']['p99']} ms")
    return out


def recompute(srv: InProcServer, pool: LoadPool, *, sql: str, n: int, s: float, procs: int,
              threads: int, seconds: float) -> dict:
    """The same Zipf reads answered by running the view's SQL on Spark per request
    (``Client.query``: the server's Spark, at the latest snapshot)."""
    op = {"kind": "query", "sql": sql, "keys": {"type": "zipf", "n": n, "s": s}}
    r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds, seed=77)
    log(f"recompute: {r['calls_per_s']:.1f} reads/s, p50 {r['latency_ms']['p50']} ms "
        f"p99 {r['latency_ms']['p99']} ms ({r['calls']} reads, {r['errors']} errors)")
    return r


def restart(data_dir: Path, pool: LoadPool, *, view: str, n: int, s: float, memory_limit: int,
            target_hit_rate: float, batch: int, procs: int, threads: int, cap: float,
            checkpoints: bool, prefill: int) -> dict:
    """A real server process on the data: time from process start to the first answered
    read, and to a windowed hit rate of ``target_hit_rate`` under the Zipf workload.

    Before the measured start the server runs once, its ``prefill`` hottest keys are
    read and Zipf reads run briefly (the working set), and it is stopped with SIGTERM:
    with ``checkpoints`` its last checkpoint holds that working set; without them
    (``--checkpoint-interval 0``) every view starts cold."""
    sys.path.insert(0, str(REPO / "tests"))
    from helpers import ServerProcess

    from partialflow.client import Client

    args = ("--memory-limit", str(memory_limit),
            *(() if checkpoints else ("--checkpoint-interval", "0")))
    name = "warm" if checkpoints else "cold"
    proc = ServerProcess(data_dir, args=args, log_path=data_dir.with_name(f"restart_{name}.log"))
    out: dict[str, Any] = {"memory_limit": memory_limit, "target_hit_rate": target_hit_rate,
                           "checkpoints": checkpoints}
    try:
        proc.start()
        with Client(proc.address, timeout=3600) as c:
            ranks = list(range(prefill - 1, -1, -1))
            for i in range(0, prefill, 20_000):
                c.lookup_many(view, [zipf_key(r, n) for r in ranks[i:i + 20_000]])
        op = {"kind": "lookup", "view": view, "batch": batch,
              "keys": {"type": "zipf", "n": n, "s": s}}
        drive(pool, proc.address, op, procs=procs, threads=threads, seconds=5.0, seed=98)
        t_stop = time.monotonic()
        proc.terminate()
        out["stop_s"] = round(time.monotonic() - t_stop, 2)
        t0 = time.monotonic()
        proc.start()
        out["start_to_serving_s"] = round(time.monotonic() - t0, 2)
        with Client(proc.address, timeout=600) as c:
            c.lookup(view, zipf_key(0, n))
            out["start_to_first_read_s"] = round(time.monotonic() - t0, 2)
            timeline: list[tuple[float, float]] = []
            stop = threading.Event()
            prev = c.stats()["views"][view]
            result: dict[str, Any] = {}

            def load() -> None:
                op = {"kind": "lookup", "view": view, "batch": batch,
                      "keys": {"type": "zipf", "n": n, "s": s}}
                try:
                    result["reads"] = drive(pool, proc.address, op, procs=procs,
                                            threads=threads, seconds=cap, seed=99, lead=0.2)
                finally:
                    stop.set()

            th = threading.Thread(target=load)
            th.start()
            while not stop.wait(1.0):
                cur = c.stats()["views"][view]
                h, m = cur["hits"] - prev["hits"], cur["misses"] - prev["misses"]
                prev = cur
                if h + m:
                    timeline.append((round(time.monotonic() - t0, 2), round(h / (h + m), 4)))
            th.join()
            out["recovery"] = c.stats().get("checkpoint", {})
        reached = next((t for t, hr in timeline if hr >= target_hit_rate), None)
        out.update({
            "timeline": timeline,
            "start_to_target_hit_rate_s": reached,
            "reads": {k: v for k, v in result.get("reads", {}).items() if k != "cdf_ms"},
        })
        out["serving_to_target_hit_rate_s"] = (
            round(reached - out["start_to_serving_s"], 2) if reached is not None else None)
        log(f"restart ({name}): serving after {out['start_to_serving_s']} s, first read after "
            f"{out['start_to_first_read_s']} s, hit rate {target_hit_rate:.3f} after "
            f"{reached if reached is not None else f'NOT REACHED in {cap}s'} s")
    finally:
        proc.stop()
    return out


__all__ = ["materialize_all", "memory_limits", "pct", "recompute", "restart", "zipf_reads"]
