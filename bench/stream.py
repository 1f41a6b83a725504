"""Reads under a stream: views read by key by several clients while
writes arrive at a fixed rate, open loop (bench/stream_load.py does the load).

One *phase* is one write rate on one data set, all started together for ``seconds``:

- an open-loop writer at ``rate`` rows/s: visits and products changing category for the
  visits view, the Nexmark generator (new people, new auctions, bids) for Nexmark Q4;
- the write-to-visible probe that bench/write_path.py uses (loadgen's: a one-row write,
  then a lookup with ``min_lsn`` of its LSN; the time is from sending the write);
- ``readers`` clients per view reading it by key.

Every read has a deadline; a read that fails or times out is counted as an error and its
time until the failure counts in the latency figures (a read is never dropped). So does a
failed probe (its time then includes the probe's pause of 0.1-0.3 s before its write).
The writer keeps streaming past ``seconds`` until every reader and probe has finished its
last call (at most the read deadline later), so no read is rescued by the stream ending.
After a phase the harness waits for the dataflow to apply every acknowledged write before
the next phase starts, and reports how long that took.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import datasets as ds
import stream_load
from common import InProcServer, LoadPool, cdf_points, log, pct
from write_path import same_rows

# The server kept up with the stream if its last write was acknowledged within this many
# seconds of the timetable's end (else the writes queued up in the writer: see send_lag_ms).
KEPT_UP_S = 2.0
PROBE_INTERVAL = 0.2  # s between a probe's writes (x0.5..1.5): a few rows/s on top of the rate


def run_phase(srv: InProcServer, pool: LoadPool, *, gen: dict, rate: float, seconds: float,
              views: list[tuple[str, list]], readers: int, deadline: float,
              writes_per_s: float, seed: int, writer_extra: dict, drain_cap: float,
              label: str | None = None) -> tuple[dict, list[dict], dict]:
    """One phase; returns (figures, answers read mid-phase, the writer's raw result)."""
    common = {"seconds": seconds, "deadline": deadline}
    specs: list[dict] = [
        {"kind": "writer", "rate": rate, "writes_per_s": writes_per_s, "seed": seed,
         **gen, **writer_extra, **common},
        {"kind": "probe", "threads": 2 if gen["gen"] == "nexmark" else 1, "seed": seed + 1,
         "op": {"kind": "probe", "interval": PROBE_INTERVAL, **gen}, **common},
    ]
    for i, (view, keys) in enumerate(views):
        specs.append({"kind": "reader", "view": view, "keys": keys, "threads": readers,
                      "seed": seed + 2 + i, **common})
    assert len(specs) <= pool.processes, "more load groups than load processes"
    fd, stop_file = tempfile.mkstemp(prefix="pf-stream-stop-")
    os.close(fd)
    os.unlink(stop_file)  # the writer streams until this file exists
    specs[0].update(stop_file=stop_file, max_extra_s=deadline + 30.0)
    before = _counters(srv)
    start_at = time.time() + 1.0
    futures = [pool.pool.submit(stream_load.run,
                                {**s, "address": srv.address, "start_at": start_at})
               for s in specs]
    try:
        p = futures[1].result()
        rs = [f.result() for f in futures[2:]]
    finally:
        Path(stop_file).touch()
    w = futures[0].result()
    os.unlink(stop_file)

    # The writers stopped: how long until the dataflow has applied what they wrote.
    last = srv.engine.storage.last_lsn if srv.engine else 0
    t0 = time.monotonic()
    try:
        srv.wait_applied(last, timeout=drain_cap)
        drain: float | None = round(time.monotonic() - t0, 2)
    except Exception as e:  # the dataflow is behind by more than the cap: say so, go on
        log(f"stream: dataflow not caught up {drain_cap:.0f} s after the phase: {e}")
        drain = None

    after = _counters(srv)
    sched = max(w["schedule_s"], 1e-9)
    writer: dict[str, Any] = {
        "target_rows_per_s": rate,
        "writes_per_s_target": round(w["ticks_per_s"], 1),
        "rows_per_write": round(rate / w["ticks_per_s"], 1),
        "scheduled_writes": w["scheduled"], "scheduled_rows": w["rows_scheduled"],
        "acked_writes": w["writes_ok"], "acked_rows": w["rows_ok"],
        # sustained: rows acknowledged over the time from the start to the last ack (a
        # server that cannot keep up acks the tail long after the timetable ended)
        "acked_rows_per_s": round(w["rows_ok"] / max(w["elapsed"], 1e-9), 1),
        "scheduled_rows_per_s": round(w["rows_scheduled"] / sched, 1),
        "ack_from_schedule_ms": pct(w["ack"]), "send_lag_ms": pct(w["lag"]),
        "streamed_s": round(w["schedule_s"], 2),
        "streamed_past_end_s": round(w["extended_s"], 2),
        "last_ack_after_schedule_s": round(w["drain_after_schedule_s"], 2),
        "errors": w["errors"], "error_samples": w["error_samples"],
    }
    for k in ("moves", "tables"):
        if k in w:
            writer[k] = w[k]
    if w.get("unknown"):
        writer["products_in_unknown_state"] = len(w["unknown"])
    out: dict[str, Any] = {
        "dataset": gen["gen"], "rate": rate, "label": label, "seconds": seconds,
        "writer": writer, "dataflow_caught_up_after_s": drain, "views": {},
        "write_to_visible": {}, "probe": {"ok": p["ok"], "errors": p["errors"],
                                          "error_samples": p["error_samples"]},
        # What the dataflow did meanwhile (where reads may have waited: index fills and
        # the keys they gated, join misses, fills and upqueries).
        "dataflow": {k: after[k] - before.get(k, 0) for k in sorted(after)
                     if k != "busy_ns" and after[k] != before.get(k, 0)},
    }
    for (view, _keys), r in zip(views, rs, strict=True):
        out["views"][view] = {
            "readers": readers, "reads": r["ok"],
            "reads_per_s": round(r["ok"] / max(r["elapsed"], 1e-9), 1),
            "latency_ms": pct(r["lat"]), "cdf_ms": cdf_points(r["lat"]),
            "errors": r["errors"], "error_samples": r["error_samples"],
        }
    probe_views = {"visible": "max_visit" if gen["gen"] == "visits" else "hot",
                   "visible_avg_winning": "avg_winning"}
    for key, view in probe_views.items():
        ok, failed = p["extra"].get(key, []), p["extra"].get("failed_" + key, [])
        if ok or failed:  # a failed probe counts with its time until the failure
            out["write_to_visible"][view] = {"ms": pct(ok + failed),
                                             "cdf_ms": cdf_points(ok + failed),
                                             "failed": len(failed)}
    writer["kept_up"] = w["drain_after_schedule_s"] <= KEPT_UP_S
    answers = [a for r in rs for a in r["answers"]]
    _log_phase(out)
    return out, answers, w


def _counters(srv: InProcServer) -> dict[str, int]:
    """The executor's counters now (index fills, gated keys, join misses, upqueries...)."""
    if srv.engine is None:
        return {}
    return dict(srv.engine.dataflow.executor.stats.counters)


def _log_phase(ph: dict) -> None:
    w = ph["writer"]
    parts = [f"stream {ph['dataset']:<7} {ph['rate']:>6.0f} rows/s"
             + (f" ({ph['label']})" if ph["label"] else "")
             + f": acked {w['acked_rows_per_s']:.0f} rows/s"
             + ("" if w["kept_up"] else
                f" (SERVER DID NOT KEEP UP: last ack {w['last_ack_after_schedule_s']} s after "
                f"the timetable ended, ack p50 {w['ack_from_schedule_ms'].get('p50')} ms)")
             + f", {w['errors']} write errors, "
             f"send lag p99 {w['send_lag_ms'].get('p99')} ms; streamed "
             f"{w['streamed_s']} s; caught up after "
             f"{ph['dataflow_caught_up_after_s']} s"]
    for view, v in ph["views"].items():
        lat = v["latency_ms"]
        parts.append(f"  {view}: {v['reads_per_s']:.1f} reads/s, p50 {lat.get('p50')} ms "
                     f"p99 {lat.get('p99')} ms max {lat.get('max')} ms, {v['errors']} errors"
                     + (f" ({v['error_samples'][0]})" if v["error_samples"] else ""))
    for view, v in ph["write_to_visible"].items():
        parts.append(f"  write->visible in {view}: p50 {v['ms'].get('p50')} ms p99 "
                     f"{v['ms'].get('p99')} ms (n={v['ms'].get('n')}, {v['failed']} failed)")
    if ph.get("dataflow"):
        parts.append("  dataflow: " + ", ".join(f"{k} {n}" for k, n in ph["dataflow"].items()))
    log("\n".join(parts))


def view_sql(view: str, key: Any) -> str:
    """The view's answer for ``key`` as a plain SELECT over the base tables."""
    if view == "max_visit":
        return ds.MAX_VISIT_SQL.replace("?", f"'{key}'")
    if view == "avg_winning":
        return ds.AVG_WINNING_SQL.replace("FROM winning", f"FROM ({ds.WINNING_SQL}) w").replace(
            "?", str(int(key)))
    if view == "hot":
        return ds.HOT_SQL
    raise ValueError(view)


def check_answers(srv: InProcServer, answers: list[dict]) -> dict:
    """Answers read during the stream equal the view's SQL on Spark at their LSN."""
    bad = []
    with srv.client() as c:
        for a in answers:
            q = c.query(view_sql(a["view"], a["key"]), as_of=a["lsn"])
            rows = [tuple(x) for x in a["rows"]]
            if not same_rows(rows, q.rows):
                bad.append({"view": a["view"], "key": a["key"], "lsn": a["lsn"],
                            "view_rows": rows[:5], "spark_rows": q.rows[:5]})
    if bad:
        log(f"STREAM ANSWER CHECK FAILED: {bad}")
    return {"checked": len(answers), "wrong": bad,
            "what": [f"{a['view']}[{a['key']!r}] at LSN {a['lsn']}" for a in answers]}


def pick_answers(answers: list[dict], per_view: int) -> list[dict]:
    """Up to ``per_view`` answers of each view, from different write rates first (the
    highest first), then of distinct keys."""
    out: list[dict] = []
    for view in dict.fromkeys(a["view"] for a in answers):
        mine = sorted((a for a in answers if a["view"] == view), key=lambda a: -a["rate"])
        picked: list[dict] = []
        for distinct in (lambda a, x: a["rate"] != x["rate"],
                         lambda a, x: repr(a["key"]) != repr(x["key"]) or a["lsn"] != x["lsn"]):
            for a in mine:
                if len(picked) < per_view and a not in picked and all(
                        distinct(a, x) for x in picked):
                    picked.append(a)
        out.extend(picked)
    return out


def goals(phases: list[dict], half_peak: float | None) -> dict:
    """The three goals of reads under a stream, each {"goal": {"text", "value", "met"}}."""
    out: dict[str, Any] = {}
    read_err = sum(v["errors"] for ph in phases for v in ph["views"].values())
    probe_err = sum(ph["probe"]["errors"] for ph in phases)
    out["no_failed_reads"] = {"goal": {
        "text": "stream: zero failed reads (readers + visibility probes)",
        "value": f"{read_err}+{probe_err} failed", "met": read_err + probe_err == 0}}
    for ph in phases:
        if ph["rate"] == 200 and not ph["label"]:
            for view, v in ph["views"].items():
                p99 = v["latency_ms"].get("p99")
                out[f"p99_at_200_{view}"] = {"goal": {
                    "text": f"stream: {view} read p99 <= 1 s at 200 rows/s",
                    "value": f"{p99} ms" if p99 is not None else "no reads",
                    "met": p99 is not None and p99 <= 1000}}
    hp = [ph for ph in phases if ph["label"] == "half of peak"]
    if hp and "avg_winning" in hp[0]["views"]:
        v = hp[0]["views"]["avg_winning"]
        p99 = v["latency_ms"].get("p99")
        out["avg_winning_p99_half_peak"] = {"goal": {
            "text": f"stream: avg_winning read p99 <= 2 s at half of peak "
                    f"({half_peak:,.0f} rows/s)",
            "value": f"{p99} ms" if p99 is not None else "no reads",
            "met": p99 is not None and p99 <= 2000}}
    return out
