"""What the free-space check costs a write (storage/space.py: one statvfs per write).

Runs the storage write path in-process (no Spark) with the check as shipped and with it
stubbed out (free space taken as unlimited, no statvfs), in alternating rounds so machine
load hits both alike, and prints writes/s, CPU per write and the ratio on/off.

    .venv/bin/python bench/disk_check.py [--seconds 2] [--rounds 3] [--threads 1,16]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
from pathlib import Path

from threaded import run_threads

from partialflow.server.storage import Column, Storage, TableSchema

SCHEMA = TableSchema("events", (Column("id", "BIGINT"), Column("user", "TEXT")))


def run(base: Path, threads: int, seconds: float, check: bool) -> tuple[float, float]:
    """(writes/s, CPU microseconds per write) of 1-row writes from ``threads`` threads."""
    d = base / f"w-{threads}-{int(check)}"
    st = Storage(d, spark=None, max_segments=1_000_000)  # type: ignore[arg-type]
    st.open()
    st.create_table(SCHEMA)
    if not check:
        assert st.disk is not None
        st.disk.free_bytes = lambda: 1 << 60  # type: ignore[method-assign]
    stop = threading.Event()
    counts = [0] * threads

    def worker(t: int) -> None:
        k = 0
        while not stop.is_set():
            st.write("events", [((t << 40) + k, "u")])
            counts[t] += 1
            k += 1

    elapsed, cpu = run_threads(worker, threads, seconds, stop)
    st.close()
    shutil.rmtree(d, ignore_errors=True)
    writes = sum(counts)
    return writes / elapsed, cpu / max(writes, 1) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--dir", default=None, help="where the data directories go")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="pf-disk-check-"))
    for threads in (int(t) for t in args.threads.split(",")):
        got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.rounds):
            for check in (True, False):
                got[check].append(run(base, threads, args.seconds, check))
        on = statistics.median(w for w, _ in got[True])
        off = statistics.median(w for w, _ in got[False])
        cpu_on = statistics.median(c for _, c in got[True])
        cpu_off = statistics.median(c for _, c in got[False])
        print(f"{threads:>2} threads, 1-row writes: check on {on:8.0f} writes/s "
              f"({cpu_on:5.0f} us CPU/write), off {off:8.0f} writes/s ({cpu_off:5.0f} us); "
              f"on/off {on / off:.2f}x")


if __name__ == "__main__":
    main()
