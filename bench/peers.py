"""partialflow against what a user would pick instead: Pathway and PostgreSQL 15.

    python bench/peers.py                 # 3-4 minutes on 2 cores at a load average of 30
    python bench/peers.py --rows 2000 --reads 200   # smaller, shorter
    python bench/peers.py --no-pathway    # without the optional Pathway extra

The seed views of bench/dataflow_deltas.py (the visits view ``maxlen``; Nexmark Q4's
``avg_winning`` over ``winning``, and ``hot``) over the same rows on every engine, drawn
once as dataflow_deltas.py draws them, written in batches of 1, 100 and 10,000 rows:

- partialflow: the engine in this process as dataflow_deltas.py runs it (durable writes
  acknowledged and applied, end to end; the executor alone; per executor CPU second), and
  the whole server through the Python client (gRPC, from a load process) for reads;
- Pathway (the ``bench`` extra), one worker thread, in a child process
  (bench/peers_pathway.py), twice: with ``pw.reducers.avg`` as a user writes it, and with
  ``sum(strict=True) / count()``;
- a real PostgreSQL 15 (tests/pg/upstream.py's, restarted with fsync, full_page_writes
  and synchronous_commit on) with the key columns indexed: one transaction per write
  (INSERT for 1 row, COPY for more), and the view's SQL run per read.

Figures: rows/s of writes per engine and batch size, read latency p50/p99 by key, ratios
against partialflow; every engine's final answers checked against SQLite running the
views' SQL over the same final base rows ("exact", or the mismatches). Figures of an
engine that answered wrong are marked. Engines run one after another, never together.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import pickle
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

AUCTIONS = 2000  # dataflow_deltas.setup's auctions (10 categories)
DEFAULTS = {"rows": 20_000, "products": 1000, "categories": 20, "batches": [1, 100, 10_000],
            "reads": 1000, "pathway": True, "postgres": True}

MAXLEN_SQL = ("SELECT category, MAX(length) AS m FROM info JOIN visit "
              "ON info.product = visit.product WHERE category = {p} GROUP BY category")
WINNING_SQL = ("SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
               "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category")
AVG_SQL = (f"SELECT category, AVG(price) AS avg_price FROM ({WINNING_SQL}) w "
           "WHERE category = {p} GROUP BY category")
HOT_SQL = "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction HAVING COUNT(*) > 10"

CAVEATS = [
    "durability: partialflow acknowledges a write after its WAL fsync (group commit); "
    "PostgreSQL runs fsync, full_page_writes and synchronous_commit on (a commit per write); "
    "Pathway runs with persistence off: a crash loses its state",
    "state: partialflow keeps partial state (keys filled by Spark upqueries, evictable; "
    "here every key is filled first); Pathway keeps every arrangement in memory (full "
    "state, no eviction, no memory limit); PostgreSQL keeps no view state and computes "
    "each read from the indexed tables",
    "writes: partialflow's and Pathway's figures include maintaining the views; "
    "PostgreSQL's are plain inserts into indexed tables (the view's cost is paid per read)",
    "partialflow writes are engine.insert in this process (no gRPC), as "
    "bench/dataflow_deltas.py; PostgreSQL's go through psycopg over TCP on loopback; "
    "Pathway's through its Python connector (next() per row, commit() per write) and its "
    "figure includes writing every output change to JSON-lines files (Rust)",
    "Pathway has no keyed read API (a reader keeps a copy of the output via subscribe, or "
    "queries through its REST connector): no read latency is given for it",
    "compare Pathway with partialflow's executor alone (no durability on either side of "
    "that pair) and PostgreSQL with partialflow end to end",
    "one run on a 2-core machine shared with other engineers: expect +-30% between runs, "
    "and more under load: at a high load average the wall-clock rates measure the scheduler "
    "too (Pathway hands each write through three threads; the executor's figure counts its "
    "busy time only), so compare per second of engine CPU",
]


# -- data ----------------------------------------------------------------------------------

def draw(cfg: dict) -> dict:
    """The rows every engine gets, drawn as bench/dataflow_deltas.py draws them."""
    products, categories = cfg["products"], cfg["categories"]
    rng = random.Random(1)
    info = [(f"p{i}", f"c{i % categories}") for i in range(products)]
    auction = [(i, i % 10, i, i, i + 100) for i in range(AUCTIONS)]

    def visit() -> tuple:
        return (f"p{rng.randrange(products)}", f"u{rng.randrange(500)}", rng.randrange(1000))

    def bid() -> tuple:
        return (rng.randrange(500), rng.randrange(AUCTIONS), rng.randrange(10**6),
                float(rng.randrange(1, 10**5)))

    phases = []
    for table, make in (("visit", visit), ("bid", bid)):
        for batch in cfg["batches"]:
            total = min(cfg["rows"], 2_000) if batch == 1 else cfg["rows"]
            writes = [[make() for _ in range(batch)] for _ in range(max(1, total // batch))]
            phases.append({"table": table, "batch": batch, "writes": writes})
    return {"info": info, "auction": auction, "phases": phases}


def reference(data: dict) -> dict:
    """The views' answers over the final base rows, by SQLite running the views' SQL."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE info (product TEXT, category TEXT)")
    db.execute("CREATE TABLE visit (product TEXT, user TEXT, length INTEGER)")
    db.execute("CREATE TABLE auction (id INTEGER, category INTEGER, seller INTEGER, "
               "start_time INTEGER, expires INTEGER)")
    db.execute("CREATE TABLE bid (bidder INTEGER, auction INTEGER, bid_time INTEGER, price REAL)")
    db.executemany("INSERT INTO info VALUES (?, ?)", data["info"])
    db.executemany("INSERT INTO auction VALUES (?, ?, ?, ?, ?)", data["auction"])
    for ph in data["phases"]:
        marks = "?, ?, ?" if ph["table"] == "visit" else "?, ?, ?, ?"
        for rows in ph["writes"]:
            db.executemany(f"INSERT INTO {ph['table']} VALUES ({marks})", rows)
    whole = {"maxlen": MAXLEN_SQL.replace("WHERE category = {p} ", ""),
             "avg_winning": AVG_SQL.replace("WHERE category = {p} ", ""), "hot": HOT_SQL}
    return {v: {r[0]: r[1] for r in db.execute(sql)} for v, sql in whole.items()}


def compare(got: dict, want: dict) -> dict:
    """``exact`` and up to 10 mismatches (view, key, got, want); floats to 1e-9 relative."""
    bad: list[list] = []
    for view, ans in want.items():
        mine = got.get(view, {})
        for key in sorted(set(ans) | set(mine), key=repr):
            a, b = mine.get(key), ans.get(key)
            same = a == b or (isinstance(a, float) and isinstance(b, (int, float))
                              and math.isclose(a, b, rel_tol=1e-9))
            if not same:
                bad.append([view, key, a, b])
    return {"exact": not bad, "mismatches": len(bad), "examples": bad[:10]}


# -- partialflow -------------------------------------------------------------------------

def run_partialflow(data: dict, cfg: dict, work: Path, spark: Any, pool: Any) -> dict:
    """Writes through the engine (dataflow_deltas.run), reads through the client from a
    load process of ``pool`` (a client in this process would share the server's GIL)."""
    import dataflow_deltas
    from common import InProcServer, drive

    out: dict[str, Any] = {"phases": [], "reads": {}}
    with InProcServer(work / "partialflow", spark) as srv:
        engine = srv.engine
        t0 = time.perf_counter()
        dataflow_deltas.setup(engine, cfg["products"], cfg["categories"])
        out["fill_s"] = round(time.perf_counter() - t0, 2)
        for ph in data["phases"]:
            rows = iter([r for w in ph["writes"] for r in w])
            n = sum(len(w) for w in ph["writes"])
            e2e, alone, cpu = dataflow_deltas.run(engine, ph["table"], rows.__next__,
                                                  ph["batch"], n)
            out["phases"].append({"table": ph["table"], "batch": ph["batch"], "rows": n,
                                  "rows_per_s": round(e2e), "executor_rows_per_s": round(alone),
                                  "rows_per_executor_cpu_s": round(cpu) if cpu == cpu else None})
        cats = [f"c{i}" for i in range(cfg["categories"])]
        for view, keys, calls in _read_plan(cfg, cats):
            if pool is None:  # the smoke test: reads from this process
                with srv.client() as c:
                    out["reads"][view] = _timed_reads(
                        lambda k, c=c, view=view: c.lookup(view, k), keys, calls)
                continue
            op = {"kind": "lookup", "view": view, "keys": {"type": "list", "values": keys}}
            r = drive(pool, srv.address, op, calls=calls, seed=11, lead=0.5)
            out["reads"][view] = {"reads": r["calls"], "errors": r["errors"],
                                  "p50_ms": r["latency_ms"].get("p50"),
                                  "p99_ms": r["latency_ms"].get("p99")}
        with srv.client() as c:
            got = {"maxlen": {}, "avg_winning": {}, "hot": {}}
            for view, keys in (("maxlen", cats), ("avg_winning", list(range(10)))):
                for res in c.lookup_many(view, keys).values():
                    got[view].update({r[0]: r[1] for r in res.rows})
            got["hot"] = {r[0]: r[1] for r in c.lookup("hot", ()).rows}
            out["memory_bytes"] = c.stats().get("memory_bytes")
    out["answers"] = got
    return out


def _read_plan(cfg: dict, cats: list[str]) -> list[tuple[str, list, int]]:
    """(view, keys, reads): keys drawn uniformly; the whole ``hot`` answer (about every
    auction) is read fewer times."""
    n = cfg["reads"]
    return [("maxlen", cats, n), ("avg_winning", list(range(10)), n),
            ("hot", [()], max(20, n // 5))]


# -- PostgreSQL --------------------------------------------------------------------------

PG_DDL = [
    "CREATE TABLE info (product text PRIMARY KEY, category text)",
    'CREATE TABLE visit (product text, "user" text, length bigint)',
    "CREATE TABLE auction (id bigint PRIMARY KEY, category bigint, seller bigint, "
    "start_time bigint, expires bigint)",
    "CREATE TABLE bid (bidder bigint, auction bigint, bid_time bigint, price double precision)",
    "CREATE INDEX ON info (category)", "CREATE INDEX ON visit (product)",
    "CREATE INDEX ON auction (category)", "CREATE INDEX ON bid (auction)",
]
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def postgres(durable: bool = True) -> Any:
    """tests/pg/upstream.py's PostgreSQL 15 (started on first use), restarted with the
    durability settings on when ``durable`` (that helper turns them off for the tests)."""
    sys.path.insert(0, str(REPO / "tests" / "pg"))
    import upstream as pgup

    reason = pgup.skip_reason()
    if reason:
        raise RuntimeError(reason)
    up = pgup.upstream()
    if durable:
        opts = up.opts
        for k, v in DURABLE.items():
            opts = opts.replace(f"-c {k}=off", f"-c {k}={v}")
        if opts != up.opts:
            up.opts = opts
            up.restart()
    return up


def run_postgres(data: dict, cfg: dict, durable: bool = True) -> dict:
    import psycopg

    up = postgres(durable)
    dsn = up.database("pf_peers", PG_DDL)
    out: dict[str, Any] = {"phases": [], "reads": {}}
    with psycopg.connect(dsn, autocommit=True) as con:
        out["settings"] = {k: con.execute(f"SHOW {k}").fetchone()[0] for k in DURABLE}
        out["version"] = con.execute("SHOW server_version").fetchone()[0]
        if durable and out["settings"] != DURABLE:
            raise RuntimeError(f"PostgreSQL is not durable here: {out['settings']}")
        with con.transaction(), con.cursor() as cur:
            for table, rows in (("info", data["info"]), ("auction", data["auction"])):
                with cur.copy(f"COPY {table} FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row(r)
        sqls = {"visit": 'INSERT INTO visit (product, "user", length) VALUES (%s, %s, %s)',
                "bid": "INSERT INTO bid VALUES (%s, %s, %s, %s)"}
        for ph in data["phases"]:
            table, n = ph["table"], sum(len(w) for w in ph["writes"])
            with con.cursor() as cur:
                t0 = time.perf_counter()
                for rows in ph["writes"]:
                    if len(rows) == 1:  # one autocommitted INSERT: one durable commit
                        cur.execute(sqls[table], rows[0])
                    else:
                        with con.transaction(), cur.copy(f"COPY {table} FROM STDIN") as cp:
                            for r in rows:
                                cp.write_row(r)
                wall = time.perf_counter() - t0
            out["phases"].append({"table": table, "batch": ph["batch"], "rows": n,
                                  "rows_per_s": round(n / wall)})
        con.execute("ANALYZE")  # autovacuum would, given time; the reads need the statistics
        cats = [f"c{i}" for i in range(cfg["categories"])]
        sql = {"maxlen": MAXLEN_SQL.format(p="%s"), "avg_winning": AVG_SQL.format(p="%s"),
               "hot": HOT_SQL}
        for view, keys, calls in _read_plan(cfg, cats):
            out["reads"][view] = _timed_reads(
                lambda k, view=view: con.execute(sql[view], (k,) if k != () else None,
                                                 prepare=True).fetchall(), keys, calls)
        got: dict[str, dict] = {"maxlen": {}, "avg_winning": {}}
        for view, keys in (("maxlen", cats), ("avg_winning", list(range(10)))):
            for k in keys:
                got[view].update({r[0]: r[1] for r in con.execute(sql[view], (k,)).fetchall()})
        got["hot"] = {r[0]: r[1] for r in con.execute(HOT_SQL).fetchall()}
    # PostgreSQL's AVG of double precision is a double; MAX(bigint) an int: as SQLite's
    out["answers"] = got
    return out


def _timed_reads(read: Any, keys: list, calls: int) -> dict:
    """``calls`` reads of keys drawn uniformly (seed 11), one at a time: p50/p99 in ms."""
    rng = random.Random(11)
    lat = []
    for _ in range(calls):
        k = rng.choice(keys)
        t0 = time.perf_counter()
        read(k)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"reads": calls, "p50_ms": _q(lat, 0.50), "p99_ms": _q(lat, 0.99)}


def _q(sorted_s: list[float], p: float) -> float:
    i = min(len(sorted_s) - 1, max(0, math.ceil(p * len(sorted_s)) - 1))
    return round(sorted_s[i] * 1000, 3)


# -- Pathway -----------------------------------------------------------------------------

def pathway_missing() -> str | None:
    if importlib.util.find_spec("pathway") is None:
        return "Pathway is not installed (pip install -e '.[bench]')"
    return None


def run_pathway(rows_file: Path, work: Path, avg: str, timeout: float = 600.0) -> dict:
    """bench/peers_pathway.py in a child process (one worker thread)."""
    import os

    d = work / f"pathway-{avg}"
    d.mkdir(parents=True, exist_ok=True)
    spec = {"rows": str(rows_file), "avg": avg, "out_dir": str(d / "out"),
            "result": str(d / "result.json")}
    (d / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PATHWAY_THREADS": "1"}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(BENCH / "peers_pathway.py"), str(d / "spec.json")],
                       capture_output=True, text=True, env=env, timeout=timeout)
    if not (d / "result.json").exists():
        raise RuntimeError(f"Pathway run failed ({p.returncode}): {p.stderr[-3000:]}")
    res = json.loads((d / "result.json").read_text())
    res["process_s"] = round(time.perf_counter() - t0, 1)
    if res["errors"]:
        raise RuntimeError(f"Pathway run failed: {res['errors'][0][-3000:]}")
    ans = res.pop("answers")
    res["answers"] = {v: {r[0]: r[1] for r in rows} for v, rows in ans.items()}
    return res


# -- the section ---------------------------------------------------------------------------

def section(cfg: dict, work: Path, spark: Any, pool: Any, *, pg_durable: bool = True) -> dict:
    """Every engine on the same rows, one after another; figures, ratios and exactness."""
    from common import loadavg, log

    cfg = {**DEFAULTS, **cfg}
    work.mkdir(parents=True, exist_ok=True)
    data = draw(cfg)
    rows_file = work / "rows.pickle"
    rows_file.write_bytes(pickle.dumps(data))
    want = reference(data)
    sec: dict[str, Any] = {"config": cfg, "caveats": CAVEATS, "engines": {},
                           "loadavg": {"start": loadavg()}}
    runs: list[tuple[str, Any]] = [
        ("partialflow", lambda: run_partialflow(data, cfg, work, spark, pool))]
    if cfg["postgres"]:
        runs.append(("postgresql", lambda: run_postgres(data, cfg, pg_durable)))
    if cfg["pathway"]:
        missing = pathway_missing()
        if missing:
            sec["engines"]["pathway"] = {"skipped": missing}
        else:
            runs.append(("pathway (pw.reducers.avg)",
                         lambda: run_pathway(rows_file, work, "default")))
            runs.append(("pathway (sum strict / count)",
                         lambda: run_pathway(rows_file, work, "strict")))
    for name, fn in runs:
        log(f"peers: {name} (load average {loadavg()})")
        t0 = time.perf_counter()
        try:
            res = fn()
        except Exception as e:  # an engine that cannot run here is reported, not fatal
            log(f"peers: {name} failed: {e}")
            sec["engines"][name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            continue
        res["seconds"] = round(time.perf_counter() - t0, 1)
        res["exactness"] = compare(res.pop("answers"), want)
        res["loadavg_after"] = loadavg()
        sec["engines"][name] = res
    sec["loadavg"]["end"] = loadavg()
    sec["ratios"] = ratios(sec)
    sec["small_writes"] = small_write_goals(sec)
    return sec


def small_write_goals(sec: dict) -> list[dict]:
    """The small-write goal: partialflow's executor alone at 1-row and 100-row writes at
    least the rate of Pathway's exact formulation, per seed view, in this run."""
    pf = sec["engines"].get("partialflow", {})
    peer = sec["engines"].get("pathway (sum strict / count)", {})
    theirs = {(p["table"], p["batch"]): p for p in peer.get("phases", [])}
    out = []
    for p in pf.get("phases", []):
        other = theirs.get((p["table"], p["batch"]))
        if p["batch"] > 100 or not other:
            continue
        r = p["executor_rows_per_s"] / other["rows_per_s"]
        out.append({"goal": {
            "text": f"executor alone >= Pathway, {p['table']} x{p['batch']}",
            "value": f"{r:.2f}x", "met": r >= 1.0}})
        # The same per second of engine CPU: on a loaded machine the wall-clock rates
        # measure the scheduler as much as the engines (Pathway hands each write through
        # three threads), so this is the figure to believe when the load average is high.
        mine, its = p.get("rows_per_executor_cpu_s"), other.get("rows_per_worker_cpu_s")
        if mine and its:
            out.append({"goal": {
                "text": f"executor per CPU s >= Pathway worker's, {p['table']} x{p['batch']}",
                "value": f"{mine / its:.2f}x", "met": mine >= its}})
    return out


def ratios(sec: dict) -> list[dict]:
    """Per phase: each engine's rows/s over partialflow's end to end and executor alone;
    per view: read p50/p99 over partialflow's."""
    pf = sec["engines"].get("partialflow", {})
    out = []
    base = {(p["table"], p["batch"]): p for p in pf.get("phases", [])}
    for name, e in sec["engines"].items():
        if name == "partialflow":
            continue
        for p in e.get("phases", []):
            b = base.get((p["table"], p["batch"]))
            if b:
                out.append({"engine": name, "table": p["table"], "batch": p["batch"],
                            "vs_end_to_end": _r(p["rows_per_s"], b["rows_per_s"]),
                            "vs_executor": _r(p["rows_per_s"], b["executor_rows_per_s"])})
        for view, r in e.get("reads", {}).items():
            b = pf.get("reads", {}).get(view)
            if b:
                out.append({"engine": name, "view": view,
                            "p50_vs": _r(r["p50_ms"], b["p50_ms"]),
                            "p99_vs": _r(r["p99_ms"], b["p99_ms"])})
    return out


def _r(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def report(sec: dict) -> str:
    """The section as text: writes, reads, exactness and the caveats."""
    from peers_report import render

    return render(sec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--rows", type=int, default=DEFAULTS["rows"],
                    help="rows per phase (2,000 at most for 1-row writes; default 20000)")
    ap.add_argument("--products", type=int, default=DEFAULTS["products"])
    ap.add_argument("--categories", type=int, default=DEFAULTS["categories"])
    ap.add_argument("--batches", default="1,100,10000", help="rows per write")
    ap.add_argument("--reads", type=int, default=DEFAULTS["reads"],
                    help="reads per view and engine (hot: a fifth)")
    ap.add_argument("--no-pathway", action="store_true")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    args = ap.parse_args(argv)
    cfg = {"rows": args.rows, "products": args.products, "categories": args.categories,
           "batches": [int(b) for b in args.batches.split(",")], "reads": args.reads,
           "pathway": not args.no_pathway, "postgres": not args.no_postgres}
    from common import LoadPool, log, machine

    from partialflow.server.spark import spark_session

    meta = machine()
    log(f"peers: load average {meta['loadavg_at_start']} at {meta['date']}, commit "
        f"{meta['commit']}")
    spark = spark_session()
    pool = LoadPool(1)
    work = Path(tempfile.mkdtemp(prefix="pf-peers-"))
    try:
        sec = section(cfg, work, spark, pool)
    finally:
        pool.close()
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"peers-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps({"meta": meta, "sections": {"peers": sec}}, indent=1,
                               default=str))
    print(report(sec))
    log(f"results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
