"""Write-to-subscriber latency: the ``subscribe`` section.

A server in the harness process holds ``subscriptions`` Subscribe streams of ``keys`` keys
each of a COUNT/SUM view, opened by two load processes (one thread and one channel per
stream, so the readers do not share the server's interpreter). One more load process
writes rows into random subscribed keys, open loop, at each rate. Latency is from the
start of a write call to the subscriber receiving the first change batch at or beyond
that write's LSN, once per subscription the write touched: a batch that covers several
writes (one packet) delivers each of them, and a write that never arrives is counted, not
dropped. CLOCK_MONOTONIC is one clock for every process of the machine. The baseline is
the write's own acknowledgement (its call's latency), measured on the same writes.

The streams are the server's whole allowance by default: each holds a gRPC handler
thread, and at most half of ``--workers`` (32 of 64) may be open at once.
"""

from __future__ import annotations

import os
import random
import threading
import time
from bisect import bisect_left
from pathlib import Path
from typing import Any

from common import InProcServer, LoadPool, cdf_points, log, pct

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
MAX_WRITES_PER_S = 100  # a durable write costs an fsync: higher rates put more rows in each
WRITER_THREADS = 4


# -- load processes (run in LoadPool workers) -------------------------------------------
def hold_streams(spec: dict) -> dict:
    """Hold one stream per group of ``spec["groups"]`` ({index: keys}) until the file
    ``spec["stop"]`` exists; per group, the snapshot's LSN and (lsn, received) of every
    change batch."""
    from partialflow.client import Change, Client

    out: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    stop = spec["stop"]

    def hold(index: int, keys: list[int]) -> None:
        batches: list[tuple[int, float]] = []
        try:
            with Client(spec["address"], timeout=600.0) as c, c.subscribe("counts", keys) as sub:
                it = iter(sub)
                snapshot = next(it)
                out[index] = {"snapshot_lsn": snapshot.lsn, "batches": batches}
                last = snapshot.lsn
                for ev in it:  # a heartbeat comes at least once a second: stop is seen
                    now = time.monotonic()
                    if isinstance(ev, Change) and ev.lsn != last:
                        last = ev.lsn
                        batches.append((ev.lsn, now))
                    if os.path.exists(stop):
                        break
        except Exception as e:  # reported with the figures, never dropped
            errors.append(f"stream {index}: {type(e).__name__}: {e}"[:300])

    threads = [threading.Thread(target=hold, args=(int(i), ks), daemon=True)
               for i, ks in spec["groups"].items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"streams": out, "errors": errors}


def write_open_loop(spec: dict) -> dict:
    """``rate`` rows/s for ``seconds`` as at most MAX_WRITES_PER_S writes/s into random
    keys of ``keys``, scheduled open loop over WRITER_THREADS threads (each its own
    channel: one slow acknowledgement does not hold back the next write); per write
    (lsn, started, acknowledged, keys)."""
    from partialflow.client import Client

    keys, rate, seconds = spec["keys"], spec["rate"], spec["seconds"]
    per_s = min(rate, MAX_WRITES_PER_S)
    rows = max(1, round(rate / per_s))
    writes: list[tuple[int, float, float, list[int]]] = []
    errors: list[str] = []
    clients = [Client(spec["address"], timeout=600.0) for _ in range(WRITER_THREADS)]
    for c in clients:
        c.ping()  # connected before the clock starts
    start = time.monotonic() + 0.1

    def write(t: int) -> None:
        rng = random.Random(spec["seed"] * 100 + t)
        n = t  # write n is due at start + n / per_s; thread t takes every WRITER_THREADS-th
        while (due := start + n / per_s) < start + seconds:
            n += WRITER_THREADS
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            ks = [rng.choice(keys) for _ in range(rows)]
            t0 = time.monotonic()
            try:
                lsn = clients[t].insert("ev", [(k, 1) for k in ks])
            except Exception as e:  # counted and reported
                errors.append(f"{type(e).__name__}: {e}"[:300])
                continue
            writes.append((lsn, t0, time.monotonic(), ks))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(WRITER_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - start
    for c in clients:
        c.close()
    return {"writes": writes, "errors": errors, "elapsed": elapsed, "rows_per_write": rows}


# -- the harness side --------------------------------------------------------------------
def delivery(groups: dict[int, list[int]], streams: dict[int, dict],
             writes: list[tuple[int, float, float, list[int]]]) -> tuple[list[float], int, int]:
    """Latencies (s) of every (write, subscription it touched) pair, how many such pairs
    never arrived, and how many were already in a stream's snapshot (not counted)."""
    owner = {k: i for i, ks in groups.items() for k in ks}
    lat: list[float] = []
    lost = in_snapshot = 0
    lsns = {i: [b[0] for b in s["batches"]] for i, s in streams.items()}
    for lsn, t0, _, ks in writes:
        for i in {owner[k] for k in ks}:
            s = streams.get(i)
            if s is None:
                lost += 1
                continue
            if lsn <= s["snapshot_lsn"]:
                in_snapshot += 1
                continue
            j = bisect_left(lsns[i], lsn)  # the first batch at or beyond the write
            if j == len(lsns[i]):
                lost += 1
            else:
                lat.append(s["batches"][j][1] - t0)
    return lat, lost, in_snapshot


def latency(data_dir: Path, spark: Any, pool: LoadPool, *, rates: list[float], seconds: float,
            subscriptions: int, keys: int, drain: float = 3.0) -> dict:
    """Hold ``subscriptions`` streams of ``keys`` keys each; at each rate, write for
    ``seconds`` and time every write to each subscriber it reaches (module docstring)."""
    nkeys = subscriptions * keys
    groups = {i: list(range(i * keys, (i + 1) * keys)) for i in range(subscriptions)}
    out: dict[str, Any] = {"subscriptions": subscriptions, "keys_per_subscription": keys,
                           "seconds_per_rate": seconds, "max_writes_per_s": MAX_WRITES_PER_S,
                           "phases": []}
    with InProcServer(data_dir, spark) as srv:
        with srv.client() as c:
            c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
            c.insert("ev", [(k, 1) for k in range(nkeys)])
            c.execute(f"CREATE VIEW counts AS {VIEW}")
            c.lookup_many("counts", list(range(nkeys)))  # the snapshots are hits
        out["stream_limit"] = max(1, srv.config.workers // 2)
        for n, rate in enumerate(rates):
            stop = data_dir.parent / f"stop-{n}"
            halves = [dict(list(groups.items())[h::2]) for h in (0, 1)]
            held = [pool.pool.submit(hold_streams, {"address": srv.address, "groups": g,
                                                    "stop": str(stop)}) for g in halves]
            t0 = time.monotonic()
            st = srv.engine.stats()
            while st.get("subscriptions", 0) < subscriptions and time.monotonic() - t0 < 120:
                if any(f.done() for f in held):
                    break  # a holder failed early: its errors are reported below
                time.sleep(0.2)
                st = srv.engine.stats()
            opened_s = time.monotonic() - t0
            time.sleep(1.0)  # every snapshot sent (they are hits, a few ms)
            st = srv.engine.stats()
            counts = {k: st.get(k, 0) for k in ("subscriptions", "subscribed_keys")}
            (w,) = pool.run(write_open_loop, [{"address": srv.address, "rate": rate,
                                               "seconds": seconds, "keys": list(range(nkeys)),
                                               "seed": 100 + n}])
            time.sleep(drain)  # the last writes' batches reach the subscribers
            stop.touch()
            parts = [f.result(timeout=120) for f in held]
            streams = {i: s for p in parts for i, s in p["streams"].items()}
            errors = [e for p in parts for e in p["errors"]] + w["errors"]
            lat, lost, in_snapshot = delivery(groups, streams, w["writes"])
            acks = [a - s for _, s, a, _ in w["writes"]]
            ph = {
                "rate": rate, "writes": len(w["writes"]), "rows_per_write": w["rows_per_write"],
                "acked_rows_per_s": round(len(w["writes"]) * w["rows_per_write"] / w["elapsed"],
                                          1),
                "held": counts, "opened_s": round(opened_s, 2),
                "deliveries": len(lat), "lost": lost, "in_snapshot": in_snapshot,
                "latency_ms": pct(lat), "cdf_ms": cdf_points(lat),
                "write_ack_ms": pct(acks), "ack_cdf_ms": cdf_points(acks),
                "errors": errors[:5], "error_count": len(errors),
            }
            out["phases"].append(ph)
            log(f"subscribe {rate:g} rows/s: {counts['subscriptions']} streams, "
                f"{counts['subscribed_keys']} keys; write-to-subscriber p50 "
                f"{ph['latency_ms'].get('p50')} ms p99 {ph['latency_ms'].get('p99')} ms "
                f"({len(lat)} deliveries, {lost} lost) | write ack p50 "
                f"{ph['write_ack_ms'].get('p50')} ms p99 {ph['write_ack_ms'].get('p99')} ms"
                + (f"  ERRORS {errors[:2]}" if errors else ""))
    out["goals"] = [{"goal": {
        "text": f"subscriptions: every write reached each of its {subscriptions} streams' "
                "subscribers",
        "value": f"{sum(p['lost'] for p in out['phases'])} lost",
        "met": all(p["lost"] == 0 and not p["error_count"] for p in out["phases"])}}]
    return out
