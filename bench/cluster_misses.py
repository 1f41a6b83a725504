"""Miss latency on a standalone Spark cluster against local Spark, side by side.

Two servers run at once on the same data: the baseline on ``local[2]`` (the default) and
one on ``--master`` (e.g. the cluster of ``scripts/spark-cluster.sh``). Each round reads a
new key of a per-key aggregate from both, in alternating order, so machine load hits both
alike; every read is a miss answered by an upquery. The two answers must agree.

    scripts/spark-cluster.sh start /tmp/pf-cluster
    .venv/bin/python bench/cluster_misses.py --master "$(cat /tmp/pf-cluster/master-url)"

Prints p50/p90/max per server and the cluster/local ratio, with the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import loadavg, log, pct, ratio

from partialflow.client import Client

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = ? GROUP BY k"


def start(data: Path, master: str) -> tuple[subprocess.Popen, str]:
    """``partialflow serve`` on ``master``; the process and its address."""
    cmd = [sys.executable, "-m", "partialflow.client.cli", "serve", "--data", str(data),
           "--port", "0", "--spark-master", master, "--checkpoint-interval", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(f"{data}.log", "ab"),  # noqa: SIM115
                            text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split("listening on ", 1)[1].strip()
    raise RuntimeError(f"server on {master} did not start; see {data}.log")


def load(client: Client, rows: int, keys: int) -> int:
    client.execute("CREATE TABLE events (k BIGINT, v BIGINT)")
    lsn = 0
    for lo in range(0, rows, 50_000):
        lsn = client.insert("events", [(i % keys, i) for i in range(lo, min(rows, lo + 50_000))])
    client.execute(f"CREATE VIEW per_key AS {VIEW}")
    return lsn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", required=True, help="the cluster's master (spark://... or sc://...)")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--misses", type=int, default=40, help="measured rounds (after 5 warm-up)")
    args = ap.parse_args()
    keys = max(1, args.rows // 10)
    tmp = Path(tempfile.mkdtemp(prefix="pf-bench-cluster-"))
    servers: dict[str, tuple[subprocess.Popen, Client]] = {}
    try:
        for name, master in (("local", "local[2]"), ("cluster", args.master)):
            proc, address = start(tmp / name, master)
            servers[name] = (proc, Client(address, timeout=600))
            log(f"{name} server on {master} at {address}")
        for name, (_, client) in servers.items():
            lsn = load(client, args.rows, keys)
            client.lookup("per_key", keys - 1, min_lsn=lsn)  # applied before we measure
            log(f"{name}: {args.rows} rows in {keys} keys")
        time.sleep(3)  # past the flush interval: upqueries scan Parquet segments
        times: dict[str, list[float]] = {name: [] for name in servers}
        for i in range(5 + args.misses):
            key = (i * 7919) % (keys - 1)
            order = list(servers.items()) if i % 2 else list(reversed(servers.items()))
            answers: dict[str, Any] = {}
            for name, (_, client) in order:
                t = time.perf_counter()
                answers[name] = client.lookup("per_key", key).rows
                if i >= 5:
                    times[name].append(time.perf_counter() - t)
            if answers["local"] != answers["cluster"]:
                raise AssertionError(f"key {key}: local {answers['local']} != "
                                     f"cluster {answers['cluster']}")
        stats = {name: pct(ts) for name, ts in times.items()}
        print(f"miss latency, ms ({args.misses} misses each, {args.rows} rows; "
              f"load average {loadavg()})")
        print(f"{'server':10}{'p50':>10}{'p90':>10}{'max':>10}")
        for name, s in stats.items():
            print(f"{name:10}{s['p50']:>10}{s['p90']:>10}{s['max']:>10}")
        print(f"cluster/local: p50 x{ratio(stats['cluster']['p50'], stats['local']['p50'])}, "
              f"p90 x{ratio(stats['cluster']['p90'], stats['local']['p90'])}")
    finally:
        for proc, client in servers.values():
            client.close()
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


if __name__ == "__main__":
    main()
