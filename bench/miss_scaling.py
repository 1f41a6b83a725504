"""Miss cost against table size, unclustered and clustered (issue 16 part 4). Not run in CI.

Builds a table ``events(k BIGINT, v BIGINT, pad TEXT)`` of ``--rows`` rows with keys in
random order (bulk-loaded from Parquet files written here, ``--file-rows`` rows each),
flushes and compacts it before any view exists (so the merged segment is unsorted), then
creates a keyed view and reads ``--misses`` keys never read before: every read is a miss
answered by an upquery. Then it compacts again: the view now keys on ``k``, so compaction
sorts the segment by ``k`` (row groups of ``--row-group-rows``), and it reads as many new
keys. For each layout it prints p50/p99 miss latency and the per-miss footprint that
stats() reports (row groups and compressed bytes its key filter cannot skip, estimated
from the Parquet footers; not Spark's input metrics).

    .venv/bin/python bench/miss_scaling.py --rows 1000000
    .venv/bin/python bench/miss_scaling.py --rows 10000000   # 50000000: long, on a quiet box

The reads run on one quiet server (no write stream, no background flushes or compactions
while measuring) with a warm OS page cache: "cold" means the key is not in the view's
state, not that the disk is cold.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import InProcServer, loadavg, log, pct

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = ? GROUP BY k"


def write_files(root: Path, rows: int, keys: int, file_rows: int, seed: int) -> list[Path]:
    """Parquet files of random (k, v, pad) rows, keys uniform in [0, keys)."""
    rng = np.random.default_rng(seed)
    files = []
    for i, start in enumerate(range(0, rows, file_rows)):
        n = min(file_rows, rows - start)
        k = rng.integers(0, keys, n, dtype=np.int64)
        v = rng.integers(0, 1000, n, dtype=np.int64)
        pad = pa.array(np.char.add("p", (k % 97).astype(str)))
        path = root / f"events-{i:04d}.parquet"
        pq.write_table(pa.table({"k": k, "v": v, "pad": pad}), path)
        files.append(path)
    return files


def misses(c: Any, keys: list[int]) -> tuple[list[float], list[dict]]:
    """Latency of each read (each a miss) and the footprint stats() reports for it."""
    lat, scans = [], []
    for k in keys:
        t0 = time.perf_counter()
        c.lookup("ev", k)
        lat.append(time.perf_counter() - t0)
        scans.append(dict(c.stats()["upquery_scan"]["last"]))
    return lat, scans


def summary(rows: int, layout: str, lat: list[float], scans: list[dict]) -> dict:
    p = pct(lat)
    mean = lambda k: sum(s[k] for s in scans) / len(scans)  # noqa: E731
    return {
        "rows": rows, "layout": layout, "p50_ms": p["p50"], "p99_ms": p["p99"],
        "rg_scanned": round(mean("row_groups_scanned"), 1),
        "rg_total": round(mean("row_groups_total"), 1),
        "mb_scanned": round(mean("bytes_scanned") / 1e6, 2),
        "mb_total": round(mean("bytes_total") / 1e6, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=0, help="distinct keys (default rows/100)")
    ap.add_argument("--misses", type=int, default=40, help="misses per layout")
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--row-group-rows", type=int, default=0, help="default: storage's")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default="", help="working directory (default: a temporary one)")
    args = ap.parse_args()
    keys = args.keys or max(1, args.rows // 100)

    from partialflow.server.spark import spark_session

    spark = spark_session(args.master)
    root = Path(args.dir or tempfile.mkdtemp(prefix="pf-miss-scaling-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"writing {args.rows} rows ({keys} keys) under {root}")
    files = write_files(root, args.rows, keys, args.file_rows, seed=1)
    out = []
    with InProcServer(root / "data", spark) as srv:
        if args.row_group_rows:
            assert srv.engine is not None
            srv.engine.storage.row_group_rows = args.row_group_rows
        with srv.client(timeout=3600) as c:
            c.execute("CREATE TABLE events (k BIGINT, v BIGINT, pad TEXT)")
            t0 = time.monotonic()
            for f in files:
                c.load("events", str(f))
            c.flush()
            c.compact("events")  # no view yet: one unsorted segment
            log(f"loaded and compacted in {time.monotonic() - t0:.1f} s")
            c.execute(f"CREATE VIEW ev AS {VIEW}")
            c.lookup("ev", -1)  # the first Spark job of the view pays JVM warm-up
            wanted = random.Random(2).sample(range(keys), min(keys, 2 * args.misses))
            lat, scans = misses(c, wanted[: args.misses])
            out.append(summary(args.rows, "unclustered", lat, scans))
            t0 = time.monotonic()
            c.compact("events")  # the view keys on k: sorted by k now
            log(f"clustered compaction in {time.monotonic() - t0:.1f} s; clustering "
                f"{c.stats()['storage'].get('clustering')}")
            lat, scans = misses(c, wanted[args.misses:])
            out.append(summary(args.rows, "clustered by k", lat, scans))
    cols = list(out[0])
    print(" | ".join(cols))
    for row in out:
        print(" | ".join(str(row[k]) for k in cols))
    print(f"(load average {loadavg()}; footprint = footer estimate per miss)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
