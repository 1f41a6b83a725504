"""PNG plots from a results JSON (bench/run.py writes it; ``python bench/plots.py FILE``
redraws them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PCTS = [float(p) for p in range(101)] + [99.9]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(ax: Any, cdf: list[float] | None, label: str, **kw: Any) -> None:
    if not cdf:
        return
    pts = sorted(zip(cdf, PCTS, strict=True), key=lambda x: (x[1], x[0]))
    ax.plot([x for x, _ in pts], [p for _, p in pts], label=label, **kw)


def _finish(fig: Any, path: Path, title: str) -> None:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def hit_latency(res: dict, out: Path, stamp: str) -> Path | None:
    hit = res["sections"].get("hit_path")
    if not hit:
        return None
    plt = _plt()
    concs = sorted({r["concurrency"] for r in hit["runs"]})
    fig, axes = plt.subplots(1, len(concs), figsize=(6 * len(concs), 4.2), squeeze=False)
    for ax, conc in zip(axes[0], concs, strict=True):
        runs = [r for r in hit["runs"] if r["concurrency"] == conc]
        _cdf(ax, runs[0]["ping"]["cdf_ms"], "Ping (no-op RPC, single key's bytes)", color="black",
             lw=2)
        for r in runs:
            _cdf(ax, r["lookup"]["cdf_ms"], f"lookup, batch {r['batch']}")
        ax.set_xscale("log")
        ax.set_xlabel("latency per call (ms, log)")
        ax.set_ylabel("percentile")
        ax.set_title(f"{conc} concurrent client(s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    p = out / "latency_hit_path.png"
    _finish(fig, p, f"Hit path: lookups of filled keys vs a no-op gRPC call ({stamp})")
    return p


def miss_latency(res: dict, out: Path, stamp: str) -> Path | None:
    miss = res["sections"].get("miss_path")
    if not miss:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    labels, data = [], []
    for m in miss["cold"]:
        for name, key in (
            ("partialflow\ncold read", "cold_read_ms"),
            ("bare\nPySpark", "bare_spark_ms"),
        ):
            labels.append(f"{m['view']}\n{name}")
            s = m[key]
            data.append([s["min"], s["p50"], s["p90"], s["p99"], s["max"]])
    for i, d in enumerate(data):
        ax.plot([i, i], [d[0], d[-1]], color="gray")
        ax.plot(i, d[1], "o", color="C0" if i % 2 == 0 else "C1")
        ax.plot(i, d[2], "_", color="black", markersize=12)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("latency (ms): min-max, median (dot), p90 (dash)")
    ax.set_title("one cold read vs the same rows on bare Spark")
    ax.grid(alpha=0.3)
    ax = axes[1]
    names, one, many = [], [], []
    for c in miss["coalescing"]:
        names.append(c["view"])
        one.append(c["one_cold_read_ms"]["p50"])
        many.append(c["all_concurrent_done_ms"]["p50"])
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], one, width=0.4, label="1 cold read")
    ax.bar([x + 0.2 for x in xs], many, width=0.4,
           label=f"{miss['coalescing'][0]['fan']} concurrent cold reads (all done)")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("median wall time (ms)")
    ax.set_title("coalescing")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    p = out / "latency_miss_path.png"
    _finish(fig, p, f"Miss path ({stamp})")
    return p


def write_latency(res: dict, out: Path, stamp: str) -> Path | None:
    series = []
    for name in ("visits", "nexmark"):
        sec = res["sections"].get(f"writes_{name}")
        if sec and sec.get("half_peak"):
            series.append((name, sec["half_peak"]))
    if not series:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for name, h in series:
        _cdf(ax, h.get("write_ack_cdf_ms"), f"{name}: write acknowledged (durable)", ls="--")
        _cdf(ax, h.get("write_to_visible_cdf_ms"), f"{name}: visible in {h.get('probe_view')}")
        _cdf(ax, h.get("write_to_visible_avg_winning_cdf_ms"), f"{name}: visible in avg_winning")
    ax.set_xscale("log")
    ax.set_xlabel("ms after the write was sent (log)")
    ax.set_ylabel("percentile")
    ax.set_title("write-to-visible at half of peak load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    for name, h in series:
        for r in h.get("readers", []):
            _cdf(ax, r["cdf_ms"], f"{name}: {r['name']}")
    ax.set_xscale("log")
    ax.set_xlabel("read latency (ms, log)")
    ax.set_title("reads during the writes (Nexmark Q4)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    p = out / "latency_writes.png"
    _finish(fig, p, f"Writes ({stamp})")
    return p


def hit_rate(res: dict, out: Path, stamp: str) -> Path | None:
    mem = res["sections"].get("memory")
    if not mem or not mem.get("limits"):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    xs = [r["fraction"] * 100 for r in mem["limits"]] + [100]
    ax.plot(xs, [r["hit_rate"] for r in mem["limits"]] + [mem["full"]["zipf"]["hit_rate"]],
            "o-", label="measured")
    ax.plot(xs[:-1], [r["simulated_lru_hit_rate"] for r in mem["limits"]], "x--",
            label="LRU simulation (same prefill, keys)")
    ax.plot(xs[:-1], [r["ideal_static_hit_rate"] for r in mem["limits"]], ":",
            label="hottest keys that fit (static optimum)")
    ax.set_xscale("log")
    ax.set_xlabel("memory limit (% of the fully materialized view; 100 = no limit)")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Zipf(s={mem['zipf_s']}) over {mem['keys']:,} keys")
    ax = axes[1]
    names = [f"{r['fraction']:.0%}" for r in mem["limits"]] + ["full"]
    ys = [r["memory_bytes"] / 2**20 for r in mem["limits"]] + [mem["full"]["memory_bytes"] / 2**20]
    ax.bar(names, ys, color="C2")
    ax.set_ylabel("state size (MiB)")
    ax.set_yscale("log")
    ax.set_title("state size at the end of the run")
    ax.grid(alpha=0.3, axis="y")
    p = out / "hit_rate_vs_memory.png"
    _finish(fig, p, f"Hit rate and state size vs memory limit ({stamp})")
    return p


def throughput(res: dict, out: Path, stamp: str) -> Path | None:
    hit = res["sections"].get("hit_path")
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    drew = False
    if hit:
        ax = axes[0]
        for conc in sorted({r["concurrency"] for r in hit["runs"]}):
            runs = [r for r in hit["runs"] if r["concurrency"] == conc]
            ax.plot([r["batch"] for r in runs], [r["keys_per_s"] for r in runs], "o-",
                    label=f"keys/s, {conc} client(s)")
            ax.plot([r["batch"] for r in runs], [r["ping_calls_per_s"] for r in runs], ":",
                    label=f"Ping calls/s (same bytes as the batch), {conc} client(s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("keys per lookup_many call")
        ax.set_ylabel("per second")
        ax.set_title("lookups of filled keys")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        drew = True
    ax = axes[1]
    for name in ("visits", "nexmark"):
        sec = res["sections"].get(f"writes_{name}")
        if not sec:
            continue
        peak = sec["peak"]
        bs = [r["batch"] for r in peak]
        ax.plot(bs, [r["view"]["applied_rows_per_s"] for r in peak], "o-",
                label=f"{name}: through the view (applied)")
        ax.plot(bs, [r["plain"]["acked_rows_per_s"] for r in peak], "x:",
                label=f"{name}: table without views")
        drew = True
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows per write")
    ax.set_ylabel("durable rows/s")
    ax.set_title("writes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if not drew:
        return None
    p = out / "throughput_vs_batch.png"
    _finish(fig, p, f"Throughput vs batch size ({stamp})")
    return p


def zipf_latency(res: dict, out: Path, stamp: str) -> Path | None:
    mem = res["sections"].get("memory")
    if not mem:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for r in mem.get("limits", []):
        _cdf(ax, r["reads"]["cdf_ms"], f"limit {r['fraction']:.0%}")
    if mem.get("full", {}).get("zipf"):
        _cdf(ax, mem["full"]["zipf"]["reads"]["cdf_ms"], "full materialization")
    if mem.get("recompute"):
        _cdf(ax, mem["recompute"]["cdf_ms"], "recompute on Spark per request", color="black")
    ax.set_xscale("log")
    ax.set_xlabel("latency per request (ms, log)")
    ax.set_ylabel("percentile")
    ax.set_title("Zipf reads")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    rs = res["sections"].get("restart") or {}
    for name, color in (("warm", "tab:green"), ("cold", "tab:blue")):
        r = rs.get(name)
        if not r or not r.get("timeline"):
            continue
        label = "checkpoints on" if name == "warm" else "checkpoints off"
        ax.plot([t for t, _ in r["timeline"]], [h for _, h in r["timeline"]], ".-",
                color=color, label=f"hit rate, {label} (1 s windows)")
        ax.axvline(r["start_to_serving_s"], color=color, ls=":", label=f"SERVING ({label})")
        ax.axhline(r["target_hit_rate"], color="red", ls="--", label="target")
    if rs:
        ax.set_xlabel("seconds since process start")
        ax.set_ylabel("hit rate")
        ax.set_ylim(0, 1.02)
        ax.set_title("after a restart")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    p = out / "zipf_reads_and_restart.png"
    _finish(fig, p, f"Zipf reads vs recomputation; restart ({stamp})")
    return p


def stream_latency(res: dict, out: Path, stamp: str) -> Path | None:
    """Read latency (p50 solid, p99 dashed, max dotted) and write-to-visible against the
    write rate, one colour per view; failed reads are written next to their point, probes
    that all failed are drawn as crosses on the deadline."""
    st = res["sections"].get("stream")
    if not st or not st.get("phases"):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.6))
    views = list(dict.fromkeys(v for ph in st["phases"] for v in ph["views"]))
    colours = {v: f"C{i}" for i, v in enumerate(views)}
    deadline_ms = st["read_deadline_s"] * 1000
    ax = axes[0]
    for i, view in enumerate(views):
        phs = sorted((ph for ph in st["phases"] if view in ph["views"]), key=lambda p: p["rate"])
        xs = [ph["rate"] for ph in phs]
        lats = [ph["views"][view]["latency_ms"] for ph in phs]
        for key, style, label in (("p50", "o-", "p50"), ("p99", "s--", "p99"),
                                  ("max", ":", "max")):
            pts = [(x, lat[key]) for x, lat in zip(xs, lats, strict=True) if key in lat]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], style, color=colours[view],
                        label=f"{view} {label}", lw=1 if key == "max" else 1.5)
        for ph in phs:
            v = ph["views"][view]
            if v["errors"] and "p99" in v["latency_ms"]:
                ax.annotate(f"{v['errors']} failed", (ph["rate"], v["latency_ms"]["p99"]),
                            fontsize=7, color=colours[view], textcoords="offset points",
                            xytext=(-20, -12 - 9 * i))
    for ph in st["phases"]:
        if ph.get("label"):
            ax.axvline(ph["rate"], color="gray", ls=":", lw=0.8)
            ax.annotate(ph["label"], (ph["rate"], 0.02), xycoords=("data", "axes fraction"),
                        fontsize=7, rotation=90, color="gray")
    ax.axhline(1000, color="red", ls="--", lw=0.8, label="goal at 200 rows/s: p99 1 s")
    ax.axhline(2000, color="darkred", ls=":", lw=0.8, label="avg_winning at half peak: 2 s")
    ax.axhline(deadline_ms, color="black", lw=0.6, label="read deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("write rate (rows/s, open loop)")
    ax.set_ylabel("read latency (ms, log; failed reads count)")
    ax.set_title(f"reads by key, {st['readers_per_view']} clients per view")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    ax = axes[1]
    for i, view in enumerate(views):
        phs = sorted((ph for ph in st["phases"] if view in ph.get("write_to_visible", {})),
                     key=lambda p: p["rate"])
        for key, style in (("p50", "o-"), ("p99", "s--")):
            pts = [(ph["rate"], ph["write_to_visible"][view]["ms"][key]) for ph in phs
                   if key in ph["write_to_visible"][view]["ms"]]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], style, color=colours[view],
                        label=f"{view} {key}")
        for ph in phs:
            w = ph["write_to_visible"][view]
            if not w["failed"]:
                continue
            y = w["ms"].get("p99")
            if y is None:  # every probe failed
                y = deadline_ms
                ax.plot([ph["rate"]], [y], "x", color=colours[view], markersize=9)
            ax.annotate(f"{w['failed']} failed", (ph["rate"], y), fontsize=7,
                        color=colours[view], textcoords="offset points",
                        xytext=(-20, -12 - 9 * i))
    ax.axhline(deadline_ms, color="black", lw=0.6, label="read deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("write rate (rows/s, open loop)")
    ax.set_ylabel("write sent to visible (ms, log)")
    ax.set_title("write-to-visible (probe: lookup with min_lsn)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    p = out / "latency_stream.png"
    _finish(fig, p, f"Reads under a stream ({stamp})")
    return p


def subscribe_latency(res: dict, out: Path, stamp: str) -> Path | None:
    """CDFs of write-to-subscriber latency per rate, each with its writes' own
    acknowledgement (dashed) as the baseline."""
    sub = res["sections"].get("subscribe")
    if not sub or not sub.get("phases"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for i, ph in enumerate(sub["phases"]):
        held = ph["held"]
        _cdf(ax, ph["cdf_ms"], f"{ph['rate']:,.0f} rows/s: write to subscriber", color=f"C{i}",
             lw=2)
        _cdf(ax, ph["ack_cdf_ms"], f"{ph['rate']:,.0f} rows/s: write acknowledged",
             color=f"C{i}", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("latency from the write's call (ms, log)")
    ax.set_ylabel("percentile")
    ax.set_title(f"{held['subscriptions']} Subscribe streams of "
                 f"{sub['keys_per_subscription']} keys held", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    p = out / "latency_subscribe.png"
    _finish(fig, p, f"Subscriptions: write-to-subscriber latency ({stamp})")
    return p


def miss_scaling(res: dict, out: Path, name: str = "miss_scaling", title: str = "") -> Path:
    """Miss p50/p99 against table size, per phase (bench/miss_scaling.py --plot): quiet
    unclustered, quiet clustered, and clustered with a write stream, flushes and compaction;
    right, the compressed MB a miss's key filter can touch (stats()' footer estimate)."""
    plt = _plt()
    runs = res["runs"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    styles = {"unclustered": ("C3", "quiet, unclustered"),
              "clustered": ("C0", "quiet, clustered by k"),
              "live": ("C2", "clustered + writes, flushes, compaction")}
    for phase, (color, label) in styles.items():
        pts = [(r["rows"], p) for r in runs for p in r["phases"] if p["phase"] == phase]
        if not pts:
            continue
        xs = [x for x, _ in pts]
        axes[0].plot(xs, [p["p50_ms"] for _, p in pts], "o-", color=color, label=f"{label} p50")
        axes[0].plot(xs, [p["p99_ms"] for _, p in pts], "x--", color=color, alpha=0.6,
                     label=f"{label} p99")
        axes[1].plot(xs, [max(p["mb_scanned"], 1e-3) for _, p in pts], "o-", color=color,
                     label=label)
    base = [p for p in runs[0]["phases"] if p["phase"] == "live"]
    if base:
        x = [r["rows"] for r in runs]
        axes[0].plot(x, [2 * base[0]["p50_ms"]] * len(x), ":", color="black",
                     label="goal: 2x live p50 at the smallest size")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("rows in the table (log)")
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("miss latency (ms, log)")
    axes[0].set_title("miss latency (each read a new key: one upquery)")
    axes[0].legend(fontsize=6)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("MB a miss can touch (footer estimate, log)")
    axes[1].set_title("per-miss scan footprint (stats()['upquery_scan'])")
    axes[1].legend(fontsize=6)
    def load(r: dict) -> str:  # the 1-minute load average over the run's measurements
        xs = [x for p in r["phases"] for x in (p["loadavg_start"][0], p["loadavg_end"][0])]
        return f"{r['rows'] / 1e6:g}M at load {min(xs):g}–{max(xs):g}"

    la = ", ".join(load(r) for r in runs)
    stamp = f"{runs[0]['machine']['date'][:10]}, {runs[0]['machine']['cores']} cores; {la}"
    p = out / f"{name}.png"
    _finish(fig, p, f"Miss cost against table size{': ' + title if title else ''}\n({stamp})")
    return p


def draw_all(res: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stamp = f"{res['meta']['date']}{', quick' if res['config'].get('quick') else ''}"
    made = []
    for fn in (hit_latency, miss_latency, write_latency, hit_rate, throughput, zipf_latency,
               stream_latency, subscribe_latency):
        try:
            p = fn(res, out, stamp)
        except Exception as e:  # a missing section must not lose the other plots
            print(f"plot {fn.__name__} failed: {e!r}", file=sys.stderr)
            continue
        if p is not None:
            made.append(p)
    return made


if __name__ == "__main__":
    f = Path(sys.argv[1])
    for p in draw_all(json.loads(f.read_text()), f.parent):
        print(p)
