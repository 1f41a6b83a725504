"""bench/peers.py's section as text: writes, reads, exactness, caveats. Figures of an
engine whose answers were wrong carry a ``*``.

    python bench/peers_report.py RESULTS.json   # the Markdown tables of docs/benchmarks.md
"""

from __future__ import annotations

from typing import Any

WORKLOADS = {"visit": "visits view", "bid": "Nexmark Q4"}


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x < 100:
        return f"{x:.3g}"
    return f"{x:,.0f}"


def _mark(e: dict) -> str:
    return "" if e.get("exactness", {}).get("exact", True) else "*"


def render(sec: dict) -> str:
    engines = sec["engines"]
    pf = engines.get("partialflow", {})
    others = [(n, e) for n, e in engines.items() if n != "partialflow" and "phases" in e]
    lines = [
        "",
        f"Peers: the seed views on the same rows, engines one after another; load average "
        f"{sec['loadavg']['start']} at the start, {sec['loadavg']['end']} at the end "
        "(the machine is shared)",
        "",
        "Writes, rows/s (ratio to partialflow end to end / to its executor alone):",
    ]
    head = f"{'workload':<12}{'batch':>7}{'pf end to end':>15}{'pf executor':>13}" \
           f"{'pf per exec CPU s':>19}"
    for n, _ in others:
        head += f"  {n:>34}"
    lines.append(head)
    for i, p in enumerate(pf.get("phases", [])):
        row = (f"{WORKLOADS[p['table']]:<12}{p['batch']:>7}{_fmt(p['rows_per_s']):>15}"
               f"{_fmt(p['executor_rows_per_s']):>13}{_fmt(p['rows_per_executor_cpu_s']):>19}")
        for _, e in others:
            q = e["phases"][i]
            cell = (f"{_fmt(q['rows_per_s'])}{_mark(e)} ({q['rows_per_s'] / p['rows_per_s']:.2f}x"
                    f" / {q['rows_per_s'] / p['executor_rows_per_s']:.2f}x)")
            row += f"  {cell:>34}"
        lines.append(row)
    pw = [(n, e) for n, e in others if "rows_per_worker_cpu_s" in e["phases"][0]]
    for n, e in pw:
        cells = ", ".join(
            f"{WORKLOADS[q['table']]} x{q['batch']}: {_fmt(q['rows_per_worker_cpu_s'])}"
            f" ({_ratio(q['rows_per_worker_cpu_s'], p['rows_per_executor_cpu_s'])})"
            for q, p in zip(e["phases"], pf.get("phases", []), strict=False))
        lines.append(f"{n}, rows per worker CPU s (ratio to pf per executor CPU s): {cells}")
    for item in sec.get("small_writes", []):
        g = item["goal"]
        lines.append(f"goal: {g['text']} (Pathway exact): {g['value']}, "
                     f"{'met' if g['met'] else 'NOT met'}")
    lines += ["", "Reads by key, latency ms p50 / p99 (ratio to partialflow's p50 / p99):"]
    lines.append(f"{'view':<13}{'partialflow (gRPC client)':>28}  "
                 + "  ".join(f"{n:>34}" for n, e in others if e.get("reads")))
    for view, b in pf.get("reads", {}).items():
        row = f"{view:<13}{b['p50_ms']:>12} / {b['p99_ms']:<13}"
        for _, e in others:
            r = e.get("reads", {}).get(view)
            if r:
                p50, p99 = _ratio(r["p50_ms"], b["p50_ms"]), _ratio(r["p99_ms"], b["p99_ms"])
                cell = f"{r['p50_ms']}{_mark(e)} / {r['p99_ms']} ({p50} / {p99})"
                row += f"  {cell:>34}"
        lines.append(row)
    lines += ["", "Exactness against SQLite over the same final base rows:"]
    for n, e in engines.items():
        if "exactness" in e:
            x = e["exactness"]
            verdict = "exact" if x["exact"] else (
                f"WRONG: {x['mismatches']} mismatches, e.g. "
                + "; ".join(f"{v}[{k!r}] = {g!r}, want {w!r}" for v, k, g, w in x["examples"][:3]))
            lines.append(f"  {n}: {verdict}")
        else:
            lines.append(f"  {n}: not run ({e.get('skipped') or e.get('error')})")
    if any(not e.get("exactness", {}).get("exact", True) for e in engines.values()):
        lines.append("  * figures of an engine that answered wrong")
    lines += ["", "Caveats:"] + [f"  - {c}" for c in sec["caveats"]]
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def markdown(sec: dict, meta: dict) -> str:
    """The section's tables for docs/benchmarks.md."""
    engines = sec["engines"]
    pf = engines["partialflow"]
    pg = engines.get("postgresql", {})
    pws = [(n, e) for n, e in engines.items() if n.startswith("pathway") and "phases" in e]
    out = [f"Measured {meta['date']} at {meta['commit']} ({meta['cores']} cores, "
           f"{meta['memory_gib']} GiB, Python {meta['python']}, PostgreSQL "
           f"{pg.get('version', '-').split()[0]}, Pathway "
           f"{pws[0][1]['pathway'] if pws else '-'} with 1 worker thread); load average "
           f"{sec['loadavg']['start'][0]} at the start of the section, "
           f"{sec['loadavg']['end'][0]} at its end.", ""]
    head = ["workload", "rows per write", "partialflow end to end", "partialflow executor alone",
            "partialflow per executor CPU s"]
    if pg.get("phases"):
        head.append("PostgreSQL (x pf end to end)")
    for n, _ in pws:
        head.append(f"{n.replace('pathway', 'Pathway')} (x pf executor)")
    out += ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for i, p in enumerate(pf["phases"]):
        cells = [WORKLOADS[p["table"]], f"{p['batch']:,}", _fmt(p["rows_per_s"]),
                 _fmt(p["executor_rows_per_s"]), _fmt(p["rows_per_executor_cpu_s"])]
        if pg.get("phases"):
            q = pg["phases"][i]["rows_per_s"]
            cells.append(f"{_fmt(q)} ({_ratio(q, p['rows_per_s'])})")
        for _, e in pws:
            q = e["phases"][i]["rows_per_s"]
            cells.append(f"{_fmt(q)}{_mark(e)} ({_ratio(q, p['executor_rows_per_s'])})")
        out.append("| " + " | ".join(cells) + " |")
    if pws:
        out += ["", "Per second of engine CPU (partialflow's executor thread, Pathway's worker "
                "thread), rows:", "",
                "| workload | rows per write | partialflow | "
                + " | ".join(n.replace("pathway", "Pathway") for n, _ in pws) + " |",
                "| --- |" + " ---: |" * (2 + len(pws))]
        for i, p in enumerate(pf["phases"]):
            cells = [WORKLOADS[p["table"]], f"{p['batch']:,}", _fmt(p["rows_per_executor_cpu_s"])]
            for _, e in pws:
                q = e["phases"][i]["rows_per_worker_cpu_s"]
                cells.append(f"{_fmt(q)}{_mark(e)} ({_ratio(q, p['rows_per_executor_cpu_s'])})")
            out.append("| " + " | ".join(cells) + " |")
    if pg.get("reads"):
        out += ["", "| view read by key | partialflow p50 / p99 ms | PostgreSQL p50 / p99 ms "
                "| PostgreSQL / partialflow |", "| --- | ---: | ---: | ---: |"]
        for view, b in pf["reads"].items():
            r = pg["reads"][view]
            out.append(f"| `{view}` | {b['p50_ms']} / {b['p99_ms']} | {r['p50_ms']} / "
                       f"{r['p99_ms']} | {_ratio(r['p50_ms'], b['p50_ms'])} / "
                       f"{_ratio(r['p99_ms'], b['p99_ms'])} |")
    out += ["", "Exactness, against SQLite running the views' SQL over the same final base "
            "rows:", ""]
    for n, e in engines.items():
        x = e.get("exactness")
        if x is None:
            out.append(f"- {n}: not run ({e.get('skipped') or e.get('error')})")
        elif x["exact"]:
            out.append(f"- {n}: exact")
        else:
            ex = "; ".join(f"`{v}` key {k!r}: {g!r}, want {w!r}" for v, k, g, w in
                           x["examples"][:2])
            out.append(f"- {n}: **wrong**, {x['mismatches']} mismatches (e.g. {ex}); its "
                       "figures carry a `*`")
    return "\n".join(out)


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    res = json.loads(Path(sys.argv[1]).read_text())
    print(markdown(res["sections"]["peers"], res["meta"]))
