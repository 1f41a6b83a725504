"""Miss cost against table size: quiet, and with writes, flushes and compaction going on
(docs/benchmarks.md, "Misses as tables grow"). Not run in CI.

Builds a table ``events(k BIGINT, v BIGINT, pad TEXT)`` of ``--rows`` rows with keys in
random order (Parquet files written here with numpy/pyarrow, ``--file-rows`` rows each,
bulk-loaded through the server), then measures misses of a keyed view (every read is a
key never read before, answered by an upquery) in up to three phases:

1. ``unclustered`` (quiet): the table is compacted before any view exists, so the merged
   segment is in arrival order. Skipped with ``--skip-unclustered`` (a 50M-row table then
   needs one compaction instead of two).
2. ``clustered`` (quiet): the view keys on ``k``, so compaction sorts the segment by ``k``
   (row groups of ``--row-group-rows``); no writes, flushes or compactions while measuring.
3. ``live``: a writer process streams inserts through the Python client at ``--write-rate``
   rows/s (a batch every ``--write-every`` s, random keys over the whole key space); the
   server flushes on its normal schedule (``--flush-interval``, 1 s by default) and its
   background compactor runs past ``--max-segments`` segments; after ``--compact-after``
   live misses the harness also calls ``compact('events')`` as a user's maintenance would
   and keeps measuring until that compaction has finished and ``--live-misses`` misses are
   done (at most ``--live-seconds``). Each miss records whether a compaction ran during it.

For each phase it reports p50/p99 miss latency, the per-miss footprint that stats()
reports (row groups and compressed bytes the key filter cannot skip, estimated from the
Parquet footers; not Spark's input metrics), the load average at the start and end, and
for the live phase the write rate achieved. Afterwards ``--check`` answers per phase are
compared with Spark SQL over the base tables at the answer's LSN (``query(as_of=lsn)``).

    .venv/bin/python bench/miss_scaling.py --rows 1000000 --json /tmp/ms-1m.json
    .venv/bin/python bench/miss_scaling.py --rows 50000000 --skip-unclustered --dir /bigdisk/ms

``--plot FILE...`` merges such JSON files into bench/published/NAME.json and draws
bench/published/NAME.png (p50/p99 per phase against table size; NAME is ``--plot-name``,
miss_scaling by default) and prints the table of docs/benchmarks.md.

"Cold" means the key is not in the view's state, not that the disk is cold: the OS page
cache is warm.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import BENCH, InProcServer, loadavg, log, machine, pct

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = ? GROUP BY k"
CHECK = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = {k} GROUP BY k"
PUBLISHED = BENCH / "published"


def write_files(root: Path, rows: int, keys: int, file_rows: int, seed: int) -> list[Path]:
    """Parquet files of random (k, v, pad) rows, keys uniform in [0, keys)."""
    rng = np.random.default_rng(seed)
    files = []
    for i, start in enumerate(range(0, rows, file_rows)):
        n = min(file_rows, rows - start)
        k = rng.integers(0, keys, n, dtype=np.int64)
        v = rng.integers(0, 1000, n, dtype=np.int64)
        pad = pa.array(np.char.add("p", (k % 97).astype(str)))
        path = root / f"events-{i:04d}.parquet"
        pq.write_table(pa.table({"k": k, "v": v, "pad": pad}), path)
        files.append(path)
    return files


# -- the write stream (a separate process, so its client does not share the server's GIL) --

def writer(address: str, rate: float, every: float, keys: int, seed: int, stop: Any,
           out: Any) -> None:
    """Insert ``rate * every`` random rows every ``every`` s until ``stop`` is set; put the
    rows written, elapsed seconds, insert latencies and the largest lag behind schedule."""
    from partialflow.client import Client

    rng = random.Random(seed)
    batch = max(1, round(rate * every))
    lat: list[float] = []
    rows = errors = 0
    lag = 0.0
    with Client(address, timeout=120) as c:
        t0 = time.monotonic()
        i = 0
        while not stop.is_set():
            due = t0 + i * every
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            else:
                lag = max(lag, now - due)
            recs = [(rng.randrange(keys), rng.randrange(1000), "w") for _ in range(batch)]
            t = time.perf_counter()
            try:
                c.insert("events", recs)
                rows += batch
            except Exception:  # noqa: BLE001 - counted and reported
                errors += 1
            lat.append(time.perf_counter() - t)
            i += 1
        elapsed = time.monotonic() - t0
    out.put({"rows": rows, "elapsed_s": elapsed, "errors": errors, "lat": lat,
             "max_lag_s": lag, "batch": batch})


class Compactor(threading.Thread):
    """``compact(table)`` in the background, recording when it ran."""

    def __init__(self, address: str, table: str) -> None:
        super().__init__(daemon=True)
        self.address, self.table = address, table
        self.start_t = self.end_t = 0.0
        self.report: dict | None = None
        self.error: str | None = None

    def run(self) -> None:
        from partialflow.client import Client

        self.start_t = time.monotonic()
        try:
            with Client(self.address, timeout=7200) as c:
                self.report = c.compact(self.table)
        except Exception as err:  # noqa: BLE001 - reported
            self.error = repr(err)
        self.end_t = time.monotonic()


# -- measuring -------------------------------------------------------------------------

def one_miss(c: Any, key: int, storage: Any) -> dict:
    """One cold read: latency, answer, LSN and the footprint stats() reports for it, and
    whether a compaction (the harness's or the background compactor's) ran meanwhile."""
    before = c.stats()["storage"]["compactions"]
    busy = storage.compacting()
    t0 = time.monotonic()
    res = c.lookup("ev", key)
    t1 = time.monotonic()
    busy = busy or storage.compacting()
    st = c.stats()
    return {"key": key, "lat": t1 - t0, "t0": t0, "t1": t1, "rows": [list(r) for r in res.rows],
            "lsn": res.lsn, "scan": dict(st["upquery_scan"]["last"]),
            "segments": st["storage"]["segments"].get("events"),
            "compacting": busy or st["storage"]["compactions"] != before}


def summary(rows: int, phase: str, ms: list[dict], la0: list, la1: list, secs: float) -> dict:
    p = pct([m["lat"] for m in ms])
    mean = lambda k: sum(m["scan"][k] for m in ms) / len(ms)  # noqa: E731
    return {
        "rows": rows, "phase": phase, "misses": len(ms), "p50_ms": p["p50"], "p90_ms": p["p90"],
        "p99_ms": p["p99"], "max_ms": p["max"],
        "rg_scanned": round(mean("row_groups_scanned"), 1),
        "rg_total": round(mean("row_groups_total"), 1),
        "mb_scanned": round(mean("bytes_scanned") / 1e6, 3),
        "mb_total": round(mean("bytes_total") / 1e6, 2),
        "segments_min": min(m["segments"] or 0 for m in ms),
        "segments_max": max(m["segments"] or 0 for m in ms),
        "loadavg_start": la0, "loadavg_end": la1, "seconds": round(secs, 1),
    }


def quiet(c: Any, storage: Any, rows: int, phase: str,
          keys: list[int]) -> tuple[dict, list[dict]]:
    la0, t = loadavg(), time.monotonic()
    ms = [one_miss(c, k, storage) for k in keys]
    s = summary(rows, phase, ms, la0, loadavg(), time.monotonic() - t)
    log(f"{phase}: {s}")
    return s, ms


def live(srv: Any, c: Any, args: argparse.Namespace, keys: int,
         wanted: list[int]) -> tuple[dict, list[dict]]:
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    w = ctx.Process(target=writer, args=(srv.address, args.write_rate, args.write_every, keys,
                                         7, stop, out), daemon=True)
    la0, t_start = loadavg(), time.monotonic()
    flushes0 = c.stats()["storage"]["flushes"]
    compactions0 = c.stats()["storage"]["compactions"]
    w.start()
    time.sleep(args.warmup)  # the stream and its flushes are going before the first miss
    comp = Compactor(srv.address, "events")
    ms: list[dict] = []
    deadline = time.monotonic() + args.live_seconds
    it = iter(wanted)
    while time.monotonic() < deadline:
        if len(ms) == args.compact_after and not comp.start_t:  # -1: never
            comp.start()
            time.sleep(0.5)  # let its Spark job start
        done = args.compact_after < 0 or (comp.start_t and not comp.is_alive())
        if (len(ms) >= args.live_misses and done
                and time.monotonic() - t_start >= args.live_min_seconds):
            break
        key = next(it, None)
        if key is None:
            log("live: out of unread keys")
            break
        ms.append(one_miss(c, key, srv.engine.storage))
    stop.set()
    wr = out.get(timeout=120)
    w.join(timeout=60)
    if comp.start_t:
        comp.join(timeout=args.live_seconds)
    # No new background compaction from here on; wait for one that is running, so the
    # checks and the server's stop don't race it.
    srv.engine.storage.max_segments = 1 << 30
    srv.engine.storage.wait_for_compaction()
    st = c.stats()["storage"]
    s = summary(args.rows, "live", ms, la0, loadavg(), time.monotonic() - t_start)
    during = [m for m in ms if m["compacting"]]
    outside = [m for m in ms if not m["compacting"]]
    s.update({
        "write_rate_target": args.write_rate,
        "write_rate_rows_s": round(wr["rows"] / wr["elapsed_s"], 1),
        "write_batch_rows": wr["batch"], "write_errors": wr["errors"],
        "write_ms": pct(wr["lat"]), "write_max_lag_s": round(wr["max_lag_s"], 3),
        "flushes": st["flushes"] - flushes0, "compactions": st["compactions"] - compactions0,
        "explicit_compaction": {"report": comp.report, "error": comp.error,
                                "seconds": round(comp.end_t - comp.start_t, 1)},
        "misses_during_compaction": len(during),
        "p50_ms_during_compaction": pct([m["lat"] for m in during]).get("p50"),
        "p50_ms_outside_compaction": pct([m["lat"] for m in outside]).get("p50"),
    })
    log(f"live: {s}")
    return s, ms


def check(c: Any, ms: list[dict], n: int) -> dict:
    """Compare ``n`` answers (spread over the phase) with Spark SQL at their LSN."""
    pick = ms[:: max(1, len(ms) // n)][:n] if ms else []
    bad = []
    for m in pick:
        want = c.query(CHECK.format(k=m["key"]), as_of=m["lsn"]).rows
        got = sorted(tuple(r) for r in m["rows"])
        if got != sorted(tuple(r) for r in want):
            bad.append({"key": m["key"], "lsn": m["lsn"], "got": got,
                        "want": [list(r) for r in want]})
    return {"checked": len(pick), "wrong": len(bad), "examples": bad[:3]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=0, help="distinct keys (default rows/100)")
    ap.add_argument("--misses", type=int, default=40, help="misses per quiet phase")
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--row-group-rows", type=int, default=0, help="default: storage's")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default="", help="working directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse --dir's data if a run already loaded it (skips the load)")
    ap.add_argument("--skip-unclustered", action="store_true")
    ap.add_argument("--no-recompact", action="store_true",
                    help="with --reuse: measure the table as a live phase left it")
    ap.add_argument("--no-live", action="store_true", help="quiet phases only")
    ap.add_argument("--live-misses", type=int, default=60)
    ap.add_argument("--live-seconds", type=float, default=1800.0, help="live phase at most")
    ap.add_argument("--live-min-seconds", type=float, default=90.0, help="live phase at least")
    ap.add_argument("--build-only", action="store_true",
                    help="write, load and compact into --dir, then stop (measure with --reuse)")
    ap.add_argument("--compact-after", type=int, default=10,
                    help="live misses before the harness calls compact('events') (-1: never, "
                    "only the background compactor runs)")
    ap.add_argument("--write-rate", type=float, default=500.0, help="rows/s")
    ap.add_argument("--write-every", type=float, default=0.05, help="s between writes")
    ap.add_argument("--warmup", type=float, default=5.0, help="s of writes before the 1st miss")
    ap.add_argument("--flush-interval", type=float, default=1.0)
    ap.add_argument("--max-segments", type=int, default=16)
    ap.add_argument("--check", type=int, default=10, help="answers checked per phase")
    ap.add_argument("--json", default="", help="write the figures here")
    ap.add_argument("--plot-name", default="miss_scaling", help="file names under published/")
    ap.add_argument("--plot-title", default="", help="what the runs measured (plot title)")
    ap.add_argument("--plot", nargs="*", default=None,
                    help="merge these JSON files into bench/published and draw the plot")
    args = ap.parse_args()
    if args.plot is not None:
        return publish(args.plot, args.plot_name, args.plot_title)
    keys = args.keys or max(1, args.rows // 100)

    from partialflow.server.spark import spark_session

    info = machine()
    spark = spark_session(args.master)
    root = Path(args.dir or tempfile.mkdtemp(prefix="pf-miss-scaling-"))
    root.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    reuse = args.reuse and (root / "loaded").exists()
    if reuse:
        timings = json.loads((root / "loaded").read_text())
    phases: list[dict] = []
    checks: dict[str, dict] = {}
    if not reuse:
        t0 = time.monotonic()
        log(f"writing {args.rows} rows ({keys} keys) under {root}")
        files = write_files(root, args.rows, keys, args.file_rows, seed=1)
        timings["write_files_s"] = round(time.monotonic() - t0, 1)
    srv = InProcServer(root / "data", spark)
    srv.config = dataclasses.replace(srv.config, flush_interval=args.flush_interval)
    with srv:
        assert srv.engine is not None
        storage = srv.engine.storage
        if args.row_group_rows:
            storage.row_group_rows = args.row_group_rows
        with srv.client(timeout=7200) as c:
            rng = random.Random(int(time.time()) if reuse else 2)
            wanted = rng.sample(range(keys), min(keys, 2 * args.misses + 20 * args.live_misses))
            if not reuse:
                # No background compaction while loading (it would rewrite the growing
                # table after every 16 files): one compaction at the end.
                storage.max_segments = 1 << 30
                c.execute("CREATE TABLE events (k BIGINT, v BIGINT, pad TEXT)")
                t0 = time.monotonic()
                for i, f in enumerate(files):
                    c.load("events", str(f))
                    if i % 5 == 4:
                        log(f"loaded {i + 1}/{len(files)} files, {time.monotonic() - t0:.0f} s")
                c.flush()
                timings["load_s"] = round(time.monotonic() - t0, 1)
                log(f"loaded in {timings['load_s']} s")
                if args.skip_unclustered:
                    c.execute(f"CREATE VIEW ev AS {VIEW}")
                t0 = time.monotonic()
                c.compact("events")  # sorted by k if the view exists, unsorted if not
                timings["first_compaction_s"] = round(time.monotonic() - t0, 1)
                log(f"compacted in {timings['first_compaction_s']} s")
                if not args.skip_unclustered:
                    c.execute(f"CREATE VIEW ev AS {VIEW}")
                    c.lookup("ev", -1)  # the first Spark job of the view pays JVM warm-up
                    s, ms = quiet(c, storage, args.rows, "unclustered", wanted[: args.misses])
                    phases.append(s)
                    checks["unclustered"] = check(c, ms, args.check)
                    t0 = time.monotonic()
                    c.compact("events")  # the view keys on k: sorted by k now
                    timings["clustered_compaction_s"] = round(time.monotonic() - t0, 1)
                    log(f"clustered compaction in {timings['clustered_compaction_s']} s")
                (root / "loaded").write_text(json.dumps(timings))
            if args.build_only:
                log(f"built: {timings}")
                return 0
            if c.stats()["storage"]["segments"].get("events", 0) > 1 and not args.no_recompact:
                # A reused table a live phase wrote to: one sorted segment again first.
                t0 = time.monotonic()
                c.compact("events")
                timings["reuse_compaction_s"] = round(time.monotonic() - t0, 1)
                log(f"compacted the reused table in {timings['reuse_compaction_s']} s")
            storage.max_segments = args.max_segments
            clustering = c.stats()["storage"].get("clustering")
            log(f"clustering {clustering}; segments {c.stats()['storage']['segments']}")
            c.lookup("ev", -1)
            s, ms = quiet(c, storage, args.rows, "clustered", wanted[args.misses: 2 * args.misses])
            phases.append(s)
            checks["clustered"] = check(c, ms, args.check)
            if not args.no_live:
                s, ms = live(srv, c, args, keys, wanted[2 * args.misses:])
                phases.append(s)
                checks["live"] = check(c, ms, args.check)
            log(f"checks {checks}")
    info["loadavg_at_end"] = loadavg()
    result = {"machine": info, "rows": args.rows, "keys": keys, "timings": timings,
              "clustering": clustering, "phases": phases, "checks": checks,
              "args": {k: v for k, v in vars(args).items() if k != "plot"}}
    cols = ["phase", "misses", "p50_ms", "p99_ms", "rg_scanned", "rg_total", "mb_scanned",
            "mb_total", "loadavg_start", "loadavg_end", "seconds"]
    print(" | ".join(cols))
    for row in phases:
        print(" | ".join(str(row[k]) for k in cols))
    print(json.dumps({"timings": timings, "checks": checks}))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    wrong = sum(c["wrong"] for c in checks.values())
    return 1 if wrong else 0


# -- publishing --------------------------------------------------------------------------

def publish(files: list[str], name: str = "miss_scaling", title: str = "") -> int:
    """Merge runs (one per table size) into bench/published/miss_scaling.json and draw
    bench/published/miss_scaling.png."""
    from plots import miss_scaling

    runs = sorted((json.loads(Path(f).read_text()) for f in files), key=lambda r: r["rows"])
    base = {p["phase"]: p["p50_ms"] for p in runs[0]["phases"]}
    for r in runs:
        for p in r["phases"]:
            b = base.get(p["phase"])
            p["p50_ratio_to_smallest"] = round(p["p50_ms"] / b, 2) if b else None
    res = {"runs": runs}
    PUBLISHED.mkdir(exist_ok=True)
    (PUBLISHED / f"{name}.json").write_text(json.dumps(res, indent=1))
    path = miss_scaling(res, PUBLISHED, name, title)
    print(path)
    print(markdown(runs))
    return 0


def markdown(runs: list[dict]) -> str:
    """The table of docs/benchmarks.md: one line per run and phase."""
    head = ("| rows | phase | misses | p50 ms | p99 ms | p50 / smallest | row groups a miss can "
            "touch | MB a miss can touch (of all) | segments | write rows/s | compaction during "
            "misses | load avg start → end |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in runs:
        for p in r["phases"]:
            live = p["phase"] == "live"
            during = str(p.get("misses_during_compaction"))
            lines.append(
                f"| {r['rows'] / 1e6:g}M | {p['phase']} | {p['misses']} | {p['p50_ms']:.0f} | "
                f"{p['p99_ms']:.0f} | {p['p50_ratio_to_smallest']}x | "
                f"{p['rg_scanned']:g} of {p['rg_total']:g} | "
                f"{p['mb_scanned']:.2f} of {p['mb_total']:.1f} | "
                f"{p['segments_min']}–{p['segments_max']} | "
                f"{p['write_rate_rows_s'] if live else '–'} | "
                f"{during + ' of ' + str(p['misses']) if live else '–'} | "
                f"{p['loadavg_start'][0]} → {p['loadavg_end'][0]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
