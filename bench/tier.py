#!/usr/bin/env python3
"""The disk tier against the memory limit alone, side by side on the same data (a
benchmark, not a test).

    python bench/tier.py                      # 1M keys, 1% in memory: about 20 minutes
    python bench/tier.py --keys 100000 --seconds 6 --warm 2 --write-seconds 4   # a look
    python bench/tier.py --profile            # and where the executor's time goes

The memory section's Zipf workload (bench/memory.py: ``user_totals``, COUNT/SUM per user
over ``--keys`` users, Zipf(``--s``) reads of ``--batch`` keys per ``lookup_many`` from
``--procs`` x ``--threads`` readers), under a memory limit of ``--fraction`` of the fully
materialized view, run on a real in-process server once per configuration:

- ``none``: the memory limit alone (evicted keys are holes; a miss is a Spark upquery),
  prefilled with the hottest keys that fit, as the memory section does;
- ``Nx``: a disk tier of N times the memory limit (``--disk``, e.g. ``10x``), and ``all``:
  one big enough for the whole view. A tier configuration is prefilled with every key,
  coldest first (the tier keeps the hottest that fit, the memory the hottest of those);
- ``full`` (unless ``--no-full``): no limit, every key in memory: the hit path's ceiling
  under the same load.

Each prints the memory hit rate, the misses answered from the tier (keys brought back
from disk), Spark upqueries, read p50/p99 per call, keys/s, and the ratio to ``none``;
then the same reads from ``--light-threads`` readers (latency off saturation).
Then, on the same server, a write stream through the view (``events`` rows for users
drawn Zipf and then uniformly, ``--write-batch`` rows per insert from ``--write-procs`` x
``--write-threads`` writers): rows/s applied, and the ratio to ``none``.

The view's bytes per key come from filling ``--sample`` keys without a limit (the memory
section fills all of them, which takes minutes); the data set is built once under
``--work`` and copied for each configuration, so each starts from the same files.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import datasets as ds  # noqa: E402
import memory  # noqa: E402
from common import InProcServer, LoadPool, build_data, drive, log, machine, ratio  # noqa: E402
from write_path import _applied_rate  # noqa: E402

VIEW = "user_totals"


def parse_disk(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for s in names:
        if s != "all" and not (s.endswith("x") and s[:-1].replace(".", "", 1).isdigit()):
            raise argparse.ArgumentTypeError(f"--disk: {s!r} is neither Nx nor all")
    return names


def disk_limit(name: str, memory_limit: int) -> int:
    """``Nx``: N times the memory limit; ``all``: 1 TiB (more than the view ever takes)."""
    return 2**40 if name == "all" else int(float(name[:-1]) * memory_limit)


@contextmanager
def profiled(srv: InProcServer, out: dict, name: str, top: int = 30) -> Iterator[None]:
    """cProfile around every packet the executor runs (its own thread) while inside; the
    top functions by own time go into ``out[name]`` (by cumulative time:
    ``out[name + "_cumulative"]``). It slows the executor (about
    2x): figures taken under it are for where the time goes, not how much."""
    ex = srv.engine.dataflow.executor
    prof = cProfile.Profile()
    run = ex._run  # benchmarks only: the packet loop calls self._run

    def run_profiled(packet: Any, expire: bool = False) -> None:
        prof.enable()
        try:
            run(packet, expire)
        finally:
            prof.disable()

    ex._run = run_profiled
    try:
        yield
    finally:
        ex._run = run
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
        out[name] = buf.getvalue()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
        out[name + "_cumulative"] = buf.getvalue()


def writes(srv: InProcServer, pool: LoadPool, args: argparse.Namespace, keys: dict) -> dict:
    """Rows/s applied through the view: ``events`` inserts for users drawn from ``keys``."""
    op = {"kind": "write", "gen": "events", "batch": args.write_batch, "keys": keys}
    with srv.client() as c:
        st0 = c.stats()
    r = drive(pool, srv.address, op, procs=args.write_procs, threads=args.write_threads,
              seconds=args.write_seconds, seed=5)
    applied = _applied_rate(srv, r)
    with srv.client() as c:
        st = c.stats()
    return {"keys": keys["type"], "acked_rows_per_s": r["items_per_s"],
            "applied_rows_per_s": round(applied, 1), "latency_ms": r["latency_ms"],
            "errors": r["errors"],
            "tier": {k: st[k] - st0[k] for k in memory.TIER_COUNTERS if k in st}}


def run_config(name: str, data: Path, spark: Any, pool: LoadPool, args: argparse.Namespace,
               limit: int, capacity: int) -> dict:
    """One configuration on a fresh copy of the data: prefill, Zipf reads, writes."""
    copy = data.parent / f"run-{name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data, copy)
    n = args.keys
    disk = None if name in ("none", "full") else disk_limit(name, limit)
    mem = None if name == "full" else limit
    out: dict[str, Any] = {"config": name, "memory_limit": mem, "disk_limit": disk}
    try:
        with InProcServer(copy, spark, memory_limit=mem, disk_limit=disk,
                          checkpoint_interval=args.checkpoint_interval) as srv:
            count = int(capacity * 0.95) if name == "none" else n
            t0 = time.perf_counter()
            memory.prefill_hottest(srv, VIEW, n, count, batch=20_000)
            out["prefill_keys"] = count
            out["prefill_s"] = round(time.perf_counter() - t0, 1)
            log(f"{name}: prefilled {count} keys in {out['prefill_s']} s")
            zipf = {"view": VIEW, "n": n, "s": args.s, "batch": args.batch,
                    "procs": args.procs, "threads": args.threads}
            prof = args.profile and disk is not None
            with profiled(srv, out, "profile") if prof else _nothing():
                r = memory.zipf_reads(srv, pool, warm=args.warm, seconds=args.seconds,
                                      seed=11, **zipf)
            out["reads"] = r
            lat = r["reads"]["latency_ms"]
            # Keys read from the tier by readers themselves (tier_read), and brought back
            # into memory (tier_unshelved: by the executor, for a read or a write).
            tier_reads = r["tier"].get("tier_read", 0)
            tier_hits = r["tier"].get("tier_unshelved", 0)
            log(f"{name}: hit rate {r['hit_rate']:.3f}, tier {tier_reads} keys read by "
                f"readers ({tier_reads / max(1, r['misses']):.2f} of misses), {tier_hits} "
                f"brought back, {r['upqueries']} "
                f"upqueries, p50 {lat['p50']} ms p99 {lat['p99']} ms, "
                f"{r['reads']['items_per_s']:.0f} keys/s, executor busy "
                f"{r['executor_busy_s']} s of {args.seconds}"
                f"{' (profiled)' if prof else ''}")
            if prof:
                print(f"--- {name}: executor profile (own time) ---\n{out['profile']}",
                      file=sys.stderr)
            # The same reads from a few readers: latency when the server is not saturated.
            light = {**zipf, "procs": 1, "threads": args.light_threads}
            r = memory.zipf_reads(srv, pool, warm=0, seconds=max(5.0, args.seconds / 3),
                                  seed=23, **light)
            out["light_reads"] = r
            lat = r["reads"]["latency_ms"]
            log(f"{name}: {args.light_threads} readers: hit rate {r['hit_rate']:.3f}, "
                f"p50 {lat['p50']} ms p99 {lat['p99']} ms, "
                f"{r['reads']['items_per_s']:.0f} keys/s")
            out["writes"] = []
            for keys in ({"type": "zipf", "n": n, "s": args.s}, {"type": "uniform", "n": n}):
                with profiled(srv, out, f"profile_writes_{keys['type']}") if prof \
                        else _nothing():
                    w = writes(srv, pool, args, keys)
                out["writes"].append(w)
                log(f"{name}: writes ({keys['type']} users) {w['applied_rows_per_s']:.0f} "
                    f"rows/s applied, p50 {w['latency_ms']['p50']} ms, tier {w['tier']}")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return out


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def compare(runs: list[dict]) -> list[dict]:
    """Each configuration against ``none``: keys/s, p50, write rows/s."""
    base = runs[0]
    out = []
    for r in runs:
        reads, b = r["reads"], base["reads"]
        row = {
            "config": r["config"], "hit_rate": reads["hit_rate"],
            "tier_reads": reads["tier"].get("tier_read", 0),
            "tier_hits": reads["tier"].get("tier_unshelved", 0),
            "misses": reads["misses"], "upqueries": reads["upqueries"],
            "p50_ms": reads["reads"]["latency_ms"]["p50"],
            "p99_ms": reads["reads"]["latency_ms"]["p99"],
            "keys_per_s": reads["reads"]["items_per_s"],
            "keys_per_s_vs_none": ratio(reads["reads"]["items_per_s"],
                                        b["reads"]["items_per_s"]),
            "p50_vs_none": ratio(reads["reads"]["latency_ms"]["p50"],
                                 b["reads"]["latency_ms"]["p50"]),
            "light_p50_ms": r["light_reads"]["reads"]["latency_ms"]["p50"],
            "light_p99_ms": r["light_reads"]["reads"]["latency_ms"]["p99"],
            "light_keys_per_s": r["light_reads"]["reads"]["items_per_s"],
        }
        for w, bw in zip(r["writes"], base["writes"], strict=True):
            row[f"write_{w['keys']}_rows_per_s"] = w["applied_rows_per_s"]
            row[f"write_{w['keys']}_vs_none"] = ratio(w["applied_rows_per_s"],
                                                      bw["applied_rows_per_s"])
        out.append(row)
    return out


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(str(r.get(c, "")) for c in cols) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--s", type=float, default=0.99, help="Zipf exponent")
    ap.add_argument("--fraction", type=float, default=0.01,
                    help="memory limit as a fraction of the fully materialized view")
    ap.add_argument("--disk", type=parse_disk, default=["10x", "all"],
                    help="tier sizes: Nx (N times the memory limit) or all (comma-separated)")
    ap.add_argument("--sample", type=int, default=50_000,
                    help="keys filled without a limit to price a key")
    ap.add_argument("--batch", type=int, default=10, help="keys per lookup_many")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--warm", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--write-batch", type=int, default=100)
    ap.add_argument("--write-procs", type=int, default=2)
    ap.add_argument("--write-threads", type=int, default=2)
    ap.add_argument("--write-seconds", type=float, default=10.0)
    ap.add_argument("--checkpoint-interval", type=float, default=10.0,
                    help="seconds (the server's default; 0: off). The tier commits its "
                    "transaction at each checkpoint: off, its WAL grows without bound")
    ap.add_argument("--light-threads", type=int, default=4,
                    help="readers of the second, lighter read phase (one process)")
    ap.add_argument("--full", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the view fully in memory (no limit): the hit path's "
                    "ceiling under the same load")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile the executor during the tier configurations' reads and "
                    "writes (it slows the executor: figures for where time goes only)")
    ap.add_argument("--work", type=Path, default=BENCH / "results" / "tier",
                    help="where the data set is built (kept and reused: delete to rebuild)")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every figure")
    args = ap.parse_args(argv)

    from partialflow.server.spark import spark_session

    results: dict[str, Any] = {"meta": machine(), "config": {
        k: v for k, v in vars(args).items() if k not in ("work", "out")}}
    log(f"load average {results['meta']['loadavg_at_start']}")
    spark = spark_session()
    data = args.work / f"events-{args.keys}" / "data"
    if not (data.parent / "built").exists():
        shutil.rmtree(data.parent, ignore_errors=True)
        rows, secs = build_data(data, spark, ds.EVENTS_TABLES, ds.EVENTS_VIEWS,
                                lambda st: ds.load_events(st, args.keys))
        (data.parent / "built").write_text(f"{rows} rows\n")
        log(f"data set: {rows} rows in {secs:.1f} s under {data}")
    pool = LoadPool(max(args.procs, args.write_procs))
    try:
        # Price a key: fill --sample keys without a limit (bytes per key of the view).
        sample = data.parent / "run-sample"
        shutil.rmtree(sample, ignore_errors=True)
        shutil.copytree(data, sample)
        with InProcServer(sample, spark) as srv:
            full = memory.materialize_all(srv, VIEW, min(args.sample, args.keys), 20_000)
        shutil.rmtree(sample, ignore_errors=True)
        full_bytes = int(full["bytes_per_key"] * args.keys)
        limit = int(full_bytes * args.fraction)
        capacity = max(1, int(limit / full["bytes_per_key"]))
        results["sample"] = full
        results["full_bytes_estimate"] = full_bytes
        log(f"view ~{full_bytes / 2**20:.0f} MiB for {args.keys} keys; memory limit "
            f"{limit / 2**20:.1f} MiB (~{capacity} keys)")
        runs = []
        for name in ["none", *args.disk, *(["full"] if args.full else [])]:
            runs.append(run_config(name, data, spark, pool, args, limit, capacity))
            runs[-1]["loadavg_after"] = __import__("common").loadavg()
        results["runs"] = runs
        results["compare"] = compare(runs)
    finally:
        pool.close()
        results["meta"]["loadavg_at_end"] = __import__("common").loadavg()
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1))
    print(table(results["compare"]))
    log(f"load average at the end {results['meta']['loadavg_at_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
