"""Miss latency against bare Spark per table size, where a miss's time goes, and reads/s of
a concurrent workload with evictions (docs/benchmarks.md, "Misses against bare Spark").
Not run in CI.

For each ``--sizes`` table (``events(k BIGINT, v BIGINT, pad TEXT)``, keys = rows/100,
bulk-loaded, compacted sorted by ``k``) and a per-key SUM view, cold reads (every key read
once) alternate with the same SELECT run directly on the server's Spark session at the same
snapshot (``reads.bare_spark``), quiet and then while a writer process streams
``--write-rate`` single-row writes/s. It prints miss p50/p99, bare Spark p50/p99 and their
ratio, and the runner's per-phase profile of those misses (``server/upquery/profile.py``:
plan, Spark query phases, jobs, tasks, the result's trip, when the code has it).

Then the concurrent workload: 2 writer processes (``--workload-writes`` writes/s each), 3
reader processes reading random keys of 4 small views of the smallest table and evicting
30% of what they read, for ``--workload-seconds``: reads/s, read p50/p99.

The baseline runs the same script on another checkout's code, e.g. the commit before::

    git worktree add /tmp/miss-base 319354f
    mkdir -p /tmp/shim/partialflow && touch /tmp/shim/partialflow/__init__.py
    for d in server client operators proto testing; do
        ln -s /tmp/miss-base/$d /tmp/shim/partialflow/$d; done
    PYTHONPATH=/tmp/shim .venv/bin/python bench/miss_goals.py --json /tmp/base.json
    .venv/bin/python bench/miss_goals.py --json /tmp/new.json
    .venv/bin/python bench/miss_goals.py --compare /tmp/base.json /tmp/new.json

Run them alternately (base, new, base, new): on a shared machine absolute figures drift,
the ratios against bare Spark in the same run much less.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import InProcServer, loadavg, log, machine, pct, ratio
from miss_scaling import write_files, writer
from reads import _same, bare_spark

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = ? GROUP BY k"
BARE = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events WHERE k = {key} GROUP BY k"
# The concurrent workload's four small views (keyed on k, on pad).
SMALL_VIEWS = {
    "w_sum": "SELECT k, SUM(v) AS total FROM events WHERE k = ? GROUP BY k",
    "w_max": "SELECT k, MAX(v) AS top, MIN(v) AS low FROM events WHERE k = ? GROUP BY k",
    "w_rows": "SELECT k, v, pad FROM events WHERE k = ? AND v > 500",
    "w_pad": "SELECT pad, COUNT(*) AS n FROM events WHERE pad = ? GROUP BY pad",
}


def runner_of(srv: InProcServer) -> Any:
    assert srv.engine is not None
    return srv.engine.dataflow.runner


def misses(srv: InProcServer, keys: list[int]) -> dict:
    """Cold reads of ``keys`` against bare Spark at the same LSN, alternating which goes
    first; the answers must agree."""
    pf: list[float] = []
    bare: list[float] = []
    wrong = 0
    with srv.client() as c:
        for i, key in enumerate(keys):
            lsn = srv.engine.storage.last_lsn

            def read_pf(key: int = key) -> Any:
                t0 = time.perf_counter()
                r = c.lookup("ev", key)
                pf.append(time.perf_counter() - t0)
                return r

            def read_bare(key: int = key, lsn: int = lsn) -> list[tuple]:
                t0 = time.perf_counter()
                rows = bare_spark(srv, BARE.format(key=key), ["events"], lsn)
                bare.append(time.perf_counter() - t0)
                return rows

            if i % 2:
                rows, r = read_bare(), read_pf()
            else:
                r, rows = read_pf(), read_bare()
            # Under writes the read may be exact at a later LSN than the bare query's.
            if r.lsn == lsn and not _same(r.rows, rows):
                wrong += 1
                log(f"miss {key}: partialflow {r.rows} @ {r.lsn} vs Spark {rows} @ {lsn}")
    p, b = pct(pf), pct(bare)
    return {"miss_ms": p, "bare_ms": b, "ratio_p50": ratio(p["p50"], b["p50"]),
            "ratio_p99": ratio(p["p99"], b["p99"]), "wrong": wrong}


def profiled(srv: InProcServer, fn: Any) -> tuple[Any, dict]:
    """Run ``fn()`` with the runner's profile on (if this code has one); its summary."""
    prof = getattr(runner_of(srv), "profiler", None)
    if prof is None:
        return fn(), {}
    prof.clear()
    prof.detail = True
    try:
        out = fn()
    finally:
        prof.detail = False
    time.sleep(0.5)  # Spark's status store is filled by its listener bus, asynchronously
    return out, prof.summary(srv.spark)


def one_size(spark: Any, root: Path, rows: int, args: argparse.Namespace) -> dict:
    keys = max(1, rows // 100)
    root.mkdir(parents=True, exist_ok=True)
    files = write_files(root, rows, keys, min(rows, 1_000_000), seed=1)
    out: dict[str, Any] = {"rows": rows, "keys": keys}
    with InProcServer(root / "data", spark) as srv, srv.client(timeout=3600) as c:
        c.execute("CREATE TABLE events (k BIGINT, v BIGINT, pad TEXT)")
        for f in files:
            c.load("events", str(f))
        c.flush()
        c.execute(f"CREATE VIEW ev AS {VIEW}")
        c.compact("events")  # sorted by k: the view keys on it
        wanted = random.Random(rows).sample(range(keys), min(keys, 2 * args.misses + 2))
        c.lookup("ev", wanted.pop())  # the view's first Spark job pays JVM warm-up
        bare_spark(srv, BARE.format(key=wanted.pop()), ["events"], srv.engine.storage.last_lsn)
        la0 = loadavg()
        out["quiet"], out["quiet_profile"] = profiled(
            srv, lambda: misses(srv, wanted[: args.misses]))
        out["quiet"]["loadavg"] = [la0, loadavg()]
        log(f"{rows} rows quiet: {brief(out['quiet'])}")
        ctx = mp.get_context("spawn")
        stop, q = ctx.Event(), ctx.Queue()
        w = ctx.Process(target=writer, args=(srv.address, args.write_rate, 1 / args.write_rate,
                                             keys, 3, stop, q), daemon=True)
        w.start()
        time.sleep(3.0)  # the stream and its flushes are going before the first miss
        la0 = loadavg()
        try:
            out["live"], out["live_profile"] = profiled(
                srv, lambda: misses(srv, wanted[args.misses: 2 * args.misses]))
        finally:
            stop.set()
            wr = q.get(timeout=120)
            w.join(timeout=60)
        out["live"]["loadavg"] = [la0, loadavg()]
        out["live"]["writes_per_s"] = round(len(wr["lat"]) / wr["elapsed_s"], 1)
        out["live"]["segments"] = c.stats()["storage"]["segments"].get("events")
        log(f"{rows} rows live: {brief(out['live'])} ({out['live']['writes_per_s']} writes/s)")
    return out


def brief(m: dict) -> str:
    return (f"miss p50 {m['miss_ms']['p50']:.0f} p99 {m['miss_ms']['p99']:.0f} ms, bare Spark "
            f"p50 {m['bare_ms']['p50']:.0f} p99 {m['bare_ms']['p99']:.0f} ms, x{m['ratio_p50']}")


# -- the concurrent workload ----------------------------------------------------------

def reader(address: str, keys: int, pads: list[str], seconds: float, seed: int, out: Any) -> None:
    """Read random keys of the small views for ``seconds``, evicting 30% of them after."""
    from partialflow.client import Client

    rng = random.Random(seed)
    lat: list[float] = []
    errors = evicted = 0
    with Client(address, timeout=120) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            view = rng.choice(list(SMALL_VIEWS))
            key: Any = rng.choice(pads) if view == "w_pad" else rng.randrange(keys)
            t0 = time.perf_counter()
            try:
                c.lookup(view, key)
            except Exception:  # noqa: BLE001 - counted
                errors += 1
                continue
            lat.append(time.perf_counter() - t0)
            if rng.random() < 0.3:
                c.evict(view, key)
                evicted += 1
    out.put({"lat": lat, "errors": errors, "evicted": evicted, "seconds": seconds})


def workload(spark: Any, root: Path, args: argparse.Namespace) -> dict:
    rows = min(args.sizes)
    keys = max(1, rows // 100)
    root.mkdir(parents=True, exist_ok=True)
    files = write_files(root, rows, keys, rows, seed=2)
    with InProcServer(root / "data", spark) as srv, srv.client(timeout=3600) as c:
        c.execute("CREATE TABLE events (k BIGINT, v BIGINT, pad TEXT)")
        for f in files:
            c.load("events", str(f))
        c.flush()
        for name, sql in SMALL_VIEWS.items():
            c.execute(f"CREATE VIEW {name} AS {sql}")
        c.compact("events")
        pads = [f"p{i}" for i in range(97)]
        ctx = mp.get_context("spawn")
        stop, wq, rq = ctx.Event(), ctx.Queue(), ctx.Queue()
        rate = args.workload_writes
        writers = [ctx.Process(target=writer, args=(srv.address, rate, 1 / rate, keys, 10 + i,
                                                    stop, wq), daemon=True) for i in range(2)]
        readers = [ctx.Process(target=reader, args=(srv.address, keys, pads,
                                                    args.workload_seconds, 20 + i, rq),
                               daemon=True) for i in range(3)]
        la0 = loadavg()
        for p in writers + readers:
            p.start()
        got = [rq.get(timeout=args.workload_seconds + 600) for _ in readers]
        stop.set()
        wr = [wq.get(timeout=120) for _ in writers]
        for p in writers + readers:
            p.join(timeout=60)
        lat = [x for g in got for x in g["lat"]]
        st = c.stats()["views"]
        res = {
            "reads": len(lat), "reads_per_s": round(len(lat) / args.workload_seconds, 1),
            "read_ms": pct(lat), "errors": sum(g["errors"] for g in got),
            "evicted": sum(g["evicted"] for g in got),
            "writes_per_s": round(sum(len(w["lat"]) for w in wr) / wr[0]["elapsed_s"], 1),
            "misses": sum(st[v]["misses"] for v in SMALL_VIEWS),
            "upqueries": sum(st[v]["upqueries"] for v in SMALL_VIEWS),
            "loadavg": [la0, loadavg()],
        }
    log(f"workload: {res['reads_per_s']} reads/s, p50 {res['read_ms'].get('p50')} ms, "
        f"p99 {res['read_ms'].get('p99')} ms, {res['writes_per_s']} writes/s, "
        f"{res['errors']} errors")
    return res


# -- comparing runs -------------------------------------------------------------------

def compare(files: list[str]) -> int:
    """A table of every run's figures side by side (files in the order given)."""
    runs = [json.loads(Path(f).read_text()) for f in files]
    print("| run | commit | rows | phase | miss p50 | miss p99 | bare p50 | bare p99 | "
          "x p50 | load |")
    print("|" + " --- |" * 10)
    for f, r in zip(files, runs, strict=True):
        label = r.get("label") or Path(f).stem
        for s in r["sizes"]:
            for ph in ("quiet", "live"):
                m = s[ph]
                print(f"| {label} | {r['machine']['commit']} | {s['rows']:,} | {ph} | "
                      f"{m['miss_ms']['p50']:.0f} | {m['miss_ms']['p99']:.0f} | "
                      f"{m['bare_ms']['p50']:.0f} | {m['bare_ms']['p99']:.0f} | "
                      f"{m['ratio_p50']} | {m['loadavg'][0][0]} |")
    print()
    for f, r in zip(files, runs, strict=True):
        w = r.get("workload")
        if w:
            print(f"{r.get('label') or Path(f).stem}: workload {w['reads_per_s']} reads/s "
                  f"(p50 {w['read_ms'].get('p50')} ms, p99 {w['read_ms'].get('p99')} ms, "
                  f"{w['writes_per_s']} writes/s, load {w['loadavg'][0][0]})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                    default=[20_000, 200_000, 1_000_000])
    ap.add_argument("--misses", type=int, default=25, help="cold keys per size and phase")
    ap.add_argument("--write-rate", type=float, default=20.0, help="writes/s in the live phase")
    ap.add_argument("--workload-seconds", type=float, default=30.0)
    ap.add_argument("--workload-writes", type=float, default=20.0, help="writes/s per writer")
    ap.add_argument("--no-workload", action="store_true")
    ap.add_argument("--label", default="")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", default="")
    ap.add_argument("--compare", nargs="*", default=None, help="print these runs side by side")
    args = ap.parse_args()
    if args.compare is not None:
        return compare(args.compare)
    from partialflow.server.spark import spark_session

    info = machine()
    import partialflow.server

    info["code"] = str(Path(partialflow.server.__path__[0]).resolve().parent)
    # The commit of the code measured (a baseline runs this script on another checkout).
    info["commit"] = subprocess.run(["git", "-C", info["code"], "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()
    spark = spark_session(args.master)
    root = Path(tempfile.mkdtemp(prefix="pf-miss-goals-"))
    result: dict[str, Any] = {"label": args.label, "machine": info, "sizes": []}
    for rows in args.sizes:
        result["sizes"].append(one_size(spark, root / f"t{rows}", rows, args))
    if not args.no_workload:
        result["workload"] = workload(spark, root / "workload", args)
    info["loadavg_at_end"] = loadavg()
    for s in result["sizes"]:
        for ph in ("quiet", "live"):
            print(f"{s['rows']:>9,} {ph:<5} {brief(s[ph])}")
            prof = s.get(f"{ph}_profile")
            if prof:
                print("          profile: " + ", ".join(
                    f"{k[:-7]} {v}" for k, v in prof.items() if k.endswith("_p50_ms"))
                    + f"; plans cached {prof['plan_cached']}/{prof['upqueries']}, "
                    f"unflushed {prof['unflushed']}, tasks p50 {prof['tasks_p50']}, "
                    f"compiles per miss {prof.get('compiles_mean')}")
    if "workload" in result:
        w = result["workload"]
        print(f"workload: {w['reads_per_s']} reads/s, read p50 {w['read_ms'].get('p50')} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    wrong = sum(s[ph]["wrong"] for s in result["sizes"] for ph in ("quiet", "live"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
