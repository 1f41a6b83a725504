"""Deltas per second through the dataflow (a benchmark, not a test).

Builds an in-process engine on a temp dir, creates the docs' visits view and Nexmark Q4's
two outputs, fills every key (so every delta does real work), then writes batches of 1,
100 and 10,000 rows and measures, per batch size:

* end to end: durable writes acknowledged and applied by the executor (deltas/s), and
* the executor alone: the time it spent applying those packets (deltas/s), and the
  same per second of the executor thread's CPU time (steadier on a loaded machine),

so the cost of the dataflow is visible apart from the write path's fsyncs.

    python bench/dataflow_deltas.py [--rows 20000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from common import executor_cpu_seconds

from partialflow.server.config import Config
from partialflow.server.engine import Engine
from partialflow.server.spark import spark_session


def setup(engine: Engine, products: int, categories: int) -> None:
    ex = engine.execute
    ex("CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)")
    ex("CREATE TABLE visit (product TEXT, user TEXT, length BIGINT)")
    ex(
        "CREATE TABLE auction (id BIGINT PRIMARY KEY, category BIGINT, seller BIGINT, start_time "
        "BIGINT, expires BIGINT)"
    )
    ex("CREATE TABLE bid (bidder BIGINT, auction BIGINT, bid_time BIGINT, price DOUBLE)")
    engine.insert("info", [(f"p{i}", f"c{i % categories}") for i in range(products)])
    engine.insert("auction", [(i, i % 10, i, i, i + 100) for i in range(2000)])
    ex(
        "CREATE VIEW maxlen AS SELECT category, MAX(length) AS m FROM info JOIN visit ON "
        "info.product = visit.product WHERE category = ? GROUP BY category"
    )
    ex(
        "CREATE VIEW winning AS SELECT a.id AS auction, a.category AS category, MAX(b.price) AS "
        "price FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category"
    )
    ex(
        "CREATE VIEW avg_winning AS SELECT category, AVG(price) AS avg_price FROM winning WHERE "
        "category = ? GROUP BY category"
    )
    ex(
        "CREATE VIEW hot AS SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction HAVING "
        "COUNT(*) > 10"
    )
    df = engine.dataflow
    df.lookup("maxlen", [(f"c{i}",) for i in range(categories)], min_lsn=None, timeout=120)
    df.lookup("avg_winning", [(i,) for i in range(10)], min_lsn=None, timeout=120)
    df.lookup("hot", [()], min_lsn=None, timeout=120)
    while df.executor.fills.active:  # the join index keys the fills prefetch
        time.sleep(0.1)


def run(engine: Engine, table: str, make, batch: int, total: int
        ) -> tuple[float, float, float]:
    ex = engine.dataflow.executor
    busy0 = ex.stats.counters["busy_ns"]
    # The rows are drawn before the clock starts: drawing them is the benchmark's own
    # Python, which would hold the GIL against the executor inside the timed packets.
    writes = [[make() for _ in range(batch)] for _ in range(max(1, total // batch))]
    cpu0 = executor_cpu_seconds(ex)
    t0 = time.perf_counter()
    lsn = 0
    for rows in writes:
        lsn = engine.insert(table, rows)
    ex.wait_for(lsn, time.monotonic() + 600)
    wall = time.perf_counter() - t0
    busy = (ex.stats.counters["busy_ns"] - busy0) / 1e9
    cpu1 = executor_cpu_seconds(ex)
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else 0.0
    n = max(1, total // batch) * batch
    return n / wall, n / busy if busy else float("nan"), n / cpu if cpu else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=20_000, help="rows per measurement (default 20000)")
    ap.add_argument("--products", type=int, default=1000,
                    help="products (visits view; default 1000, the published figures')")
    ap.add_argument("--categories", type=int, default=20, help="categories (default 20)")
    ap.add_argument("--batches", default="1,100,10000", help="rows per write (default 1,100,10000)")
    args = ap.parse_args()
    rng = random.Random(1)
    spark = spark_session()
    # No checkpoints, as the write sections of bench/run.py (its checkpoints section
    # measures what they cost).
    engine = Engine(Config(data_dir=tempfile.mkdtemp() + "/data", port=0,
                           checkpoint_interval=0.0), spark)
    engine.start() if hasattr(engine, "start") else None
    try:
        setup(engine, args.products, args.categories)

        def visit() -> tuple:
            return (f"p{rng.randrange(args.products)}", f"u{rng.randrange(500)}",
                    rng.randrange(1000))

        def bid() -> tuple:
            return (rng.randrange(500), rng.randrange(2000), rng.randrange(10**6),
                    float(rng.randrange(1, 10**5)))

        print(f"{'workload':<22}{'batch':>8}{'end-to-end deltas/s':>22}{'executor deltas/s':>20}"
              f"{'per executor CPU s':>20}")
        for name, table, make in (
            ("visits view", "visit", visit),
            ("Nexmark Q4 (2 outputs)", "bid", bid),
        ):
            for batch in [int(b) for b in args.batches.split(",")]:
                total = min(args.rows, 2_000) if batch == 1 else args.rows
                e2e, alone, cpu = run(engine, table, make, batch, total)
                print(f"{name:<22}{batch:>8}{e2e:>22,.0f}{alone:>20,.0f}{cpu:>20,.0f}")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
