"""The benchmark table of docs/benchmarks.md from a results JSON.

    python bench/report.py FILE
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any


def _ms(d: dict | None, key: str = "p50") -> str:
    if not d or key not in d:
        return "–"
    v = d[key]
    return f"{v:,.0f} ms" if v >= 100 else f"{v:.2f} ms" if v < 10 else f"{v:.1f} ms"


WRITE_GOAL = 0.7


def _cpu(side: dict) -> str:
    """CPU per row of a write run, when the run recorded it (bench/write_path.py)."""
    parts = [f"{name} {side[key]} us" for name, key in (
        ("machine", "machine_us_per_row"), ("server", "server_us_per_row"),
        ("executor", "executor_us_per_row")) if side.get(key) is not None]
    busy = side.get("machine_busy_fraction")
    cores = f" (cores {busy:.0%} busy)" if busy is not None else ""
    return f"; CPU per row: {', '.join(parts)}{cores}" if parts else ""


def _mib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**20:,.1f} MiB"


def _met(ok: bool | None) -> str:
    return "–" if ok is None else ("**yes**" if ok else "**no**")


def rows(res: dict) -> list[tuple[str, str, str, str]]:
    s = res["sections"]
    out: list[tuple[str, str, str, str]] = []
    hit = s.get("hit_path")
    if hit:
        for r in hit["runs"]:
            if r["batch"] != 1:
                continue
            ok = max(r["slowdown_calls"], r["slowdown_p50"], r["slowdown_p99"]) <= 1.5
            out.append(
                (
                    f"Hit path, single key, {r['concurrency']} client(s): within 1.5x of Ping",
                    f"{r['lookup']['calls_per_s']:,.0f} lookups/s, p50 "
                    f"{_ms(r['lookup']['latency_ms'])}, "
                    f"p99 {_ms(r['lookup']['latency_ms'], 'p99')}",
                    f"Ping {r['ping_calls_per_s']:,.0f}/s: x{r['slowdown_calls']} calls/s, "
                    f"x{r['slowdown_p50']} p50, x{r['slowdown_p99']} p99",
                    _met(ok),
                )
            )
        goals = {(1, 1000): 100_000, (8, 1000): 200_000}  # keys/s
        for r in hit["runs"]:
            if r["batch"] == 1:
                continue
            want = goals.get((r["concurrency"], r["batch"]))
            lat = r["lookup"]["latency_ms"]
            out.append((
                f"Hit path, lookup_many of {r['batch']}, {r['concurrency']} client(s)"
                + (f": >= {want // 1000}k keys/s" if want else ""),
                f"{r['keys_per_s']:,.0f} keys/s ({r['lookup']['calls_per_s']:,.0f} calls/s), "
                f"p50 {_ms(lat)}, p99 {_ms(lat, 'p99')}",
                f"Ping moving the same bytes ({r.get('request_bytes', 0):,} + "
                f"{r.get('answer_bytes', 0):,}): x{r['slowdown_calls']} calls/s, "
                f"x{r['slowdown_p50']} p50, x{r['slowdown_p99']} p99",
                _met(r["keys_per_s"] >= want if want else None)))
    miss = s.get("miss_path")
    if miss:
        for m in miss.get("cold", []):
            out.append((
                f"Miss path ({m['view']}{', ' + m['label'] if m.get('label') else ''}): "
                "cold read at most 1.3x bare PySpark",
                f"p50 {_ms(m['cold_read_ms'])}, p90 {_ms(m['cold_read_ms'], 'p90')}",
                f"bare Spark p50 {_ms(m['bare_spark_ms'])}: x{m['slowdown_p50']}"
                + (f"; {m['rows_differ']} answers DIFFER" if m["rows_differ"] else "; same rows"),
                _met(m["goal"]["met"])))
        for c in miss.get("coalescing", []):
            out.append((
                f"Coalescing ({c['view']}): {c['fan']} concurrent cold reads at most 2x one",
                f"all done after p50 {_ms(c['all_concurrent_done_ms'])} "
                f"({c['upqueries_per_batch'][0]} upqueries)",
                f"one cold read p50 {_ms(c['one_cold_read_ms'])}: x{c['slowdown']}",
                _met(c["goal"]["met"])))
    for name, label in (("visits", "visits view"), ("nexmark", "Nexmark Q4")):
        w = s.get(f"writes_{name}")
        if not w:
            continue
        for r in w.get("peak", []):
            # The goal: applied rows through the view >= 0.7x the plain rate at 100
            # and 1000 rows per write.
            goal = (_met(r["view_vs_plain"] >= WRITE_GOAL) + f" (goal x{WRITE_GOAL})"
                    if r["batch"] in (100, 1000) else "no goal")
            out.append(
                (
                    f"Writes through the {label}, {r['batch']} row(s) per write, {r['writers']} "
                    "writers",
                    f"{r['view']['acked_rows_per_s']:,.0f} rows/s acknowledged, "
                    f"{r['view']['applied_rows_per_s']:,.0f} applied" + _cpu(r["view"]),
                    f"same rows into tables no view reads: {r['plain']['acked_rows_per_s']:,.0f} "
                    "rows/s" + _cpu(r["plain"]) + f" (x{r['view_vs_plain']})",
                    goal,
                )
            )
        for r in w.get("peak_prefetch_off", []):
            out.append(
                (
                    f"Writes through the {label} with `--index-prefetch off`, {r['batch']} rows "
                    "per write",
                    f"{r['view']['applied_rows_per_s']:,.0f} rows/s applied" + _cpu(r["view"])
                    + f"; state after the fill {_mib(w.get('memory_after_fill_prefetch_off'))} "
                    f"(prefetch on: {_mib(w.get('memory_after_fill'))})",
                    f"plain: {r['plain']['acked_rows_per_s']:,.0f} rows/s (x{r['view_vs_plain']})",
                    "no goal (the default is on)",
                )
            )
        h = w.get("half_peak")
        if h:
            vis = h.get("write_to_visible_ms") or {}
            extra = ""
            if h.get("write_to_visible_avg_winning_ms"):
                a = h["write_to_visible_avg_winning_ms"]
                extra = f"; in avg_winning p50 {_ms(a)} (n={a.get('n')})"
            out.append(
                (
                    f"Write-to-visible, {label}, half of peak ({h['target_rows_per_s']:,} rows/s "
                    "target)",
                    f"visible in {h.get('probe_view')}: p50 {_ms(vis)}, p99 "
                    f"{_ms(vis, 'p99')}{extra}",
                    f"write acknowledged: p50 {_ms(h.get('write_ack_ms'))}, p99 "
                    f"{_ms(h.get('write_ack_ms'), 'p99')}; achieved {h['acked_rows_per_s']:,.0f} "
                    "rows/s",
                    "no goal",
                )
            )
            for r in h.get("readers", []):
                out.append((
                    f"Nexmark readers during the writes: {r['name']}",
                    f"{r['reads_per_s']:,.1f} reads/s, p50 {_ms(r['latency_ms'])}, "
                    f"p99 {_ms(r['latency_ms'], 'p99')}", "", "no goal"))
        chk = w.get("check")
        if chk:
            out.append((f"{label}: view answers = Spark SQL at their LSN after the run",
                        f"{chk['checked'] - len(chk['wrong'])} of {chk['checked']} keys right",
                        "Client.query(as_of=lsn)", _met(not chk["wrong"])))
    out.extend(stream_rows(s.get("stream")))
    out.extend(subscribe_rows(s.get("subscribe")))
    out.extend(checkpoint_rows(s.get("checkpoints")))
    mem = s.get("memory")
    if mem:
        full = mem.get("full", {})
        for r in mem.get("limits", []):
            out.append((
                f"Zipf({mem['zipf_s']}) reads over {mem['keys']:,} keys, memory limit "
                f"{r['fraction']:.0%} of the full view",
                f"hit rate {r['hit_rate']:.3f}, state {r['memory_bytes'] / 2**20:,.1f} MiB, "
                f"{r['reads']['items_per_s']:,.0f} keys/s, p50 {_ms(r['reads']['latency_ms'])}",
                f"full: hit rate {full.get('zipf', {}).get('hit_rate')}, "
                f"{full.get('memory_bytes', 0) / 2**20:,.0f} MiB (x{r['state_vs_full']}); "
                f"LRU simulation {r['simulated_lru_hit_rate']}", "no goal"))
        if full:
            z = full.get("zipf", {})
            out.append(
                (
                    f"Full materialization of {full['keys']:,} keys (read once each, no limit)",
                    f"{full['memory_bytes'] / 2**20:,.0f} MiB ({full['bytes_per_key']} B/key), "
                    "filled "
                    f"in {full['seconds']:,.0f} s; Zipf reads "
                    f"{z.get('reads', {}).get('items_per_s', 0):,.0f} keys/s",
                    f"hit rate {z.get('hit_rate')}",
                    "no goal",
                )
            )
        rec = mem.get("recompute")
        if rec:
            best = max(mem.get("vs_recompute", []), key=lambda x: x["speedup_keys_per_s"] or 0,
                       default=None)
            worst = min(mem.get("vs_recompute", []), key=lambda x: x["speedup_keys_per_s"] or 0,
                        default=None)
            out.append((
                "Recomputation: the view's SQL on Spark per request (same Zipf reads)",
                f"{rec['calls_per_s']:,.1f} reads/s, p50 {_ms(rec['latency_ms'])}, "
                f"p99 {_ms(rec['latency_ms'], 'p99')}",
                (f"partialflow x{worst['speedup_keys_per_s']} ({worst['config']}) to "
                 f"x{best['speedup_keys_per_s']} ({best['config']}) keys/s")
                if best and worst else "",
                "no goal"))
    rs = s.get("restart")
    for name in ("warm", "cold"):
        r = (rs or {}).get(name)
        if not r:
            continue
        how = "checkpoints on (default)" if name == "warm" else "checkpoints off"
        out.append((
            f"Restart, {how} (20% limit): process start to first answered read",
            f"{r['start_to_first_read_s']} s (SERVING after {r['start_to_serving_s']} s)",
            "includes the JVM and Spark start", "no goal"))
        reached = r.get("serving_to_target_hit_rate_s")
        tl = r.get("timeline") or []
        goal = "within 5 s of SERVING" if name == "warm" else "no goal (the baseline)"
        out.append((
            f"Restart, {how}: to 90% of the pre-restart hit rate ({r['target_hit_rate']}), "
            f"{goal}",
            f"{reached} s after SERVING" if reached is not None else
            f"not reached in {tl[-1][0] if tl else '?'} s (last window {tl[-1][1] if tl else '?'})",
            f"pre-restart hit rate {rs.get('pre_restart_hit_rate')}"
            + (f"; {r['recovery'].get('recovered_keys', 0):,} keys restored in "
               f"{r['recovery'].get('recovery_s', '?')} s" if r.get("recovery") else ""),
            ("**yes**" if reached is not None and reached <= 5 else "**no**")
            if name == "warm" else "no goal"))
    return out


def checkpoint_rows(ck: dict | None) -> list[tuple[str, str, str, str]]:
    """Checkpoints: bytes at 1% churn against the state, recovery per size, write cost."""
    if not ck:
        return []
    out = []
    for r in ck.get("sizes", []):
        out.append((
            f"Checkpoint of {r['keys']:,} keys ({r['state_bytes'] / 2**20:.1f} MiB of state): "
            "bytes after 1% key churn scale with the churn",
            f"full {r['full_bytes'] / 2**20:.2f} MiB in {r['full_s']} s; after "
            f"{r['churn_keys']:,} keys changed {r['incremental_bytes'] / 2**10:.1f} KiB in "
            f"{r['incremental_s']} s ({r['incremental_vs_full']} of full)",
            f"recovery {r['recovery_s']} s ({r['recovered_keys']:,} keys restored, "
            f"{r['replayed_writes']} writes replayed); then {r['first_reads_misses']} misses",
            _met(r["incremental_vs_full"] is not None and r["incremental_vs_full"] <= 0.05)))
    writes = ck.get("writes") or []
    for w in writes if isinstance(writes, list) else [writes]:
        default = w["interval_s"] == 10
        out.append((
            f"Writes through max_visit with checkpoints every {w['interval_s']:g} s vs off "
            f"({w['batch']} rows/write, {w['writers']} writers; "
            + ("goal >= 0.9x)" if default else "no goal: 10x the default)"),
            f"{w['on_rows_per_s']:,.0f} vs {w['off_rows_per_s']:,.0f} rows/s: "
            f"x{w['on_vs_off']}",
            f"{w['checkpoints_taken']} checkpoints taken; {w['rounds']} rounds, order rotated",
            _met(w["on_vs_off"] is not None and w["on_vs_off"] >= 0.9) if default
            else "no goal"))
    return out


def stream_rows(st: dict | None) -> list[tuple[str, str, str, str]]:
    """Reads under a stream: one row per view and write rate; the goals that apply to it
    (no failed reads everywhere, p99 <= 1 s at 200 rows/s, avg_winning p99 <= 2 s at half
    of peak) decide the met column."""
    if not st:
        return []
    out = []
    for ph in st.get("phases", []):
        w = ph["writer"]
        rate = f"{ph['rate']:,.0f} rows/s" + (f" ({ph['label']})" if ph.get("label") else "")
        for view, v in ph["views"].items():
            lat = v["latency_ms"]
            goal = ["no failed reads"]
            ok = v["errors"] == 0
            if ph["rate"] == 200 and not ph.get("label"):
                goal.append("p99 <= 1 s")
                ok = ok and lat.get("p99") is not None and lat["p99"] <= 1000
            if ph.get("label") == "half of peak" and view == "avg_winning":
                goal.append("p99 <= 2 s")
                ok = ok and lat.get("p99") is not None and lat["p99"] <= 2000
            errs = f"{v['errors']} failed"
            if v["errors"] and v.get("error_samples"):
                errs += f" ({v['error_samples'][0].split(':')[0]})"
            vis = ph.get("write_to_visible", {}).get(view)
            vis_s = (f"write-to-visible p50 {_ms(vis['ms'])}, p99 {_ms(vis['ms'], 'p99')}"
                     + (f", {vis['failed']} probes failed" if vis["failed"] else "")
                     if vis else "write-to-visible not probed in this view")
            out.append((
                f"Reads under a stream: {view}, {rate}, {v['readers']} readers ("
                + ", ".join(goal) + ")",
                f"{v['reads_per_s']:,.1f} reads/s, p50 {_ms(lat)}, p99 {_ms(lat, 'p99')}, "
                f"max {_ms(lat, 'max')}; {errs}",
                f"{vis_s}; writes acknowledged {w['acked_rows_per_s']:,.0f} rows/s"
                + ("" if w.get("kept_up", True) else
                   f" (server did not keep up: ack p50 {_ms(w['ack_from_schedule_ms'])} after "
                   "the scheduled send)")
                + (f", {w['errors']} write errors" if w["errors"] else ""),
                _met(ok)))
    for name, chk in st.get("checks", {}).items():
        out.append((f"Reads under a stream ({name.replace('_', ' ')}): view answers = Spark "
                    "SQL at their LSN",
                    f"{chk['checked'] - len(chk['wrong'])} of {chk['checked']} answers right",
                    "Client.query(as_of=lsn)", _met(not chk["wrong"])))
    return out


def subscribe_rows(sub: dict | None) -> list[tuple[str, str, str, str]]:
    """Subscriptions: write-to-subscriber latency per rate with the streams held (
    sets no latency goal), and whether every write reached its subscribers."""
    if not sub:
        return []
    out = []
    for ph in sub.get("phases", []):
        lat, ack, held = ph["latency_ms"], ph["write_ack_ms"], ph["held"]
        out.append((
            f"Write-to-subscriber, {ph['rate']:,.0f} rows/s ({ph['rows_per_write']} row(s) per "
            f"write), {held['subscriptions']} Subscribe streams held "
            f"({held['subscribed_keys']:,} keys)",
            f"p50 {_ms(lat)}, p99 {_ms(lat, 'p99')}, max {_ms(lat, 'max')} "
            f"({ph['deliveries']:,} deliveries, {ph['lost']} lost)",
            f"the write's own acknowledgement: p50 {_ms(ack)}, p99 {_ms(ack, 'p99')}; "
            f"{ph['acked_rows_per_s']:,.0f} rows/s acknowledged",
            "no goal" if not ph["lost"] and not ph["error_count"] else "**no** (lost)"))
    if sub.get("phases"):
        out.append((
            "Subscribe streams held at once (the server's limit: half of --workers)",
            f"{max(p['held']['subscriptions'] for p in sub['phases'])} of "
            f"{sub.get('stream_limit', '?')} allowed",
            f"{sub['keys_per_subscription']} keys each; opened in "
            f"{max(p['opened_s'] for p in sub['phases'])} s at most", "no goal"))
    return out


def markdown(res: dict) -> str:
    lines = ["| what (goal) | measured | baseline, same process and data | met |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(res)]
    return "\n".join(lines)


PLOTS = [
    ("latency_hit_path.png", "hit path latency"),
    ("latency_miss_path.png", "miss path latency"),
    ("hit_rate_vs_memory.png", "hit rate against memory limit"),
    ("throughput_vs_batch.png", "throughput against batch size"),
    ("latency_writes.png", "write-to-visible latency"),
    ("latency_stream.png", "read latency against write rate, reads under a stream"),
    ("latency_subscribe.png", "write-to-subscriber latency"),
    ("zipf_reads_and_restart.png", "Zipf reads and restart"),
]


def _run_date(run: str) -> str:
    """``results-20261126-091404.json`` -> ``2026-11-26 09:14 UTC``."""
    m = re.search(r"(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})", run)
    return f"{m[1]}-{m[2]}-{m[3]} {m[4]}:{m[5]} UTC" if m else run


def provenance(res: dict) -> str:
    """Where every section's figures come from: the machine, then per section the run's
    date, commit and load average (a published file may join sections of several runs)."""
    m = res["meta"]
    machine = (f"{m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, "
               f"PySpark {m['pyspark']}, {m['java']}, {m.get('platform', '')}")
    lines = [f"Machine: {machine}.", "",
             "| sections | measured | commit | load average at the start, at the end |",
             "| --- | --- | --- | --- |"]
    covered: set[str] = set()
    for names, src in m.get("sections_from", {}).items():
        covered.update(n.strip() for n in names.split(","))
        lines.append(f"| {names} | {_run_date(src['run'])} | {src['commit']} | "
                     f"{src['loadavg_at_start'][0]}, {src['loadavg_at_end'][0]} |")
    rest = [n for n in res["sections"] if n not in covered]
    if rest:
        lines.append(f"| {', '.join(rest)} | {m['date']} | {m['commit']} | "
                     f"{m['loadavg_at_start'][0]}, {(m.get('loadavg_at_end') or ['?'])[0]} |")
    return "\n".join(lines)


def page(res: dict, plot_dir: str = "benchmarks") -> str:
    """The benchmarks page's generated part: provenance, the table, the plots."""
    plots = [f"![{alt}]({plot_dir}/{name})" for name, alt in PLOTS]
    return "\n\n".join([provenance(res), markdown(res), "\n".join(plots)])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="The benchmark table of docs/benchmarks.md from a results JSON."
    )
    parser.add_argument("results", type=Path, help="a results-*.json written by bench/run.py")
    args = parser.parse_args(argv[1:])
    res: Any = json.loads(args.results.read_text())
    m = res["meta"]
    print(f"{m['date']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, "
          f"PySpark {m['pyspark']}, {m['java']}; load average {m['loadavg_at_start']} at the "
          f"start, {m.get('loadavg_at_end')} at the end; commit {m['commit']}\n")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
