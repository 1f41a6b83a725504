"""Benchmark: transactions over several tables against the same rows as single-table writes.

In-process through the Storage API (durable: fsynced log, delivered to a subscriber), with
``--threads`` concurrent writers (default 4). For transactions of 2, 10 and 100 rows spread
over 2 and 4 keyed tables it runs, side by side:

- ``tx``: each unit is one ``write_many`` (one LSN, one log group);
- ``single``: the same rows as one ``write`` per table, one after the other.

and prints rows/s and the commit latency of a unit (all its rows durable) at p50 and p99,
with the ratio tx/single.

    .venv/bin/python bench/transactions.py [--seconds 2] [--threads 4] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from threaded import run_threads

from partialflow.server.storage import Column, Storage, TableChange, TableSchema


def schema(i: int) -> TableSchema:
    return TableSchema(f"t{i}", (Column("id", "BIGINT", True), Column("who", "TEXT"),
                                 Column("amount", "BIGINT")))


def run(base: Path, mode: str, rows: int, tables: int, threads: int, seconds: float) -> dict:
    d = base / f"{mode}-{rows}-{tables}"
    st = Storage(d, spark=None, max_segments=1_000_000)  # type: ignore[arg-type]
    st.open()
    for i in range(tables):
        st.create_table(schema(i))
    st.subscribe(lambda rec: None)
    ids = itertools.count()
    lock = threading.Lock()
    lat: list[float] = []
    done = [0]
    stop = threading.Event()

    def unit() -> list[TableChange]:
        with lock:
            first = next(ids) * rows
        per: dict[int, list[tuple]] = {}
        for j in range(rows):
            per.setdefault(j % tables, []).append((first + j, f"w{j}", j))
        return [TableChange(f"t{i}", inserts=r) for i, r in per.items()]

    def writer(_: int) -> None:
        while not stop.is_set():
            changes = unit()
            t0 = time.perf_counter()
            if mode == "tx":
                st.write_many(changes)
            else:
                for c in changes:
                    st.write(c.table, c.inserts)
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                lat.append(ms)
                done[0] += rows

    elapsed, _ = run_threads(writer, threads, seconds, stop)
    st.close()
    shutil.rmtree(d, ignore_errors=True)
    lat.sort()
    return {
        "rows_s": done[0] / elapsed,
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "units": len(lat),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="pf-bench-tx-"))
    print(f"# {args.threads} writer threads, {args.seconds:g} s per run, load "
          f"{os.getloadavg()[0]:.1f}, {base}")
    run(base, "tx", 2, 2, 1, 0.5)  # warm-up (first imports and files), not reported
    print(f"{'rows':>5} {'tables':>6} | {'tx rows/s':>10} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'single rows/s':>13} {'p50 ms':>7} {'p99 ms':>7} | {'rows/s x':>8} {'p50 x':>6}")
    for rows in (2, 10, 100):
        for tables in (2, 4):
            if tables > rows:
                continue
            tx = run(base, "tx", rows, tables, args.threads, args.seconds)
            one = run(base, "single", rows, tables, args.threads, args.seconds)
            print(f"{rows:>5} {tables:>6} | {tx['rows_s']:>10.0f} {tx['p50']:>7.2f} "
                  f"{tx['p99']:>7.2f} | {one['rows_s']:>13.0f} {one['p50']:>7.2f} "
                  f"{one['p99']:>7.2f} | {tx['rows_s'] / one['rows_s']:>8.2f} "
                  f"{tx['p50'] / one['p50']:>6.2f}", flush=True)
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
