"""Replication lag of ``serve --follow``: pgbench's TPC-B-like workload on a real PostgreSQL
15 at fixed rates while views over its accounts, branches and history tables are read by
key here. Prints figures and ratios; not a test.

    .venv/bin/python bench/follow_lag.py [--scale 1] [--rates 25,50,100,200,400,600,800]
                                         [--seconds 15]

The server applies several upstream commits at once (PARTIALFLOW_FOLLOW_IN_FLIGHT, default
16, in its environment); PARTIALFLOW_FOLLOW_IN_FLIGHT=1 applies them one at a time, the
baseline to run beside it.

Per upstream rate (pgbench -R, 2 clients): lag p50/p99 (a sampler takes the upstream WAL
insert position every 100 ms and times until a lookup with that min_upstream_lsn
answers: read-your-writes as an application sees it), upstream transactions and rows
applied per second here against what pgbench committed (the baseline, side by side), and
key reads of the views during the run (latency, and afterwards every view checked against
PostgreSQL's own answer). The highest rate kept up with is the last one whose applied rate
is within 10 % of pgbench's and whose lag p99 stays under 5 s; the script then runs half
of it again and prints its lag p99 (the goal: under 1 s).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import quantiles
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "pg")]

DB = "bench_follow"
VIEWS = {
    "fb_account": "SELECT aid, bid, abalance FROM pgbench_accounts WHERE aid = ?",
    "fb_branch": "SELECT bid, bbalance FROM pgbench_branches WHERE bid = ?",
    "fb_history": ("SELECT aid, COUNT(*) AS n, SUM(delta) AS total FROM pgbench_history "
                   "WHERE aid = ? GROUP BY aid"),
}
ORACLE = {
    "fb_account": "SELECT aid, bid, abalance FROM pgbench_accounts WHERE aid = %s",
    "fb_branch": "SELECT bid, bbalance FROM pgbench_branches WHERE bid = %s",
    "fb_history": ("SELECT aid, count(*), sum(delta) FROM pgbench_history WHERE aid = %s "
                   "GROUP BY aid"),
}


def pct(xs: list[float], q: int) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return quantiles(xs, n=100, method="inclusive")[q - 1]


def run_rate(up: Any, client: Any, rate: int, seconds: int, scale: int) -> dict[str, float]:
    import psycopg

    stop = threading.Event()
    lags: list[float] = []
    reads: list[float] = []
    errors: list[str] = []

    def sampler() -> None:
        with psycopg.connect(up.dsn(DB), autocommit=True) as con:
            while not stop.is_set():
                t0 = time.monotonic()
                at = str(con.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
                try:
                    client.lookup("fb_branch", (1,), min_upstream_lsn=at)
                    lags.append(time.monotonic() - t0)
                except Exception as err:  # noqa: BLE001 - counted and shown
                    errors.append(str(err))
                time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))

    def reader() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            aid = rng.randint(1, 100_000 * scale)
            t0 = time.monotonic()
            client.lookup("fb_account", (aid,))
            client.lookup("fb_history", (aid,))
            reads.append((time.monotonic() - t0) / 2)

    before = client.stats()["follow"]
    threads = [threading.Thread(target=sampler), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    out = subprocess.run(
        ["pgbench", "-h", up.host, "-p", str(up.port), "-U", "postgres", "-n", "-c", "2",
         "-j", "1", "-R", str(rate), "-T", str(seconds), DB],
        capture_output=True, text=True, check=True).stdout
    # Let the backlog drain before stopping the sampler (its last lags count).
    with psycopg.connect(up.dsn(DB), autocommit=True) as con:
        at = str(con.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
    client.lookup("fb_branch", (1,), min_upstream_lsn=at)
    elapsed = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join()
    after = client.stats()["follow"]
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    committed = int(m.group(1)) if m else 0
    applied = after["transactions_applied"] - before["transactions_applied"]
    rows = after["rows_applied"] - before["rows_applied"]
    return {
        "rate": rate, "pgbench_tps": committed / seconds, "applied_tps": applied / elapsed,
        "rows_per_s": rows / elapsed, "lag_p50_s": pct(lags, 50), "lag_p99_s": pct(lags, 99),
        "lag_max_s": max(lags, default=float("nan")), "read_p50_ms": pct(reads, 50) * 1e3,
        "read_p99_ms": pct(reads, 99) * 1e3, "samples": len(lags), "errors": len(errors),
        "drain_s": elapsed - seconds,
    }


def check_exact(up: Any, client: Any, scale: int) -> int:
    """Every view against PostgreSQL's answer, at the upstream's current commit."""
    import psycopg

    rng = random.Random(2)
    checked = 0
    with psycopg.connect(up.dsn(DB), autocommit=True) as con:
        at = str(con.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
        keys = {"fb_account": [rng.randint(1, 100_000 * scale) for _ in range(200)],
                "fb_branch": list(range(1, scale + 1)),
                "fb_history": [rng.randint(1, 100_000 * scale) for _ in range(200)]}
        for view, ks in keys.items():
            for k in ks:
                got = sorted(client.lookup(view, (k,), min_upstream_lsn=at).rows)
                want = sorted(tuple(r) for r in con.execute(ORACLE[view], (k,)).fetchall())
                assert got == want, (view, k, got, want)
                checked += 1
    return checked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--rates", default="25,50,100,200,400,600,800")
    ap.add_argument("--seconds", type=int, default=15)
    a = ap.parse_args()

    import psycopg
    import upstream
    from helpers import ServerProcess

    from partialflow.client import Client

    up = upstream.upstream()
    up.database(DB, [])
    subprocess.run(["pgbench", "-h", up.host, "-p", str(up.port), "-U", "postgres", "-i",
                    "-q", "-s", str(a.scale), DB], capture_output=True, check=True)
    with psycopg.connect(up.dsn(DB), autocommit=True) as con:
        # pgbench_history has no key: followed under REPLICA IDENTITY FULL (it only grows).
        con.execute("ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
    work = Path(tempfile.mkdtemp(prefix="pf-bench-follow-"))
    t0 = time.monotonic()
    srv = ServerProcess(work / "pf", args=("--follow", up.url(DB))).start()
    results = []
    try:
        with Client(srv.address, timeout=600) as c:
            while c.stats()["follow"]["state"] != "streaming":
                time.sleep(0.2)
            print(f"copied {100_000 * a.scale} accounts and streaming in "
                  f"{time.monotonic() - t0:.1f}s", flush=True)
            for name, sql in VIEWS.items():
                c.execute(f"CREATE VIEW {name} AS {sql}")
            head = (f"{'rate':>5} {'pgbench tps':>11} {'applied tps':>11} {'ratio':>6} "
                    f"{'rows/s':>8} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} "
                    f"{'read p50':>9} {'read p99':>9}")
            print(head, flush=True)
            kept = 0
            for rate in [int(r) for r in a.rates.split(",")]:
                r = run_rate(up, c, rate, a.seconds, a.scale)
                results.append(r)
                ratio = r["applied_tps"] / max(r["pgbench_tps"], 1e-9)
                print(f"{rate:>5} {r['pgbench_tps']:>11.1f} {r['applied_tps']:>11.1f} "
                      f"{ratio:>6.2f} {r['rows_per_s']:>8.0f} {r['lag_p50_s']:>7.3f}s "
                      f"{r['lag_p99_s']:>7.3f}s {r['lag_max_s']:>7.3f}s "
                      f"{r['read_p50_ms']:>7.2f}ms {r['read_p99_ms']:>7.2f}ms", flush=True)
                if ratio < 0.9 or r["lag_p99_s"] > 5:
                    break
                kept = rate
            if kept:
                half = max(1, kept // 2)
                r = run_rate(up, c, half, a.seconds, a.scale)
                print(f"highest rate kept up with: {kept} tps; at half of it ({half} tps): lag "
                      f"p50 {r['lag_p50_s']:.3f}s p99 {r['lag_p99_s']:.3f}s "
                      f"(goal p99 < 1 s)", flush=True)
            else:
                print("no rate kept up with", flush=True)
            print(f"reads checked against PostgreSQL: {check_exact(up, c, a.scale)} keys "
                  "equal", flush=True)
    finally:
        srv.terminate()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=REPO).stdout.strip()
    print(f"in flight: {os.environ.get('PARTIALFLOW_FOLLOW_IN_FLIGHT') or 'default (16)'}; "
          f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {rev}, "
          f"{platform.machine()} {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
