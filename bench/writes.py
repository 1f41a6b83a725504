#!/usr/bin/env python3
"""Write throughput and snapshot-scan latency of a real server (not a test).

Starts ``partialflow serve`` on a temporary data directory and measures, end to end
through the Python client:

- acknowledged durable writes/s and rows/s for 1, 4 and 16 client threads with batches
  of 1 and 1000 rows (each thread its own channel; every write is fsynced before its ack);
- the transport's own limit: no-op ``Ping`` calls/s at the same concurrency;
- a Spark snapshot scan of a 1M-row table: ``query(..., as_of=...)`` latency, full
  aggregate and a key filter.

Usage: ``python bench/writes.py [--seconds 5] [--rows 1000000] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # ServerProcess lives with the test helpers

from helpers import ServerProcess  # noqa: E402

from partialflow.client import Client  # noqa: E402


def run_threads(address: str, threads: int, seconds: float, work) -> tuple[int, int, float]:
    """Run ``work(client, thread_no, seq) -> rows`` in a loop on ``threads`` threads for
    ``seconds``; returns (calls, rows, elapsed)."""
    start = threading.Barrier(threads + 1)
    stop = threading.Event()
    totals = [(0, 0)] * threads

    def loop(n: int) -> None:
        with Client(address, timeout=120) as client:
            client.ping()  # connect before the clock starts
            calls = rows = 0
            start.wait()
            while not stop.is_set():
                rows += work(client, n, calls)
                calls += 1
            totals[n] = (calls, rows)

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - began
    return sum(c for c, _ in totals), sum(r for _, r in totals), elapsed


def writer(table: str, batch: int, base: int):
    def work(client: Client, n: int, seq: int) -> int:
        first = base + (n * 100_000_000) + seq * batch
        rows = [(first + i, f"name{i % 97}", i * 0.5) for i in range(batch)]
        client.insert(table, rows)
        return batch

    return work


def ping(client: Client, n: int, seq: int) -> int:
    client.ping()
    return 0


def bench_writes(address: str, seconds: float) -> list[dict]:
    results = []
    with Client(address) as c:
        c.execute("CREATE TABLE bench_w (id BIGINT, name TEXT, score DOUBLE)")
    base = 0
    for batch in (1, 1000):
        for threads in (1, 4, 16):
            base += 10_000_000_000
            calls, rows, elapsed = run_threads(
                address, threads, seconds, writer("bench_w", batch, base)
            )
            row = {
                "batch": batch,
                "threads": threads,
                "writes_per_s": round(calls / elapsed),
                "rows_per_s": round(rows / elapsed),
                "ms_per_write": round(elapsed * threads / max(calls, 1) * 1000, 2),
            }
            results.append(row)
            print(
                f"batch {batch:>4}  threads {threads:>2}: {row['writes_per_s']:>7} writes/s "
                f"{row['rows_per_s']:>9} rows/s  ({row['ms_per_write']} ms/write/thread)",
                flush=True,
            )
    for threads in (1, 4, 16):
        calls, _, elapsed = run_threads(address, threads, min(seconds, 3.0), ping)
        results.append({"ping_threads": threads, "pings_per_s": round(calls / elapsed)})
        print(f"ping        threads {threads:>2}: {round(calls / elapsed):>7} calls/s", flush=True)
    return results


def bench_scan(address: str, total_rows: int) -> dict:
    with Client(address, timeout=600) as c:
        c.execute("CREATE TABLE bench_scan (id BIGINT, name TEXT, score DOUBLE)")
    began = time.perf_counter()
    batches = total_rows // 1000

    def work(client: Client, n: int, seq: int) -> int:
        b = seq * 4 + n
        if b >= batches:
            return 0
        client.insert(
            "bench_scan", [(b * 1000 + i, f"name{i % 97}", float(i)) for i in range(1000)]
        )
        return 1000

    # Load with 4 threads until every batch is in (each thread takes every 4th batch).
    loaded = [0]
    lock = threading.Lock()

    def load(n: int) -> None:
        with Client(address, timeout=600) as client:
            seq = 0
            while True:
                rows = work(client, n, seq)
                if not rows:
                    return
                with lock:
                    loaded[0] += rows
                seq += 1

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load_s = time.perf_counter() - began
    with Client(address, timeout=600) as c:
        lsn = c.flush()
        timings: dict[str, list[float]] = {"count": [], "key": []}
        for _ in range(5):
            t0 = time.perf_counter()
            got = c.query("SELECT COUNT(*) AS n, SUM(score) AS s FROM bench_scan", as_of=lsn)
            timings["count"].append(time.perf_counter() - t0)
            assert got.rows[0][0] == loaded[0], got.rows
            t0 = time.perf_counter()
            got = c.query("SELECT * FROM bench_scan WHERE id = 123456", as_of=lsn)
            timings["key"].append(time.perf_counter() - t0)
            assert len(got.rows) == (1 if loaded[0] > 123456 else 0)
    result = {
        "rows": loaded[0],
        "load_s": round(load_s, 2),
        "load_rows_per_s": round(loaded[0] / load_s),
        "scan_count_median_s": round(statistics.median(timings["count"]), 3),
        "scan_count_min_s": round(min(timings["count"]), 3),
        "scan_key_median_s": round(statistics.median(timings["key"]), 3),
        "scan_key_min_s": round(min(timings["key"]), 3),
    }
    print(
        f"1M-row table: loaded {loaded[0]} rows in {result['load_s']} s "
        f"({result['load_rows_per_s']} rows/s, 4 threads); as_of scan COUNT/SUM median "
        f"{result['scan_count_median_s']} s, key filter median {result['scan_key_median_s']} s",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per write configuration")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the scanned table")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--skip-scan", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="partialflow-bench-") as tmp:
        server = ServerProcess(Path(tmp) / "data").start()
        try:
            print(f"server {server.address}, data in {tmp}", flush=True)
            results = {"writes": bench_writes(server.address, args.seconds)}
            if not args.skip_scan:
                results["scan"] = bench_scan(server.address, args.rows)
        finally:
            server.stop()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
