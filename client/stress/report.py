"""The end-of-run report: a text summary for people, the same facts as JSON for scripts."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from partialflow.client.stress.record import CLEAN_ERRORS, Journal
from partialflow.client.stress.verify import Verdict

SHOWN = 5  # mismatches and lost writes printed in full


@dataclass
class RunInfo:
    server: str
    prefix: str
    seed: int
    views: list[str]
    duration: float  # seconds of load
    miss_ms: float  # latency above which a read counts as a miss
    settle: float  # seconds after a fault window whose errors still count as caused by it
    recovery: list[str]  # problems of the post-fault recovery pass (empty: recovered)
    plant: str | None  # the view --plant-wrong-answer named
    server_delta: dict[str, Any]  # hits/misses/upqueries/evictions of the stress views
    server_upquery_ms: dict[str, Any]
    phases: dict[str, float]  # seconds each step of the run took
    # A read with no fault active must be answered within this many seconds: a slower one,
    # or one that failed (even cleanly), fails the run. A read that never returns is a
    # failure, just like a wrong one.
    read_bound: float = 20.0
    # A subscription stream whose LSN stands still (no change batch, no heartbeat at a newer
    # LSN: heartbeats come every second) for longer than this with no fault active fails the
    # run (its first event, the snapshot, may take as long as a read may: ``read_bound``).
    subscription_gap: float = 10.0
    # The server's disk tier over the run (run._tier_delta), None without a tier.
    disk_tier: dict[str, int] | None = None


def _pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    qs = (
        statistics.quantiles(values, n=100, method="inclusive")
        if len(values) > 1
        else [values[0]] * 99
    )
    return {
        "count": len(values),
        "p50": round(qs[49], 1),
        "p90": round(qs[89], 1),
        "p99": round(qs[98], 1),
        "max": round(max(values), 1),
    }


def summarize(journal: Journal, verdict: Verdict, info: RunInfo) -> dict[str, Any]:
    """Every figure of the report, and the verdict, as plain data."""
    ops = Counter(w.op for w in journal.writes if w.op != "seed")
    hits = [ms for ms, _, _ in journal.calls if ms < info.miss_ms]
    misses = [ms for ms, _, _ in journal.calls if ms >= info.miss_ms]
    clean, unclean, unexplained = [], [], []
    for f in journal.failures:
        # Only reads go through Spark; a write or evict that fails, or any error that is
        # not a clean Unavailable/DeadlineExceeded, is a failure of the server.
        if f.kind not in CLEAN_ERRORS or f.what not in ("read", "recovery", "subscription"):
            unclean.append(f)
        elif journal.fault_at(f.start, f.end, info.settle) is None:
            unexplained.append(f)
        else:
            clean.append(f)
    windows = []
    for w in journal.windows:
        inside = [r for r in journal.reads
                  if w.start <= r.start < w.end and r.call != "subscription"]
        errs = Counter(
            f.kind for f in journal.failures if f.what == "read" and w.start <= f.start < w.end
        )
        windows.append(
            {
                "mode": w.mode,
                "start": round(w.start, 1),
                "end": round(w.end, 1),
                "reads_ok": len(inside),
                "errors": dict(errs),
            }
        )
    slow = [
        r for r in journal.reads
        if r.call != "recovery" and r.ms / 1000 > info.read_bound
        and journal.fault_at(r.start, r.start + r.ms / 1000, info.settle) is None
    ]
    streams = _streams(journal, info)
    silent = [x for x in streams if x["max_gap_without_fault_s"] > info.subscription_gap]
    failed = bool(
        verdict.mismatches or verdict.lost or unclean or journal.lsn_regressions or info.recovery
        or unexplained or slow or silent
    )
    return {
        "server": info.server,
        "prefix": info.prefix,
        "seed": info.seed,
        "views": info.views,
        "seconds": round(info.duration, 1),
        "writes": {
            "acknowledged": sum(ops.values()),
            "per_second": round(sum(ops.values()) / max(info.duration, 1e-9), 1),
            **ops,
        },
        "reads": {
            "keys": sum(1 for x in journal.reads if x.call not in ("recovery", "subscription")),
            "subscription_keys": sum(1 for x in journal.reads if x.call == "subscription"),
            "recovery_keys": sum(1 for x in journal.reads if x.call == "recovery"),
            "calls": len(journal.calls),
            "per_second": round(len(journal.calls) / max(info.duration, 1e-9), 1),
            "lookup_many": sum(1 for _, c, _ in journal.calls if c == "lookup_many"),
        },
        "latency_ms": {"miss_threshold": info.miss_ms, "hits": _pct(hits), "misses": _pct(misses),
                       "read_bound_s": info.read_bound,
                       "over_bound_without_fault": [
                           f"{r.view} {r.key!r}: {r.ms / 1000:.1f}s at {r.start:.1f}s"
                           for r in slow[:SHOWN]],
                       "over_bound_count": len(slow)},
        "server_stats": {**info.server_delta, "upquery_ms": info.server_upquery_ms},
        "disk_tier": info.disk_tier,
        "evictions": {"calls": journal.evictions, "keys": journal.evicted_keys},
        "errors": {
            "clean_in_fault_windows": dict(Counter(f.kind for f in clean)),
            "clean_without_fault": dict(Counter(f.kind for f in unexplained)),
            "clean_without_fault_first": [
                f"{f.what} {f.detail} at {f.start:.1f}s: {f.kind}: {f.message}"
                for f in unexplained[:SHOWN]
            ],
            "unclean": [f"{f.what} {f.detail}: {f.kind}: {f.message}" for f in unclean],
        },
        "faults": windows,
        "subscriptions": {"gap_bound_s": info.subscription_gap, "streams": streams,
                          "silent_over_bound": len(silent)},
        "recovery": info.recovery,
        "planted": journal.planted,
        "plant": info.plant,
        "lsn_regressions": journal.lsn_regressions[:SHOWN],
        "verification": {
            "checked": verdict.checked,
            "mismatches": len(verdict.mismatches),
            "spark_jobs": verdict.jobs,
            "snapshots": verdict.snapshots,
            "seconds": round(verdict.seconds, 1),
            "first_mismatches": [_mismatch(m, journal, info) for m in verdict.mismatches[:SHOWN]],
        },
        "lost_writes": {
            "differences": len(verdict.lost),
            "checked_at_lsns": verdict.table_checks,
            "first": verdict.lost[:SHOWN],
        },
        "phases_s": {k: round(v, 1) for k, v in info.phases.items()},
        "passed": not failed,
    }


def _streams(journal: Journal, info: RunInfo) -> list[dict[str, Any]]:
    """Per subscriber (its streams together, a resume after a cut-off included): how often
    its LSN moved, the longest it stood still, and the longest with no fault active
    (``--subscription-gap``)."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for st in journal.streams:
        x = out.setdefault((st.subscriber, st.view), {
            "subscriber": st.subscriber, "view": st.view, "streams": 0, "events": 0,
            "max_gap_s": 0.0, "max_gap_without_fault_s": 0.0, "at_s": None})
        x["streams"] += 1
        x["events"] += len(st.events)
        for i, (a, b) in enumerate(st.silences(info.duration)):
            gap = round(b - a, 2)
            if i == 0 and gap <= info.read_bound:
                continue  # waiting for the snapshot: a read's wait, bounded like one
            x["max_gap_s"] = max(x["max_gap_s"], gap)
            if journal.fault_at(a, b, info.settle) is None and gap > x["max_gap_without_fault_s"]:
                x["max_gap_without_fault_s"], x["at_s"] = gap, round(a, 1)
    return list(out.values())


def _mismatch(m: Any, journal: Journal, info: RunInfo) -> dict[str, Any]:
    r = m.read
    fault = journal.fault_at(r.start, r.start + r.ms / 1000, 0.0)
    return {
        "view": info.prefix + r.view,
        "key": list(r.key),
        "lsn": r.lsn,
        "effective_lsn": m.effective_lsn,
        "served": sorted(map(repr, r.rows)),
        "expected": sorted(map(repr, m.expected)),
        "at_second": round(r.start, 2),
        "reader": r.reader,
        "call": r.call,
        "fault": fault or "none",
    }


def _lat(p: dict[str, float]) -> str:
    if not p.get("count"):
        return "      0        -        -        -        -"
    return f"{p['count']:7d} {p['p50']:8.1f} {p['p90']:8.1f} {p['p99']:8.1f} {p['max']:8.1f}"


def render(s: dict[str, Any]) -> str:
    """The summary as the text the command prints."""
    w, r, lat, srv = s["writes"], s["reads"], s["latency_ms"], s["server_stats"]
    e, v, lost = s["errors"], s["verification"], s["lost_writes"]
    ops = ", ".join(f"{w.get(k, 0)} {k}s" for k in ("insert", "delete", "update"))
    out = [
        f"partialflow stress: {s['seconds']} s against {s['server']}, views "
        f"{', '.join(s['views'])} (prefix {s['prefix']}, seed {s['seed']})",
        "",
        "operations",
        f"  writes     {w['acknowledged']} acknowledged ({w['per_second']}/s): {ops}",
        (
            f"  reads      {r['keys']} keys in {r['calls']} calls ({r['per_second']} calls/s), "
            f"{r['lookup_many']} of them lookup_many; then {r['recovery_keys']} keys re-read cold"
        ),
        (
            f"  evictions  {s['evictions']['calls']} evict calls by this run "
            f"({s['evictions']['keys']} keys); "
            f"the server evicted {srv.get('evictions', 0)} keys of these views in all (memory "
            "pressure included)"
        ),
        "",
        f"read latency, ms (client side; a call slower than {lat['miss_threshold']:g} ms counts as "
        "a miss)",
        "               count      p50      p90      p99      max",
        f"  hits       {_lat(lat['hits'])}",
        f"  misses     {_lat(lat['misses'])}",
        (
            f"  server     {srv.get('hits', 0)} hits, {srv.get('misses', 0)} misses, "
            f"{srv.get('upqueries', 0)} upqueries "
            f"for these views; upquery ms {_fmt_pct(srv.get('upquery_ms') or {})}"
        ),
        *_tier_lines(s.get("disk_tier")),
        "",
        "errors",
        f"  during fault windows (expected): {_counts(e['clean_in_fault_windows'])}",
        f"  clean, with no fault active (a failure): {_counts(e['clean_without_fault'])}",
        *[f"    {x}" for x in e["clean_without_fault_first"]],
        f"  reads over {lat['read_bound_s']:g} s with no fault active (a failure): "
        f"{lat['over_bound_count']}",
        *[f"    {x}" for x in lat["over_bound_without_fault"]],
        f"  unclean (a failure):             {len(e['unclean'])}",
        *[f"    {x}" for x in e["unclean"][:SHOWN]],
    ]
    subs = s.get("subscriptions") or {}
    if subs.get("streams"):
        out += ["", f"subscriptions (a stream whose LSN stands still over "
                f"{subs['gap_bound_s']:g} s with no fault active is a failure; heartbeats come "
                "every second)"]
        for x in subs["streams"]:
            worst = x["max_gap_without_fault_s"]
            out.append(
                f"  subscriber {x['subscriber']} ({x['view']}): its LSN moved {x['events']} "
                f"times in {x['streams']} stream(s), stood still at most {x['max_gap_s']:g} s, "
                f"{worst:g} s with no fault active"
                + (f" at {x['at_s']:g} s: FAIL" if worst > subs["gap_bound_s"] else ""))
    if s["faults"]:
        out += ["", "fault windows"]
        for f in s["faults"]:
            out.append(
                f"  {f['start']:6.1f}-{f['end']:6.1f} s  {f['mode']:<10} {f['reads_ok']} keys read "
                f"fine, errors: {_counts(f['errors'])}"
            )
        rec = s["recovery"]
        out.append(
            "  recovery: "
            + (
                "every key of every view read again after the faults were lifted"
                if not rec
                else "FAILED: " + "; ".join(rec[:SHOWN])
            )
        )
    elif s["recovery"]:
        out += ["", "final read of every key FAILED: " + "; ".join(s["recovery"][:SHOWN])]
    if s["planted"]:
        out += [
            "",
            f"self-test: a wrong answer was planted in {s['planted']} (--plant-wrong-answer); this "
            "run must FAIL",
        ]
    elif s["plant"]:
        out += ["", f"self-test: no read of {s['plant']} succeeded, so no wrong answer was planted"]
    if s["lsn_regressions"]:
        out += ["", "LSN went backwards for a client:", *[f"  {x}" for x in s["lsn_regressions"]]]
    out += [
        "",
        f"verification (Spark over the recorded write history: {v['spark_jobs']} jobs, "
        f"{v['snapshots']} snapshots, {v['seconds']} s)",
        f"  reads checked  {v['checked']} of "
        f"{r['keys'] + r['recovery_keys'] + r.get('subscription_keys', 0)}"
        + (f" ({r['subscription_keys']} of them keys rebuilt by subscribers)"
           if r.get("subscription_keys") else ""),
        f"  mismatches     {v['mismatches']}",
    ]
    for i, m in enumerate(v["first_mismatches"], 1):
        out += [
            (
                f"  MISMATCH {i}: view {m['view']} key {tuple(m['key'])!r} at LSN {m['lsn']} "
                f"(read at {m['at_second']} s by reader {m['reader']}, {m['call']}, fault: "
                f"{m['fault']})"
            ),
            f"    served:   {m['served']}",
            f"    expected: {m['expected']}",
        ]
    out.append(
        f"  lost writes    {lost['differences']} row differences between the tables and the "
        "acknowledged writes "
        f"(checked at LSN {', '.join(map(str, lost['checked_at_lsns'])) or '-'})"
    )
    out += [f"    {x}" for x in lost["first"]]
    steps = ", ".join(f"{k} {v:g} s" for k, v in s["phases_s"].items())
    out += ["", f"time taken: {steps}", "", "PASS" if s["passed"] else "FAIL"]
    return "\n".join(out)


def _tier_lines(t: dict[str, int] | None) -> list[str]:
    if not t:
        return []
    return [
        f"  disk tier  limit {t['limit']} bytes: {t['shelved']} keys shelved, "
        f"{t.get('read', 0)} read from it and {t['unshelved']} brought back (no upquery), "
        f"{t['evictions']} made holes at its "
        f"limit; {t['keys']} keys ({t['bytes']} bytes) shelved at the end"
        + ("; BROKEN (see the server's log): its keys became holes" if t["broken"] else "")
    ]


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(c.items())) or "none"


def _fmt_pct(p: dict[str, Any]) -> str:
    return " ".join(f"{k} {p[k]}" for k in ("p50", "p90", "p99") if k in p) or "-"
