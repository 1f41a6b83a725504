"""Reads: the hit path against a no-op RPC, the miss path against bare PySpark, and
coalescing of concurrent cold reads.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from common import InProcServer, LoadPool, drive, log, pct, ratio

PREDRAW = 64  # key batches each hit-path thread draws before its clock starts


def wire_sizes(srv: InProcServer, view: str, keys: list[Any], batch: int) -> tuple[int, int]:
    """Bytes of a Lookup request and its answer for ``batch`` of ``keys``, as the client
    sends them: what a no-op call must carry to compare like with like."""
    from partialflow.client.client import _add_keys
    from partialflow.proto import partialflow_pb2 as pb

    sample = [(k,) for k in keys[:batch]]
    request = pb.LookupRequest(view=view)
    _add_keys(request, sample)
    columns, results = srv.engine.lookup(view, sample, min_lsn=None, timeout=60.0)
    from partialflow.server.app.answers import lookup_message

    return request.ByteSize(), lookup_message(columns, results).ByteSize()


def hit_path(srv: InProcServer, pool: LoadPool, *, view: str, keys: list[Any],
             seconds: float, batches: list[int], concurrency: list[tuple[int, int]]) -> dict:
    """Lookups of filled keys vs a no-op Ping carrying payloads of the same sizes (the
    lookup's request and answer bytes), at each (processes, threads) and batch size.

    The Ping runs right before and right after each lookup configuration; their mean is
    the baseline, so drifting machine load hits both sides alike.
    """
    with srv.client() as c:
        for i in range(0, len(keys), 5000):
            c.lookup_many(view, keys[i : i + 5000])  # fill them all first
        before = c.stats()["views"][view]
    sizes = {b: wire_sizes(srv, view, keys, b) for b in batches}
    out: dict[str, Any] = {"view": view, "keys": len(keys), "seconds": seconds, "runs": [],
                           "wire_bytes": {str(b): list(v) for b, v in sizes.items()}}
    for procs, threads in concurrency:
        for batch in batches:
            ping_op = {"kind": "ping", "payload": sizes[batch][0], "reply_bytes": sizes[batch][1]}
            p0 = drive(pool, srv.address, ping_op, procs=procs, threads=threads,
                       seconds=seconds, seed=1)
            # Key batches drawn before the clock starts (every key is filled, so which
            # ones come again does not matter): the Ping draws none either.
            op = {"kind": "lookup", "view": view, "batch": batch, "predraw": PREDRAW,
                  "keys": {"type": "list", "values": keys}}
            r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds,
                      seed=2 + batch)
            p1 = drive(pool, srv.address, ping_op, procs=procs, threads=threads,
                       seconds=seconds, seed=1)
            base = [p0, p1]
            ping_cps = statistics.fmean(x["calls_per_s"] for x in base)
            ping_p50 = statistics.fmean(x["latency_ms"]["p50"] for x in base)
            ping_p99 = statistics.fmean(x["latency_ms"]["p99"] for x in base)
            row = {
                "concurrency": procs * threads, "procs": procs, "threads": threads,
                "batch": batch, "lookup": r, "ping": p1, "ping_before": p0,
                "request_bytes": sizes[batch][0], "answer_bytes": sizes[batch][1],
                "ping_calls_per_s": round(ping_cps, 1),
                "keys_per_s": r["items_per_s"],
                "p50_ms": r["latency_ms"]["p50"], "p99_ms": r["latency_ms"]["p99"],
                # >1 means slower than the transport moving the same bytes: calls/s, then
                # latencies per call.
                "slowdown_calls": ratio(ping_cps, r["calls_per_s"]),
                "slowdown_p50": ratio(r["latency_ms"]["p50"], ping_p50),
                "slowdown_p99": ratio(r["latency_ms"]["p99"], ping_p99),
            }
            out["runs"].append(row)
            log(f"hit  c={procs * threads:<3} batch={batch:<5} {r['calls_per_s']:>8.0f} calls/s "
                f"{r['items_per_s']:>9.0f} keys/s  p50 {r['latency_ms']['p50']} ms "
                f"p99 {r['latency_ms']['p99']} ms | ping of {sizes[batch][0]}+{sizes[batch][1]} "
                f"bytes {ping_cps:.0f}/s p50 {ping_p50:.3f} p99 {ping_p99:.3f} ms -> "
                f"x{row['slowdown_calls']} (p50 x{row['slowdown_p50']}, p99 x{row['slowdown_p99']})"
                + (f"  ERRORS {r['errors']}" if r["errors"] else ""))
    with srv.client() as c:
        after = c.stats()["views"][view]
    out["misses_during"] = after["misses"] - before["misses"]
    # Each as {"goal": ...}: run.py's summary collects every "goal" in the results.
    out["goals"] = [{"goal": g} for g in _goals(out["runs"])]
    return out


def _goals(runs: list[dict]) -> list[dict]:
    """Single keys within 1.5x of a same-size no-op; 1000-key batches at >= 100k keys/s
    from one client and >= 200k from 8."""
    singles = [x for x in runs if x["batch"] == 1]
    worst = max(
        max(x["slowdown_calls"] or 0, x["slowdown_p50"] or 0, x["slowdown_p99"] or 0)
        for x in singles
    ) if singles else 0
    goals = [{"text": "single-key lookups within 1.5x of a no-op gRPC call (calls/s, p50, p99)",
              "worst_slowdown": worst, "value": f"x{worst}", "met": worst <= 1.5}]
    for clients, want in ((1, 100_000), (8, 200_000)):
        got = [x["keys_per_s"] for x in runs if x["batch"] == 1000 and x["concurrency"] == clients]
        if got:
            goals.append({"text": f"lookup_many of 1000 keys, {clients} client(s): "
                                  f">= {want // 1000}k keys/s",
                          "value": f"{got[0]:.0f} keys/s", "met": got[0] >= want})
    return goals


def bare_spark(srv: InProcServer, sql: str, tables: list[str], lsn: int) -> list[tuple]:
    """``sql`` on the server's own Spark session over the base tables as of ``lsn``: the
    same snapshot reads (Parquet + unflushed rows, consolidated) a partialflow upquery
    uses, but the query is plain Spark SQL that Spark plans and optimizes itself."""
    spark = srv.spark
    with srv.engine.storage.snapshot(lsn) as snap:
        for t in tables:
            snap.table_df(t).createOrReplaceTempView(t)
        try:
            return [tuple(r) for r in spark.sql(sql).collect()]
        finally:
            for t in tables:
                spark.catalog.dropTempView(t)


def _same(a: list[tuple], b: list[tuple]) -> bool:
    def norm(rows: list[tuple]) -> list[tuple]:
        return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)

    return norm(a) == norm(b)


def miss_path(srv: InProcServer, *, view: str, sql: str, tables: list[str], keys: list[Any],
              literal: Any, label: str = "") -> dict:
    """Cold reads (one key each, one at a time) against bare Spark computing the same rows
    at the same snapshot, interleaved (alternating which goes first). ``label`` says what
    the view is, in the report (e.g. "5-table join")."""
    pf: list[float] = []
    bare: list[float] = []
    mismatches = 0
    with srv.client() as c:
        # Warm both paths once (first Spark job after a pause pays for code generation).
        warm = keys[0]
        c.lookup(view, warm)
        bare_spark(srv, sql.format(key=literal(warm)), tables, c.stats()["lsn"])
        for i, key in enumerate(keys[1:]):
            lsn = srv.engine.storage.last_lsn

            def read_pf(key: Any = key) -> Any:
                t0 = time.perf_counter()
                r = c.lookup(view, key)
                pf.append(time.perf_counter() - t0)
                return r

            def read_bare(key: Any = key, lsn: int = lsn) -> list[tuple]:
                t0 = time.perf_counter()
                rows = bare_spark(srv, sql.format(key=literal(key)), tables, lsn)
                bare.append(time.perf_counter() - t0)
                return rows

            if i % 2:
                rows, r = read_bare(), read_pf()
            else:
                r, rows = read_pf(), read_bare()
            if r.lsn != lsn or not _same(r.rows, rows):
                mismatches += 1
                log(f"miss {view} {key!r}: partialflow {r.rows} @ {r.lsn} vs Spark {rows} @ {lsn}")
    out = {
        "view": view, "label": label, "trials": len(pf),
        "cold_read_ms": pct(pf), "bare_spark_ms": pct(bare),
        "slowdown_p50": ratio(statistics.median(pf), statistics.median(bare)),
        "rows_differ": mismatches,
    }
    name = f"{view} ({label})" if label else view
    out["goal"] = {"text": f"{name}: cold read at most 1.3x bare PySpark (median)",
                   "value": f"x{out['slowdown_p50']}", "met": out["slowdown_p50"] <= 1.3}
    log(f"miss {name}: cold p50 {out['cold_read_ms']['p50']} ms vs bare Spark "
        f"{out['bare_spark_ms']['p50']} ms -> x{out['slowdown_p50']}"
        + (f"  ROWS DIFFER {mismatches}" if mismatches else ""))
    return out


def coalescing(srv: InProcServer, pool: LoadPool, *, view: str, keys: list[Any],
               trials: int, fan: int = 64) -> dict:
    """``fan`` concurrent cold reads of distinct keys vs one cold read, interleaved."""
    one, many, jobs = [], [], []
    it = iter(keys)
    for t in range(trials):
        k1 = [next(it)]
        r1 = drive(pool, srv.address, {"kind": "lookup", "view": view,
                                       "keys": {"type": "each", "values": k1}},
                   threads=1, calls=1, seed=t)
        one.append(r1["latency_ms"]["max"] / 1000)
        ks = [next(it) for _ in range(fan)]
        before = srv.view_counters(view)
        r = drive(pool, srv.address, {"kind": "lookup", "view": view,
                                      "keys": {"type": "each", "values": ks}},
                  threads=fan, calls=1, seed=100 + t)
        after = srv.view_counters(view)
        if r["errors"]:
            log(f"coalescing: {r['errors']} errors: {r.get('error_samples')}")
        # All reads start together; the batch is done when the slowest one returns.
        many.append(r["latency_ms"]["max"] / 1000)
        jobs.append(after["upqueries"] - before["upqueries"])
    out = {
        "view": view, "fan": fan, "trials": trials,
        "one_cold_read_ms": pct(one), "all_concurrent_done_ms": pct(many),
        "upqueries_per_batch": jobs,
        "slowdown": ratio(statistics.median(many), statistics.median(one)),
    }
    out["goal"] = {"text": f"{view}: {fan} concurrent cold reads at most 2x one cold read",
                   "value": f"x{out['slowdown']}", "met": out["slowdown"] <= 2.0}
    log(f"coalesce {view}: one {out['one_cold_read_ms']['p50']} ms, {fan} at once "
        f"{out['all_concurrent_done_ms']['p50']} ms -> x{out['slowdown']} "
        f"(upqueries per batch {jobs})")
    return out
