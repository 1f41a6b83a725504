"""How fast ``serve --follow`` applies a backlog: pgbench's TPC-B-like workload runs
unthrottled upstream (``-t``, 2 clients, scale 1) against an in-process server already
streaming, and the script times until every upstream commit is applied here (a lookup with
``min_upstream_lsn`` at the upstream's position after pgbench). With ``--profile`` it prints
where the follower's thread and its in-flight thread spent their time (cProfile). Not a
test; run it with PARTIALFLOW_FOLLOW_IN_FLIGHT=1 beside the default to compare applying one
upstream commit at a time with several at once.

    PARTIALFLOW_FOLLOW_IN_FLIGHT=1 .venv/bin/python bench/follow_backlog.py [--transactions 3000]
    .venv/bin/python bench/follow_backlog.py [--transactions 3000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "pg")]

DB = "bench_backlog"


def _profiled(cls: Any, method: str, name: str, profiles: dict[str, cProfile.Profile]) -> None:
    """Profile ``cls.method`` on whichever thread runs it (one profile per name)."""
    orig = getattr(cls, method)

    def run(self: Any, *args: Any) -> Any:
        p = profiles.setdefault(name, cProfile.Profile())
        p.enable()
        try:
            return orig(self, *args)
        finally:
            p.disable()

    setattr(cls, method, run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transactions", type=int, default=3000)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()

    import psycopg
    import upstream

    from partialflow.server.follow import follower as fmod
    from partialflow.server.follow import inflight
    from partialflow.server.spark import spark_session
    from partialflow.testing.inprocess import InProcessServer

    up = upstream.upstream()
    up.database(DB, [])
    subprocess.run(["pgbench", "-h", up.host, "-p", str(up.port), "-U", "postgres", "-i",
                    "-q", "-s", "1", DB], capture_output=True, check=True)
    with psycopg.connect(up.dsn(DB), autocommit=True) as con:
        con.execute("ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
    profiles: dict[str, cProfile.Profile] = {}
    if a.profile:
        _profiled(fmod.Follower, "_receive", "follower thread", profiles)
        _profiled(inflight.InFlight, "_run", "in-flight thread", profiles)
    srv = InProcessServer(Path(tempfile.mkdtemp(prefix="pf-bench-backlog-")) / "data",
                          spark_session("local[2]"), follow=up.url(DB)).start()
    try:
        assert srv.engine is not None
        f = srv.engine.follower
        while f.stats()["state"] != "streaming":
            time.sleep(0.2)
        c = srv.client(timeout=600)
        c.execute("CREATE VIEW bb_branch AS SELECT bid, bbalance FROM pgbench_branches "
                  "WHERE bid = ?")
        c.lookup("bb_branch", (1,))
        before = f.stats()["transactions_applied"]
        t0 = time.monotonic()
        subprocess.run(["pgbench", "-h", up.host, "-p", str(up.port), "-U", "postgres", "-n",
                        "-c", "2", "-j", "1", "-t", str(a.transactions // 2), DB],
                       capture_output=True, check=True)
        t1 = time.monotonic()
        with psycopg.connect(up.dsn(DB), autocommit=True) as con:
            at = str(con.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
        c.lookup("bb_branch", (1,), min_upstream_lsn=at)
        t2 = time.monotonic()
        applied = f.stats()["transactions_applied"] - before
    finally:
        srv.stop()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=REPO).stdout.strip()
    print(f"in flight {fmod.IN_FLIGHT}: pgbench committed {a.transactions} in {t1 - t0:.1f}s; "
          f"{applied} applied here {t2 - t0:.1f}s after it started ({applied / (t2 - t0):.0f} "
          f"tps); date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {rev}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, p in profiles.items():
        print(f"===== {name}")
        pstats.Stats(p).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
