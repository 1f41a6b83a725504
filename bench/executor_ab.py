"""Executor CPU per row, this checkout against a baseline commit, side by side (a
benchmark, not a test).

The end-to-end write figures (``bench/run.py --only writes``) swing by 10-20% from run
to run on a shared 2-core machine, too much to see a 10% change in the dataflow. This
measures only the executor: the JVM-free stepped harness of ``tests/dataflow``
(``stepped.Harness``: the real dataflow, with a fake upquery runner answering fills from a
Python model of the tables) applies the same pre-generated writes, and the executor's
thread CPU time per row is taken around each packet. Baseline and checkout run in
alternating child processes (``--rounds`` each), each against its own code: the
baseline from a ``git worktree`` of ``--baseline`` (default HEAD, so uncommitted changes
are measured against the last commit).

Workloads (every view key filled, so every row does real work):

* ``visits``: the docs' running example 1, ``max_visit`` (info JOIN visit, MAX per category),
  with 20k products, 1,000 categories and 200k stored visits, 1000-row writes;
* ``nexmark``: Nexmark Q4's ``avg_winning`` (over ``winning``) and ``hot``, 2,000
  auctions, 10,000-row writes of bids;
* ``whole``: a view read whole (no parameter: one reader key), bids counted per auction
  over 100,000 auctions, 100-row writes: what publishing a big key costs per write;
* ``subscribed``: the same, with a subscription to that key (the change of every write
  sent): what streaming a big key's changes costs per write;
* ``visits1``, ``nexmark1`` (1-row writes) and ``visits100``, ``nexmark100`` (100-row
  writes): the same views with ``bench/dataflow_deltas.py``'s tables (1,000 products in 20
  categories, 2,000 auctions in 10): the fixed cost of a packet, as ``bench/peers.py``
  compares it with Pathway.

    python bench/executor_ab.py [--baseline REV] [--rounds 2] [--workloads visits,nexmark]

Prints, per workload, us of executor CPU per row for each round of each side (the best
third of the writes of a round) and the ratio checkout/baseline of the medians.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# rows per write, writes
WORKLOADS = {"visits": (1000, 45), "nexmark": (10_000, 15), "whole": (100, 300),
             "subscribed": (100, 150),
             # bench/dataflow_deltas.py's (and bench/peers.py's) shape, small writes: what
             # a write costs beyond its rows (the fixed cost per packet)
             "visits1": (1, 3000), "nexmark1": (1, 3000),
             "visits100": (100, 300), "nexmark100": (100, 150)}


def measure(root: Path, workload: str) -> float:
    """Child process: us of executor CPU per row, with the code under ``root``."""
    sys.path[:0] = [str(root / "tests" / "dataflow"), str(root / "tests")]
    from stepped import Harness  # the code under test comes from PYTHONPATH

    batch, writes = WORKLOADS[workload]
    rng = random.Random(1)
    h = Harness()
    try:
        table, make = _setup(h, workload, batch, rng)
        rows = [make() for _ in range(writes)]
        per_row = []
        for third in range(3):
            cpu = 0.0
            part = rows[third::3]
            for b in part:
                h.model.write(table, inserts=b)
                t0 = time.thread_time()
                h.run()
                cpu += time.thread_time() - t0
            per_row.append(cpu / (len(part) * batch) * 1e6)
        return min(per_row)
    finally:
        h.close()


def _setup(h, workload: str, batch: int, rng: random.Random):  # type: ignore[no-untyped-def]
    small = workload[-1].isdigit()  # visits1, nexmark100...: dataflow_deltas.py's tables
    if workload.startswith("visits"):
        products, categories = (1_000, 20) if small else (20_000, 1_000)
        h.table("info", [("product", "TEXT"), ("category", "TEXT")],
                [(f"p{i}", f"c{i % categories}") for i in range(products)])

        def visit() -> tuple:
            return (f"p{rng.randrange(products)}", f"u{rng.randrange(100_000)}",
                    rng.randrange(10**6))

        h.table("visit", [("product", "TEXT"), ("user_name", "TEXT"), ("length", "BIGINT")],
                [visit() for _ in range(2_000 if small else 200_000)])
        h.view("max_visit", "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
                            "ON info.product = visit.product WHERE category = ? GROUP BY category")
        h.lookup("max_visit", [(f"c{i}",) for i in range(categories)])
        h.settle()
        return "visit", lambda: [visit() for _ in range(batch)]
    if workload in ("whole", "subscribed"):
        groups = 100_000
        h.table("bid", [("auction", "BIGINT"), ("price", "DOUBLE")],
                [(i, 1.0) for i in range(groups)])
        h.view("per_auction", "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction")
        h.lookup("per_auction", [()])
        if workload == "subscribed":  # its queue (150 batches) stays under the limit
            h.df.subscribe("per_auction", [()])
        h.settle()
        return "bid", lambda: [(rng.randrange(groups), 2.0) for _ in range(batch)]
    auctions = 2_000
    h.table("auction", [("id", "BIGINT"), ("category", "BIGINT"), ("seller", "BIGINT"),
                        ("start_time", "BIGINT"), ("expires", "BIGINT")],
            [(i, i % 10, i, i, i + 100) for i in range(auctions)])
    h.table("bid", [("bidder", "BIGINT"), ("auction", "BIGINT"), ("bid_time", "BIGINT"),
                    ("price", "DOUBLE")])
    h.view("winning", "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
                      "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category")
    h.view("avg_winning", "SELECT category, AVG(price) AS avg_price FROM winning "
                          "WHERE category = ? GROUP BY category")
    h.view("hot", "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction "
                  "HAVING COUNT(*) > 10")
    h.lookup("avg_winning", [(i,) for i in range(10)])
    h.lookup("hot", [()])
    h.settle()
    return "bid", lambda: [(rng.randrange(500), rng.randrange(auctions), rng.randrange(10**6),
                            float(rng.randrange(1, 10**5))) for _ in range(batch)]


def _package_dir(tree: Path, into: Path) -> Path:
    """A directory whose ``partialflow`` package is ``tree``'s code (the subpackages are
    mapped in pyproject.toml, so ``partialflow`` itself is a namespace of symlinks)."""
    pkg = into / "partialflow"
    pkg.mkdir(parents=True)
    for sub in ("server", "client", "operators", "proto"):
        (pkg / sub).symlink_to(tree / sub)
    return into


def _child(root: Path, path: Path | None, workload: str) -> float:
    env = dict(os.environ)
    if path is not None:  # ahead of the editable install's finder
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, __file__, "--child", workload, "--root", str(root)],
                         env=env, check=True, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD", help="git revision to compare with (HEAD)")
    ap.add_argument("--rounds", type=int, default=2, help="child runs per side (2)")
    ap.add_argument("--workloads", default="visits,nexmark")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(measure(args.root, args.child))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base),
                        args.baseline], check=True)
        try:
            path = _package_dir(base, Path(tmp) / "path")
            rev = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            print(f"load average {os.getloadavg()[0]:.2f}; baseline {args.baseline} ({rev}) "
                  "vs this checkout; us of executor CPU per row (lower is better)")
            for w in args.workloads.split(","):
                got: dict[str, list[float]] = {"baseline": [], "checkout": []}
                for _ in range(args.rounds):  # alternated: drift hits both sides alike
                    got["baseline"].append(_child(base, path, w))
                    got["checkout"].append(_child(ROOT, None, w))
                b, c = statistics.median(got["baseline"]), statistics.median(got["checkout"])
                batch = WORKLOADS[w][0]
                print(f"{w:<8} {batch:>6}-row writes  baseline "
                      f"{' '.join(f'{x:.2f}' for x in got['baseline'])}  checkout "
                      f"{' '.join(f'{x:.2f}' for x in got['checkout'])}  -> x{c / b:.3f} "
                      f"({1e6 / c:,.0f} rows per executor CPU s)")
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                           check=False)


if __name__ == "__main__":
    main()
