"""Regression benchmark for a write stall (a benchmark, not a test).

Big writes through the visits view once stalled: at 1000 rows per write and 4 writers the
published run acknowledged 952 rows/s, and about half of the writes waited ~8 s. This runs
that workload and its baseline side by side on one in-process server and one data set:
durable writes of the same generated rows into ``visit`` (read by the ``max_visit`` view,
every category filled) and into ``visit_plain`` (read by no view), and prints, per batch
size, acknowledged and applied rows/s, write latency (p50/p99/max), how many writes took
longer than ``--stall`` seconds, and the view/plain ratio.

    python bench/write_stall.py [--batches 1,10,100,1000] [--seconds 6] [--visits 200000]

Figures only: nothing here asserts a time. A stall shows as a p99/max of seconds and a
non-zero "stalled" count; the ratio compares applied rows/s through the view with
acknowledged rows/s into the plain table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets as ds
from common import InProcServer, LoadPool, build_data, drive, ratio


def build(d: Path, spark: object, products: int, categories: int, visits: int) -> None:
    build_data(d, spark, ds.VISITS_TABLES, ds.VISITS_VIEWS,
               lambda st: ds.load_visits(st, products, categories, visits))


def measure(srv: InProcServer, pool: LoadPool, *, batch: int, suffix: str, gen: dict,
            procs: int, threads: int, seconds: float, stall: float, seed: int) -> dict:
    op = {"kind": "write", "batch": batch, "suffix": suffix, **gen}
    r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds, seed=seed)
    assert srv.engine is not None
    srv.wait_applied(srv.engine.storage.last_lsn)
    applied = r["items"] / max(1e-9, time.time() - r["started_at"])
    cdf = r["cdf_ms"]  # 101 quantiles + p99.9, ms
    slow = sum(1 for q in cdf[:101] if q > stall * 1000) / 100 * r["calls"] if cdf else 0
    return {"acked": r["items_per_s"], "applied": applied, "writes": r["calls"],
            "lat": r["latency_ms"], "stalled": round(slow), "errors": r["errors"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--batches", default="1,10,100,1000",
                    help="rows per write, in the order run (default 1,10,100,1000, as the suite)")
    ap.add_argument("--seconds", type=float, default=6.0, help="per measurement (default 6)")
    ap.add_argument("--products", type=int, default=20_000)
    ap.add_argument("--categories", type=int, default=1_000)
    ap.add_argument("--visits", type=int, default=200_000, help="preloaded visits")
    ap.add_argument("--stall", type=float, default=1.0,
                    help="a write slower than this many seconds counts as stalled (default 1)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="per load process")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b.strip()]

    from partialflow.server.spark import spark_session

    spark = spark_session()
    pool = LoadPool(args.procs)
    work = Path(tempfile.mkdtemp(prefix="pf-stall-")) / "data"
    try:
        build(work, spark, args.products, args.categories, args.visits)
        gen = {"gen": "visits", "products": args.products, "categories": args.categories}
        cats = [f"c{i}" for i in range(args.categories)]
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{args.visits} visits, {args.procs * args.threads} writers, {args.seconds} s each")
        print(f"{'batch':>6} {'table':<6} {'acked rows/s':>13} {'applied rows/s':>15} "
              f"{'writes':>7} {'p50 ms':>8} {'p99 ms':>9} {'max ms':>9} {'stalled':>8}  ratio")
        with InProcServer(work, spark) as srv:
            with srv.client(timeout=600) as c:
                c.lookup_many("max_visit", cats)  # every key filled: every delta does work
            for batch in batches:
                res = {}
                for side, suffix in (("view", ""), ("plain", "_plain")):
                    res[side] = measure(srv, pool, batch=batch, suffix=suffix, gen=gen,
                                        procs=args.procs, threads=args.threads,
                                        seconds=args.seconds, stall=args.stall,
                                        seed=batch * 10 + len(suffix))
                rat = ratio(res["view"]["applied"], res["plain"]["acked"])
                for side in ("view", "plain"):
                    m = res[side]
                    lat = m["lat"]
                    print(f"{batch:>6} {side:<6} {m['acked']:>13,.0f} {m['applied']:>15,.0f} "
                          f"{m['writes']:>7} {lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>9.1f} "
                          f"{lat.get('max', 0):>9.1f} {m['stalled']:>8}"
                          + (f"  x{rat}" if side == "view" else "")
                          + (f"  ({m['errors']} errors)" if m["errors"] else ""), flush=True)
        print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
