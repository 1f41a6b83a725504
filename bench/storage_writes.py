"""Benchmark of the storage layer, in-process through the Storage API.

Prints acknowledged (durable: fsynced WAL, delivered to subscribers) writes/s and rows/s for
1, 4 and 16 concurrent writer threads with batches of 1 and 1000 rows, then the latency of a
Spark snapshot scan of a 1M-row table (full count, and a key-filtered scan).

    .venv/bin/python bench/storage_writes.py [--seconds 3] [--scan-rows 1000000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from threaded import run_threads

from partialflow.server.storage import Column, Storage, TableSchema

SCHEMA = TableSchema(
    "events",
    (
        Column("id", "BIGINT"),
        Column("user", "TEXT"),
        Column("amount", "DOUBLE"),
        Column("ok", "BOOLEAN"),
    ),
)
PK_SCHEMA = TableSchema(
    "keyed",
    (
        Column("id", "BIGINT", True),
        Column("user", "TEXT"),
        Column("amount", "DOUBLE"),
        Column("ok", "BOOLEAN"),
    ),
)


def make_rows(start: int, n: int, rng: random.Random) -> list[tuple]:
    return [
        (start + i, f"user{rng.randrange(100_000)}", rng.random() * 100, i % 2 == 0)
        for i in range(n)
    ]


def run_writes(base: Path, threads: int, batch: int, seconds: float, pk: bool) -> dict:
    d = base / f"w-{threads}-{batch}-{int(pk)}"
    # Writes never touch Spark; no compaction during the write benchmark.
    st = Storage(d, spark=None, max_segments=1_000_000)  # type: ignore[arg-type]
    st.open()
    schema = PK_SCHEMA if pk else SCHEMA
    st.create_table(schema)
    delivered = [0]
    st.subscribe(lambda rec: delivered.__setitem__(0, delivered[0] + 1))  # a fast subscriber
    stop = threading.Event()
    counts = [0] * threads
    fsyncs0 = st.stats()["fsyncs"]

    def worker(t: int) -> None:
        rng = random.Random(t)
        next_id = t << 40  # disjoint keys per thread
        batches = [make_rows(next_id + k * batch, batch, rng) for k in range(64)]
        k = 0
        while not stop.is_set():
            rows = batches[k % 64] if not pk else make_rows(next_id + k * batch, batch, rng)
            st.write(schema.name, rows)
            counts[t] += 1
            k += 1

    elapsed, cpu = run_threads(worker, threads, seconds, stop)
    stats = st.stats()
    st.close()
    shutil.rmtree(d, ignore_errors=True)
    writes = sum(counts)
    return {
        "threads": threads,
        "batch": batch,
        "pk": pk,
        "writes/s": writes / elapsed,
        "rows/s": writes * batch / elapsed,
        "writes/fsync": writes / max(stats["fsyncs"] - fsyncs0, 1),
        "delivered": delivered[0] == writes,
        "cpu_us_per_row": cpu / max(writes * batch, 1) * 1e6,
    }


def run_scan(base: Path, nrows: int, repeats: int) -> None:
    from partialflow.server.spark import spark_session  # only the scan part needs Spark

    spark = spark_session()
    d = base / "scan"
    st = Storage(d, spark, flush_rows=200_000, max_segments=1_000)
    st.open()
    st.create_table(SCHEMA)
    rng = random.Random(7)
    t0 = time.perf_counter()
    for start in range(0, nrows, 1000):
        st.write("events", make_rows(start, min(1000, nrows - start), rng))
    st.flush()
    print(
        f"\nloaded {nrows} rows in {time.perf_counter() - t0:.1f}s; segments: "
        f"{st.stats()['segments']}"
    )

    def timed(label: str, fn) -> None:
        fn()  # warm-up (JIT, file listing caches)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t)
        print(f"{label:<58} median {statistics.median(times) * 1000:7.0f} ms  "
              f"(min {min(times) * 1000:.0f}, result {result})")

    def count_all() -> int:
        with st.snapshot() as s:
            return s.table_df("events").count()

    def by_key() -> int:
        keys = [rng.randrange(nrows) for _ in range(3)]
        with st.snapshot() as s:
            return len(s.table_df("events", {"id": keys}).collect())

    def by_user() -> int:
        with st.snapshot() as s:
            return len(s.table_df("events", {"user": ["user42"]}).collect())

    timed("full count (append-only, no consolidation)", count_all)
    timed("key-filtered scan, 3 ids (pushdown)", by_key)
    timed("key-filtered scan, one user (~10 rows)", by_user)
    # A delete forces the consolidating read path (group by all columns).
    with st.snapshot() as s:
        victim = tuple(s.table_df("events", {"id": [5]}).collect()[0])
    st.write("events", [(nrows + 1, "x", 1.0, True)] * 100, deletes=[victim])
    timed("full count with deletes + 100-row memtable (consolidating)", count_all)
    timed("key-filtered scan with deletes + memtable (consolidating)", by_key)
    t = time.perf_counter()
    figures = st.compact("events")
    print(
        f"compaction of {nrows} rows: {time.perf_counter() - t:.1f}s {figures['tables']['events']}"
    )
    timed("full count after compaction", count_all)
    st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--scan-rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="data directory parent (default: a temp dir)")
    ap.add_argument("--no-scan", action="store_true")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="pf-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, data under {base}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'threads':>7} {'batch':>6} {'pk':>3} {'writes/s':>10} {'rows/s':>10} "
        f"{'writes/fsync':>12}"
        f" {'CPU us/row':>10}"
    )
    try:
        for pk in (False, True):
            for batch in (1, 1000):
                for threads in (1, 4, 16):
                    r = run_writes(base, threads, batch, args.seconds, pk)
                    print(
                        f"{threads:>7} {batch:>6} {'y' if pk else 'n':>3} {r['writes/s']:>10.0f} "
                        f"{r['rows/s']:>10.0f} {r['writes/fsync']:>12.1f} "
                        f"{r['cpu_us_per_row']:>10.1f}"
                        + ("" if r["delivered"] else "  SUBSCRIBER MISMATCH"),
                        flush=True,
                    )
        if not args.no_scan:
            run_scan(base, args.scan_rows, args.repeats)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
