#!/usr/bin/env python3
"""Write-to-subscriber latency (issue 15, part 4), on its own (not yet in bench/run.py).

    python bench/subscribe_latency.py [--rates 20,200,2000] [--seconds 10]
        [--subscriptions 16] [--keys 100]

A server in this process on a local Spark session; ``--subscriptions`` streams of
``--keys`` keys each of a COUNT/SUM view, held by two worker processes (so the readers do
not share the server's interpreter); one more process writes single-row inserts into
random subscribed keys, open loop, at each rate. Latency: from the start of the write call
to a subscriber receiving the change batch of that write's LSN, once per subscription the
write reached (CLOCK_MONOTONIC is one clock for all processes). At most 100 writes/s; higher
rates put more rows in each write. Prints p50/p90/p99 (ms) per rate as JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"


def _subscriber(address: str, groups: list[list[int]], seconds: float, ready: object,
                out: object) -> None:
    """Hold one stream per group; put (lsn, received) of every change batch on ``out``."""
    from partialflow.client import Change, Client

    got: list[tuple[int, float]] = []
    lock = threading.Lock()
    opened = threading.Barrier(len(groups) + 1)

    def hold(keys: list[int]) -> None:
        with Client(address) as c, c.subscribe("counts", keys) as sub:
            it = iter(sub)
            next(it)  # the snapshot
            opened.wait()
            last = None
            end = time.monotonic() + seconds
            for ev in it:
                now = time.monotonic()
                if isinstance(ev, Change) and ev.lsn != last:
                    last = ev.lsn
                    with lock:
                        got.append((ev.lsn, now))
                if now > end:
                    break

    threads = [threading.Thread(target=hold, args=(g,), daemon=True) for g in groups]
    for t in threads:
        t.start()
    opened.wait()
    ready.set()  # type: ignore[attr-defined]
    for t in threads:
        t.join()
    out.put(got)  # type: ignore[attr-defined]


def _writer(address: str, keys: list[int], rate: float, seconds: float, out: object) -> None:
    from partialflow.client import Client

    rng = random.Random(1)
    sent: dict[int, float] = {}
    # At most 100 writes/s (a durable write costs an fsync); more rows go in each write.
    per_s = min(rate, 100.0)
    rows = max(1, round(rate / per_s))
    with Client(address) as c:
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < seconds:
            due = start + n / per_s
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            t0 = time.monotonic()
            sent[c.insert("ev", [(rng.choice(keys), 1) for _ in range(rows)])] = t0
            n += 1
    out.put(sent)  # type: ignore[attr-defined]


def pct(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    q = lambda p: round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 1)  # noqa: E731
    return {"n": len(xs), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="20,200,2000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--subscriptions", type=int, default=16)
    ap.add_argument("--keys", type=int, default=100)
    args = ap.parse_args()
    from partialflow.server.app.inprocess import InProcessServer
    from partialflow.server.spark import spark_session

    spark = spark_session("local[2]")
    ctx = mp.get_context("spawn")
    results = {}
    with tempfile.TemporaryDirectory() as tmp, \
            InProcessServer(Path(tmp) / "data", spark, checkpoint_interval=0) as srv:
        nkeys = args.subscriptions * args.keys
        with srv.client(timeout=600) as c:
            c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
            c.insert("ev", [(k, 1) for k in range(nkeys)])
            c.execute(f"CREATE VIEW counts AS {VIEW}")
            c.lookup_many("counts", list(range(nkeys)))
        groups = [list(range(i * args.keys, (i + 1) * args.keys))
                  for i in range(args.subscriptions)]
        for rate in [float(r) for r in args.rates.split(",")]:
            q = ctx.Queue()
            procs, events = [], []
            for part in (groups[0::2], groups[1::2]):
                ready = ctx.Event()
                p = ctx.Process(target=_subscriber,
                                args=(srv.address, part, args.seconds + 3, ready, q))
                p.start()
                procs.append(p)
                events.append(ready)
            for e in events:
                e.wait(120)
            held = {k: v for k, v in srv.engine.stats().items()
                    if k in ("subscriptions", "subscribed_keys")}
            wq = ctx.Queue()
            w = ctx.Process(target=_writer,
                            args=(srv.address, list(range(nkeys)), rate, args.seconds, wq))
            w.start()
            sent = wq.get()
            got = [x for _ in procs for x in q.get()]
            for p in procs + [w]:
                p.join()
            lat = [t - sent[lsn] for lsn, t in got if lsn in sent]
            results[f"{rate:g} rows/s"] = {
                **pct(lat), "writes": len(sent), "seconds": args.seconds, "held": held}
            print(f"{rate:g} rows/s: {results[f'{rate:g} rows/s']}", file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
