"""Writes: durable rows/s through a view against the same rows into a table no view reads,
write-to-visible latency at half of peak load, and Nexmark Q4 with concurrent readers.

A write is acknowledged once it is durable (WAL fsync); the dataflow applies it after
that, so throughput is reported twice: acknowledged rows/s, and applied rows/s (rows
divided by the time until the dataflow had applied the last of them), which is the rate
the views can sustain.
"""

from __future__ import annotations

import os
import time
from typing import Any

from common import (
    InProcServer,
    LoadPool,
    drive,
    drive_mixed,
    executor_cpu_seconds,
    log,
    ratio,
)


def _applied_rate(srv: InProcServer, r: dict) -> float:
    lsn = srv.engine.storage.last_lsn
    srv.wait_applied(lsn)
    done = time.time()
    return r["items"] / max(1e-9, done - r["started_at"])


def _cpu_seconds(srv: InProcServer) -> tuple[float | None, float, float | None, float]:
    """CPU seconds so far: of the whole machine (busy time from /proc/stat; None off
    Linux), of this process (the server: InProcServer runs it here, the load comes from
    worker processes), and of the server's executor thread (None where unavailable); and
    the monotonic clock."""
    t = os.times()
    own = t.user + t.system
    executor = executor_cpu_seconds(srv.engine.dataflow.executor)
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None, own, executor, time.monotonic()
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return ((sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), own, executor,
            time.monotonic())


def _cpu_per_row(srv: InProcServer, before: tuple[float | None, float, float | None, float],
                 rows: int) -> dict[str, float | None]:
    """us of CPU per row since ``before``: the whole machine (server, load workers and
    kernel), the server process, its executor thread. On a machine whose cores are all
    busy, a view reaches x of the plain rate only if the machine CPU it adds per row is
    at most plain * (1/x - 1), wherever that work runs."""
    after = _cpu_seconds(srv)
    n = max(1, rows)

    def per_row(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((a - b) * 1e6 / n, 2)

    # How busy the cores were over the window (it includes drive's 1 s lead, when the
    # load processes connect and wait): near 1.0 means a view's work can only displace
    # the plain path's.
    cores = os.cpu_count() or 1
    wall = after[3] - before[3]
    busy = None if after[0] is None or before[0] is None or wall <= 0 else round(
        (after[0] - before[0]) / (wall * cores), 3)
    return {"machine_us_per_row": per_row(after[0], before[0]),
            "server_us_per_row": per_row(after[1], before[1]),
            "executor_us_per_row": per_row(after[2], before[2]),
            "machine_busy_fraction": busy}


def write_peak(srv: InProcServer, pool: LoadPool, *, gen: dict, batches: list[int],
               procs: int, threads: int, seconds: float) -> list[dict]:
    """Rows/s per batch size, through the view tables and through their plain twins."""
    out = []
    for batch in batches:
        row: dict[str, Any] = {"batch": batch, "writers": procs * threads}
        for side, suffix in (("view", ""), ("plain", "_plain")):
            op = {"kind": "write", "batch": batch, "suffix": suffix, **gen}
            cpu0 = _cpu_seconds(srv)
            r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds,
                      seed=batch * 10 + len(suffix))
            applied = _applied_rate(srv, r)
            cpu = _cpu_per_row(srv, cpu0, r["items"])
            row[side] = {"acked_rows_per_s": r["items_per_s"],
                         "applied_rows_per_s": round(applied, 1),
                         "writes_per_s": r["calls_per_s"], "latency_ms": r["latency_ms"],
                         "errors": r["errors"], **cpu, **({"error_samples": r["error_samples"]}
                                                  if r.get("error_samples") else {})}
        row["view_vs_plain"] = ratio(row["view"]["applied_rows_per_s"],
                                     row["plain"]["acked_rows_per_s"])
        out.append(row)
        log(
            f"writes {gen['gen']:<8} batch {batch:<5} via view: "
            f"{row['view']['acked_rows_per_s']:>9.0f} "
            f"acked / {row['view']['applied_rows_per_s']:>9.0f} applied rows/s; plain table: "
            f"{row['plain']['acked_rows_per_s']:>9.0f} rows/s -> {row['view_vs_plain']}"
        )
    return out


def half_peak(srv: InProcServer, pool: LoadPool, *, gen: dict, batch: int, peak: float,
              procs: int, threads: int, seconds: float, readers: list[dict] | None = None) -> dict:
    """Writers paced to half of ``peak`` rows/s plus a probe that writes one row and waits
    for it to be visible (lookup with min_lsn); optionally concurrent readers."""
    rate = peak / 2
    groups = [
        {"op": {"kind": "write", "batch": batch, "rate": rate / (procs * threads), **gen},
         "procs": procs, "threads": threads, "seconds": seconds, "seed": 5},
        {"op": {"kind": "probe", "interval": 0.05, **gen}, "procs": 1,
         "threads": 2 if gen["gen"] == "nexmark" else 1,
         "seconds": seconds, "seed": 6},
    ]
    for i, rd in enumerate(readers or []):
        groups.append({"op": rd["op"], "procs": rd.get("procs", 1), "threads": rd["threads"],
                       "seconds": seconds, "seed": 10 + i})
    res = drive_mixed(pool, srv.address, groups)
    w, p = res[0], res[1]
    applied = _applied_rate(srv, w)
    out = {
        "target_rows_per_s": round(rate), "batch": batch,
        "acked_rows_per_s": w["items_per_s"], "applied_rows_per_s": round(applied, 1),
        "write_ack_ms": p.get("ack_ms"), "write_to_visible_ms": p.get("visible_ms"),
        "write_ack_cdf_ms": p.get("ack_cdf_ms"), "write_to_visible_cdf_ms": p.get("visible_cdf_ms"),
        "probe_view": "max_visit" if gen["gen"] == "visits" else "hot",
        **({"write_to_visible_avg_winning_ms": p["visible_avg_winning_ms"],
            "write_to_visible_avg_winning_cdf_ms": p["visible_avg_winning_cdf_ms"]}
           if "visible_avg_winning_ms" in p else {}),
        "writer_errors": w["errors"], "probe_errors": p["errors"],
        "readers": [
            {"name": rd["name"], "reads_per_s": r["items_per_s"], "latency_ms": r["latency_ms"],
             "cdf_ms": r["cdf_ms"], "errors": r["errors"]}
            for rd, r in zip(readers or [], res[2:], strict=True)
        ],
    }
    vis = out["write_to_visible_ms"] or {}
    log(f"half peak {gen['gen']}: {out['acked_rows_per_s']:.0f} rows/s (target {rate:.0f}); "
        f"write->visible ({out['probe_view']}) p50 {vis.get('p50')} ms p99 {vis.get('p99')} ms"
        + (f"; in avg_winning p50 {out['write_to_visible_avg_winning_ms'].get('p50')} ms (n="
           f"{out['write_to_visible_avg_winning_ms'].get('n')})"
           if "write_to_visible_avg_winning_ms" in out else "")
        + "".join(f"; {r['name']} {r['reads_per_s']:.0f}/s p50 {r['latency_ms'].get('p50')} ms "
                  f"p99 {r['latency_ms'].get('p99')} ms" for r in out["readers"]))
    return out


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """The same multiset of rows, floats compared to 6 decimals."""

    def norm(rows: list[tuple]) -> list[tuple]:
        return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in x)
                      for x in rows)

    return norm(a) == norm(b)


def check_views(srv: InProcServer, checks: list[tuple[str, Any, str]]) -> dict:
    """Each (view, key, sql): the view's answer equals the SQL on Spark at its LSN."""
    bad = []
    with srv.client() as c:
        for view, key, sql in checks:
            r = c.lookup(view, key)
            q = c.query(sql, as_of=r.lsn)
            if not same_rows(r.rows, q.rows):
                bad.append({"view": view, "key": key, "view_rows": r.rows[:5],
                            "spark_rows": q.rows[:5], "lsn": r.lsn})
    if bad:
        log(f"VIEW CHECK FAILED: {bad}")
    return {"checked": len(checks), "wrong": bad}
