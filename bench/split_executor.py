"""Would an executor in a process of its own let writes through a view keep up with plain
tables? An experiment on this machine (a benchmark, not a test).

Three kinds of run, alternated, each driven like the writes section of ``bench/run.py``
(2 load processes x 2 threads, durable writes of ``--batches`` rows into the visits data
set: 20k products, 1,000 categories, 300k visits, every category of ``max_visit`` read
and its visit index prefetched):

* ``view``: the server as it is: writes into ``visit``, applied by the in-process
  dataflow (rate = rows applied per second);
* ``plain``: the same rows into ``visit_plain``, which no view reads;
* ``split``: the same rows into ``visit_plain``, and each durable write's rows also sent
  (pickled, over a pipe, in the server process, after the write returns) to a child
  process that runs the real dataflow with ``max_visit`` (the JVM-free stepped harness
  of ``tests/dataflow``, every key filled) and applies them. Rate = rows the child had
  applied per second. This is the best case of a split: no reads, fills or
  subscriptions cross the boundary, and the child's garbage collector is tuned as the
  server's (``tune_gc``).

The child's CPU per row is printed in three parts: unpickling, the harness's own model of
the tables (``model.write``: a real split would not have it), and the executor. The
server's CPU per row includes pickling and sending.

    python bench/split_executor.py [--batches 100,1000] [--seconds 8] [--rounds 2]

Measured 2026-11-26 (docs/benchmarks.md, "Writes"): on 2 cores the split reached
0.63-0.67x of plain at 100 rows per write (in-process: 0.51-0.56x) and 0.28-0.31x at
1000 (in-process: 0.34-0.35x): the load processes, the server, the child and Spark
share the two cores.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import random
import shutil
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PRODUCTS, CATEGORIES, VISITS = 20_000, 1_000, 300_000


def child(conn: Connection) -> None:
    """The dataflow process: applies every batch of visit rows it is sent."""
    sys.path[:0] = [str(ROOT / "tests" / "dataflow"), str(ROOT / "tests"), str(ROOT / "bench")]
    import datasets as ds
    from stepped import Harness

    from partialflow.server.app.main import tune_gc

    h = Harness()
    h.table("info", [("product", "TEXT"), ("category", "TEXT")],
            [(f"p{i}", ds.category_of(i, CATEGORIES)) for i in range(PRODUCTS)])
    h.table("visit", [("product", "TEXT"), ("user_name", "TEXT"), ("length", "BIGINT")],
            ds.visit_rows(random.Random(1), VISITS, PRODUCTS))
    h.view("max_visit", ds.MAX_VISIT_SQL)
    h.lookup("max_visit", [(f"c{i}",) for i in range(CATEGORIES)])
    h.settle()
    tune_gc()
    conn.send("ready")
    rows = 0
    cpu = [0.0, 0.0, 0.0]  # unpickle, model.write, executor
    while True:
        msg = conn.recv_bytes()
        if msg == b"sync":
            conn.send((rows, list(cpu)))
            continue
        if msg == b"stop":
            return
        t0 = time.thread_time()
        batch = pickle.loads(msg)
        t1 = time.thread_time()
        h.model.write("visit", inserts=batch)
        t2 = time.thread_time()
        h.run()
        t3 = time.thread_time()
        cpu[0] += t1 - t0
        cpu[1] += t2 - t1
        cpu[2] += t3 - t2
        rows += len(batch)


class Forwarder:
    """Wraps the server's ``storage.write``: while on, a durable write to ``visit_plain``
    is pickled and sent to the child."""

    def __init__(self, storage: Any, conn: Connection) -> None:
        self.conn, self.on = conn, False
        self._lock = threading.Lock()
        self._write = storage.write
        storage.write = self.write

    def write(self, table: str, inserts: Any = (), deletes: Any = ()) -> int:
        lsn = self._write(table, inserts=inserts, deletes=deletes)
        if self.on and table == "visit_plain":
            data = pickle.dumps(inserts, protocol=5)
            with self._lock:
                self.conn.send_bytes(data)
        return lsn

    def sync(self) -> tuple[int, list[float]]:
        with self._lock:
            self.conn.send_bytes(b"sync")
            return self.conn.recv()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="100,1000", help="rows per write (100,1000)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per run (8)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the three runs (2)")
    args = ap.parse_args()
    import datasets as ds
    from common import InProcServer, LoadPool, build_data, drive

    from partialflow.server.spark import spark_session

    print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    spark = spark_session()
    pool = LoadPool(6)
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=child, args=(theirs,), daemon=True)
    proc.start()
    work = Path(tempfile.mkdtemp(prefix="pf-split-"))
    data = work / "data"
    build_data(data, spark, ds.VISITS_TABLES, ds.VISITS_VIEWS,
               lambda st: ds.load_visits(st, PRODUCTS, CATEGORIES, VISITS))
    if ours.recv() != "ready":
        raise RuntimeError("the child did not start")
    gen = {"gen": "visits", "products": PRODUCTS, "categories": CATEGORIES}
    try:
        with InProcServer(data, spark) as srv:
            with srv.client() as c:
                c.lookup_many("max_visit", [f"c{i}" for i in range(CATEGORIES)])
                while c.stats().get("fills_in_flight", 0):
                    time.sleep(0.1)
            fwd = Forwarder(srv.engine.storage, ours)
            for batch in [int(b) for b in args.batches.split(",")]:
                for _ in range(args.rounds):
                    got: dict[str, float] = {}
                    for run, suffix in (("view", ""), ("plain", "_plain"), ("split", "_plain")):
                        rows0, cpu0 = fwd.sync()
                        fwd.on = run == "split"
                        t = os.times()
                        own0 = t.user + t.system
                        op = {"kind": "write", "batch": batch, "suffix": suffix, **gen}
                        r = drive(pool, srv.address, op, procs=2, threads=2,
                                  seconds=args.seconds, seed=batch)
                        srv.wait_applied(srv.engine.storage.last_lsn)
                        rows1, cpu1 = fwd.sync()  # the child has applied all it was sent
                        fwd.on = False
                        done = time.time()
                        t = os.times()
                        n = max(1, r["items"])
                        got[run] = n / (done - r["started_at"])
                        line = (f"{batch:>5} rows/write  {run:<6}{got[run]:>10,.0f} rows/s"
                                f"  server CPU {1e6 * (t.user + t.system - own0) / n:6.2f} us/row")
                        if run == "split":
                            parts = [1e6 * (b - a) / max(1, rows1 - rows0)
                                     for a, b in zip(cpu0, cpu1, strict=True)]
                            line += ("  child CPU us/row: unpickle {:.2f}, model {:.2f}, "
                                     "executor {:.2f}".format(*parts))
                        print(line, flush=True)
                    print(f"{batch:>5} rows/write  view/plain x{got['view'] / got['plain']:.2f}"
                          f"  split/plain x{got['split'] / got['plain']:.2f}"
                          f"  (load average {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        ours.send_bytes(b"stop")
        proc.join(10)
        pool.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
