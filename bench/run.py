#!/usr/bin/env python3
"""partialflow against its alternatives: the whole benchmark in one command.

    python bench/run.py            # the full run (about 30 minutes on 2 busy cores)
    python bench/run.py --quick    # smaller data, shorter runs (about 10 minutes on 2 busy cores)
    python bench/run.py --only reads,memory   # some sections (see --help)
    python bench/run.py --quick --only stream # reads under a stream alone (about 5 minutes)
    python bench/run.py --only hits,subscribe # the hit path and subscriptions (about 10 minutes)

Starts a server in this process on a local Spark session (load comes from separate
worker processes), builds four data sets under a temporary directory and measures every
figure of docs/benchmarks.md, each against a baseline run in the same process on the same data:

- reads: a cold read vs bare PySpark computing the same rows at the same snapshot (a
  per-key aggregate, the visits view, and a 5-table join keyed on one table's column),
  and 64 concurrent cold reads vs one;
- hits: lookups of filled keys (single keys, and lookup_many of 10/100/1000 keys: keys/s,
  p50/p99 per call) vs the no-op Ping RPC carrying as many bytes each way;
- memory: Zipf reads under memory limits of 1/5/20% of the full view vs full
  materialization, vs recomputing on Spark per request, and a restart;
- writes: durable rows/s through the visits view and Nexmark Q4 vs tables no view reads,
  write-to-visible latency at half of peak load, Nexmark Q4 with concurrent readers;
- stream: the visits view and Nexmark Q4 read by key by 4 clients per view while an
  open-loop writer streams 20, 200 and 2000 rows/s (and half of Nexmark's write peak):
  reads/s, read latency, failed reads, write-to-visible;
- subscribe: write-to-subscriber latency at 20, 200 and 2000 rows/s with 32 Subscribe
  streams of 100 keys held (the server's limit at its default --workers), against the
  writes' own acknowledgement;
- peers: the seed views on Pathway (the ``bench`` extra) and on PostgreSQL 15 running the
  view's SQL per read, side by side with partialflow on the same rows (bench/peers.py):
  write rows/s at 1, 100 and 10,000 rows per write, read p50/p99 by key, exactness.

Writes ``results-<date>.json`` (every figure) and PNG plots to ``--out``
(default ``bench/results/``, which git ignores), and prints a goal summary.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

SECTIONS = [
    "reads", "hits", "memory", "restart", "checkpoints", "writes", "nexmark", "stream", "subscribe",
    "peers",
]

FULL = {
    "quick": False,
    "events_keys": 1_000_000, "zipf_s": 0.99,
    "visits": {"products": 20_000, "categories": 1_000, "visits": 1_000_000},
    "nexmark": {"people": 10_000, "auctions": 10_000, "bids": 500_000},
    # the 5-table join's visits: its joins keep full indexes of the joined rows (about
    # 1.2 KB per visit in Python), so it stays smaller than the visits data set
    "joins5_visits": 300_000,
    "hit_seconds": 8.0, "hit_batches": [1, 10, 100, 1000], "hit_concurrency": [[1, 1], [2, 4]],
    "hit_keys": 20_000,
    "miss_trials": 15, "coalesce_trials": 5,
    "fill_batch": 20_000,
    "memory_fractions": [0.01, 0.05, 0.20],
    "zipf_batch": 10, "zipf_procs": 2, "zipf_threads": 16, "zipf_warm": 10.0, "zipf_seconds": 30.0,
    "recompute_seconds": 30.0,
    "restart_cap": 150.0,
    # checkpoints: state sizes (keys of a COUNT/SUM view) for bytes and recovery time;
    # write cost through max_visit, checkpoints every 1 s vs off, alternated per round
    "ckpt_sizes": [20_000, 100_000, 400_000], "ckpt_write_seconds": 15.0, "ckpt_rounds": 3,
    "write_batches": [1, 10, 100, 1000], "write_procs": 2, "write_threads": 2,
    "write_seconds": 6.0, "half_peak_batch": 100, "half_peak_seconds": 20.0,
    # reads under a stream: open-loop writes at each rate (rows/s) in writes of
    # rate / writes_per_s rows, readers_per_view clients per view, every read bounded by
    # stream_deadline seconds; Nexmark also at half of its write peak (the nexmark
    # section's, else measured for stream_peak_seconds)
    "stream_rates": [20, 200, 2000], "stream_seconds": 30.0, "stream_readers": 4,
    "stream_deadline": 30.0, "stream_writes_per_s": 20, "stream_move_fraction": 0.1,
    "stream_peak_seconds": 6.0, "stream_drain_cap": 120.0, "stream_checks_per_view": 2,
    # subscriptions: sub_streams Subscribe streams (the server's limit at its default 64
    # handler threads) of sub_keys keys each, an open-loop writer at each rate
    "sub_rates": [20, 200, 2000], "sub_seconds": 20.0, "sub_streams": 32, "sub_keys": 100,
    # peers (bench/peers.py): rows per write phase (2,000 at most for 1-row writes), reads
    # per view and engine
    "peers": {"rows": 20_000, "products": 1000, "categories": 20,
              "batches": [1, 100, 10_000], "reads": 1000},
}
QUICK = {
    **FULL,
    "quick": True,
    "events_keys": 100_000,
    "visits": {"products": 2_000, "categories": 200, "visits": 100_000},
    "nexmark": {"people": 2_000, "auctions": 2_000, "bids": 50_000},
    "joins5_visits": 100_000,
    "hit_seconds": 1.5, "hit_keys": 5_000,
    "miss_trials": 4, "coalesce_trials": 2,
    "zipf_warm": 2.0, "zipf_seconds": 6.0, "recompute_seconds": 6.0,
    "restart_cap": 30.0,
    "ckpt_sizes": [5_000, 20_000, 50_000], "ckpt_write_seconds": 4.0, "ckpt_rounds": 1,
    "write_batches": [1, 100, 1000], "write_seconds": 2.0, "half_peak_seconds": 5.0,
    "stream_seconds": 8.0, "stream_peak_seconds": 2.0, "stream_drain_cap": 60.0,
    "stream_checks_per_view": 1,
    "sub_seconds": 5.0,
    "peers": {"rows": 5_000, "products": 1000, "categories": 20,
              "batches": [1, 100, 10_000], "reads": 300},
}


def ensure_matplotlib() -> None:
    """Install the ``bench`` extra's matplotlib into this interpreter if it is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        text = (BENCH.parent / "pyproject.toml").read_text()
        m = re.search(r'^bench\s*=\s*\[\s*"([^"]+)"', text, re.M)
        req = m.group(1) if m else "matplotlib"
        print(f"bench: installing {req} (the 'bench' extra) for the plots", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", req])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--quick", action="store_true", help="small data, short runs")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections of {','.join(SECTIONS)}")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="parent of the data directories (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(
            f"unknown section(s) {', '.join(sorted(unknown))}; sections are {', '.join(SECTIONS)}"
        )
    ensure_matplotlib()

    from common import LoadPool, log, machine
    from suite import Suite

    cfg = QUICK if args.quick else FULL
    results = {"meta": machine(), "config": cfg, "sections": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = args.out / f"results-{stamp}{'-quick' if args.quick else ''}.json"
    work = Path(tempfile.mkdtemp(prefix="pf-bench-", dir=args.workdir))
    log(f"load average {results['meta']['loadavg_at_start']}; data under {work}; results {path}")

    from partialflow.server.spark import spark_session

    spark = spark_session()
    pool = LoadPool(6)

    def save() -> None:
        path.write_text(json.dumps(results, indent=1))
        (args.out / "latest.json").write_text(json.dumps(results, indent=1))

    suite = Suite(cfg, work, spark, pool, results, save)
    try:
        for name in SECTIONS:
            if name in only:
                began = time.monotonic()
                getattr(suite, name)()
                log(f"section {name} took {time.monotonic() - began:.0f} s")
                save()
    finally:
        pool.close()
        results["meta"]["loadavg_at_end"] = __import__("common").loadavg()
        save()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    from plots import draw_all

    for p in draw_all(results, args.out):
        log(f"plot {p}")
    print(summary(results))
    log(f"results in {path}")
    return 0


def summary(results: dict) -> str:
    lines = [
        "",
        "goal                                                          measured        met",
    ]
    for sec in results["sections"].values():
        for g in _goals(sec):
            lines.append(f"{g['text'][:60]:<60}  {g.get('value', '')!s:<14}  "
                         f"{'yes' if g['met'] else 'NO'}")
    return "\n".join(lines)


def _goals(obj: object) -> list[dict]:
    found = []
    if isinstance(obj, dict):
        if isinstance(obj.get("goal"), dict) and "met" in obj["goal"]:
            found.append(obj["goal"])
        for k, v in obj.items():
            if k != "goal":
                found.extend(_goals(v))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(_goals(v))
    return found


if __name__ == "__main__":
    sys.exit(main())
