"""PostgreSQL protocol point lookups: partialflow's view over the wire, against ``SELECT 1`` on
the same wire, against gRPC lookups of the same keys, and against a real PostgreSQL 15 on
this machine running the view's SQL per request with an index on the key (what a user would
pick instead). Prints figures and ratios; not a test.

    .venv/bin/python bench/pgwire.py [--rows 1000000] [--users 100000] [--hot 2000]
                                     [--seconds 10] [--clients 1,8]

The table is ``visit(id BIGINT PRIMARY KEY, user_id BIGINT, dur DOUBLE)`` with ``rows`` rows
over ``users`` users; the view is the per-user count and total, keyed by user. Lookups go to
``hot`` users warmed first, so partialflow's figures are hits (a miss is a Spark upquery:
bench/reads.py measures those). pgbench (``-M prepared``, ``-l`` per-transaction log) gives
p50/p99 over the protocol; gRPC lookups run in one process per client.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "pg")]

VIEW_SQL = ("SELECT user_id, COUNT(*) AS n, SUM(dur) AS total FROM visit WHERE user_id = ? "
            "GROUP BY user_id")
PG_LOOKUP = ("SELECT user_id, count(*) AS n, sum(dur) AS total FROM visit WHERE user_id = :k "
             "GROUP BY user_id;")


def make_data(path: Path, rows: int, users: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    table = pa.table({"id": np.arange(rows, dtype=np.int64),
                      "user_id": rng.integers(1, users + 1, rows, dtype=np.int64),
                      "dur": rng.random(rows) * 100})
    pq.write_table(table, path)


def pgbench(host: str, port: int, db: str, script: str, clients: int, seconds: int,
            workdir: Path) -> dict[str, float]:
    """tps and latency percentiles (ms) of one pgbench run, from its per-transaction log."""
    f = workdir / "script.sql"
    f.write_text(script)
    prefix = workdir / f"log{time.monotonic_ns()}"
    cmd = ["pgbench", "-n", "-h", host, "-p", str(port), "-U", "postgres", "-M", "prepared",
           "-f", str(f), "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds),
           "-l", f"--log-prefix={prefix}", db]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120,
                       cwd=workdir)
    if r.returncode != 0:
        raise RuntimeError(f"pgbench failed: {r.stderr[-2000:]}")
    lat: list[float] = []
    for log in workdir.glob(prefix.name + "*"):
        for line in log.read_text().splitlines():
            lat.append(int(line.split()[2]) / 1000.0)  # µs -> ms
        log.unlink()
    tps = next(float(x.split("=")[1].split()[0]) for x in r.stdout.splitlines()
               if x.startswith("tps ="))
    return summary(lat, tps)


def summary(lat_ms: list[float], tps: float) -> dict[str, float]:
    xs = sorted(lat_ms)
    return {"tps": tps, "p50": xs[len(xs) // 2], "p99": xs[min(len(xs) - 1, int(len(xs) * .99))],
            "n": len(xs)}


def _grpc_worker(args: tuple[str, int, int, float]) -> list[float]:
    from partialflow.client import Client

    address, hot, seed, seconds = args
    import random

    rnd = random.Random(seed)
    out = []
    with Client(address) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            k = rnd.randint(1, hot)
            t0 = time.perf_counter()
            c.lookup("per_user", k)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def grpc_lookups(address: str, hot: int, clients: int, seconds: int) -> dict[str, float]:
    with ProcessPoolExecutor(clients, mp_context=get_context("spawn")) as pool:
        parts = list(pool.map(_grpc_worker, [(address, hot, i, seconds) for i in range(clients)]))
    lat = [x for p in parts for x in p]
    return summary(lat, len(lat) / seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--hot", type=int, default=2_000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--clients", default="1,8")
    a = ap.parse_args()
    clients = [int(c) for c in a.clients.split(",")]

    import psycopg
    import upstream
    from helpers import ServerProcess

    from partialflow.client import Client

    work = Path(tempfile.mkdtemp(prefix="pf-bench-pgwire-"))
    os.chmod(work, 0o755)
    data = work / "visit.parquet"
    t0 = time.monotonic()
    make_data(data, a.rows, a.users)
    print(f"data: {a.rows} rows, {a.users} users ({time.monotonic() - t0:.1f}s)", flush=True)

    srv = ServerProcess(work / "pf", args=("--pg-port", "0")).start()
    pg_line = next(x for x in srv._stdout if x.startswith("postgres listening on "))
    pg_host, pg_port = pg_line.split()[-1].rsplit(":", 1)
    results: dict[str, dict[str, float]] = {}
    try:
        with Client(srv.address, timeout=600) as c:
            c.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, user_id BIGINT, dur DOUBLE)")
            c.load("visit", str(data))
            c.execute(f"CREATE VIEW per_user AS {VIEW_SQL}")
            t0 = time.monotonic()
            c.lookup_many("per_user", list(range(1, a.hot + 1)))  # warm: every lookup a hit
            print(f"partialflow: loaded, {a.hot} keys warmed ({time.monotonic() - t0:.1f}s)",
                  flush=True)
        view = (f"\\set k random(1, {a.hot})\n"
                "SELECT user_id, n, total FROM per_user WHERE user_id = :k;\n")
        for n in clients:
            results[f"pg-wire view hit, {n}c"] = pgbench(pg_host, int(pg_port), "partialflow",
                                                         view, n, a.seconds, work)
            results[f"pg-wire SELECT 1, {n}c"] = pgbench(pg_host, int(pg_port), "partialflow",
                                                         "SELECT 1;\n", n, a.seconds, work)
            results[f"gRPC lookup hit, {n}c"] = grpc_lookups(srv.address, a.hot, n, a.seconds)
    finally:
        srv.terminate()

    # The same data in a real PostgreSQL 15, an index on the key, the view's SQL per request.
    up = upstream.upstream()
    up.database("bench_pgwire", [
        "CREATE TABLE visit (id bigint PRIMARY KEY, user_id bigint, dur double precision)"])
    t0 = time.monotonic()
    import pyarrow.parquet as pq

    tbl = pq.read_table(data)
    with psycopg.connect(up.dsn("bench_pgwire"), autocommit=True) as con:
        with con.cursor().copy("COPY visit (id, user_id, dur) FROM STDIN") as cp:
            for row in zip(*(tbl.column(i).to_pylist() for i in range(3)), strict=True):
                cp.write_row(row)
        con.execute("CREATE INDEX ON visit (user_id)")
        con.execute("VACUUM ANALYZE visit")
    print(f"postgres: loaded and indexed ({time.monotonic() - t0:.1f}s)", flush=True)
    script = f"\\set k random(1, {a.hot})\n{PG_LOOKUP}\n"
    for n in clients:
        results[f"postgres indexed view SQL, {n}c"] = pgbench(up.host, up.port, "bench_pgwire",
                                                              script, n, a.seconds, work)
        results[f"postgres SELECT 1, {n}c"] = pgbench(up.host, up.port, "bench_pgwire",
                                                      "SELECT 1;\n", n, a.seconds, work)

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"{platform.node()} ({os.cpu_count()} cores), load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'run':38} {'tps':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in results.items():
        print(f"{name:38} {r['tps']:9.0f} {r['p50']:8.3f} {r['p99']:8.3f}")
    print("\nratios (p50 latency; < 1 is faster than the baseline)")
    for n in clients:
        hit = results[f"pg-wire view hit, {n}c"]
        for base in (f"pg-wire SELECT 1, {n}c", f"gRPC lookup hit, {n}c",
                     f"postgres indexed view SQL, {n}c"):
            b = results[base]
            print(f"  view hit {n}c / {base:34} p50 {hit['p50'] / b['p50']:5.2f}x  "
                  f"p99 {hit['p99'] / b['p99']:5.2f}x  tps {hit['tps'] / b['tps']:5.2f}x")


if __name__ == "__main__":
    main()
