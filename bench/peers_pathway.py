"""The seed views maintained by Pathway, for bench/peers.py (run as a child process).

    python bench/peers_pathway.py SPEC.json

SPEC names a pickle of the rows bench/peers.py drew (the same rows every engine gets),
the AVG formulation (``default``: ``pw.reducers.avg``, what a user writes; ``strict``:
``sum(strict=True) / count()``) and where to write the result (JSON). Pathway runs with
``PATHWAY_THREADS`` from the environment (bench/peers.py sets 1) and persistence off.

Each phase's batches go through a ``pw.io.python.ConnectorSubject`` (one per table,
``next`` per row, ``commit()`` per batch: one Pathway time per write). A phase is timed
from just before its first row is pushed until the outputs reflect its last batch: that
batch carries a marker row (a product, and auctions, of categories of their own) whose
effect on each view is known, and the clock stops in ``on_time_end`` of the output time
that shows it. Every view's whole output also goes to a JSON-lines file (Pathway's own
writer, in Rust): consolidated at the end, it is the answer checked for exactness.
Inputs are declared retractable, as partialflow's tables are (Pathway would otherwise
keep MAX append-only).
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

MARK_PRODUCT, MARK_CATEGORY = "p_mark", "c_mark"
MARK_AUCTION, MARK_ACAT = 10**7, 99
MARK_PRICE = 1e9
MARK_FILL_BIDS = 12  # > 10: the marker auction is in `hot` from the fill on


def mark_avg(k: int) -> float:
    """avg_winning of the marker category after k bid phases: the marker auction at
    MARK_PRICE plus one new marker auction per phase at MARK_PRICE + j (a new auction
    changes the group's count, so even the default AVG shows it)."""
    return (MARK_PRICE + sum(MARK_PRICE + j for j in range(1, k + 1))) / (k + 1)


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name, from /proc schedstat."""
    out: dict[str, float] = {}
    base = "/proc/self/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + ns / 1e9
    return out


def consolidate(path: Path, cols: list[str]) -> list[tuple]:
    """The rows of a JSON-lines output once every diff is summed (each must end 0 or 1)."""
    counts: dict[tuple, int] = {}
    if path.exists():
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                k = tuple(r[c] for c in cols)
                counts[k] = counts.get(k, 0) + int(r["diff"])
    bad = {k: c for k, c in counts.items() if c not in (0, 1)}
    if bad:
        raise AssertionError(f"{path.name}: rows with multiplicity other than 0/1: {bad}")
    return [k for k, c in counts.items() if c == 1]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    data = pickle.loads(Path(spec["rows"]).read_bytes())
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    import pathway as pw

    class Info(pw.Schema):
        product: str = pw.column_definition(primary_key=True)
        category: str

    class Visit(pw.Schema):
        product: str
        user: str
        length: int

    class Auction(pw.Schema):
        aid: int = pw.column_definition(primary_key=True)  # "id" is Pathway's row id
        category: int
        seller: int
        start_time: int
        expires: int

    class Bid(pw.Schema):
        bidder: int
        auction: int
        bid_time: int
        price: float

    cols = {"visit": ["product", "user", "length"],
            "bid": ["bidder", "auction", "bid_time", "price"]}

    class Feeder(pw.io.python.ConnectorSubject):
        """Pushes the batches it is handed, one commit() (one Pathway time) per batch."""

        def __init__(self, names: list[str]) -> None:
            super().__init__()
            self.names = names
            self.cmds: queue.Queue = queue.Queue()

        @property
        def _deletions_enabled(self) -> bool:
            return True

        def run(self) -> None:
            names, nxt = self.names, self.next
            while True:
                cmd = self.cmds.get()
                if cmd is None:
                    return
                batches, done = cmd
                for rows in batches:
                    for row in rows:
                        nxt(**dict(zip(names, row, strict=True)))
                    self.commit()
                done.set()

    class Once(Feeder):
        """A finite input (info, auction): pushed in one batch, then closed, so an idle
        input does not hold the output frontier back."""

        def __init__(self, names: list[str], rows: list[tuple]) -> None:
            super().__init__(names)
            self.rows = rows

        def run(self) -> None:
            for row in self.rows:
                self.next(**dict(zip(self.names, row, strict=True)))
            self.commit()

    phases = data["phases"]
    bid_phases = sum(1 for p in phases if p["table"] == "bid")
    feeders = {
        "info": Once(["product", "category"],
                     [*data["info"], (MARK_PRODUCT, MARK_CATEGORY)]),
        "auction": Once(["aid", "category", "seller", "start_time", "expires"],
                        [*data["auction"], *((MARK_AUCTION + j, MARK_ACAT, 0, 0, 0)
                                             for j in range(bid_phases + 1))]),
        "visit": Feeder(cols["visit"]), "bid": Feeder(cols["bid"]),
    }

    def read(name: str, schema: Any) -> Any:
        return pw.io.python.read(feeders[name], schema=schema, autocommit_duration_ms=None,
                                 name=name)

    info, visit = read("info", Info), read("visit", Visit)
    auction, bid = read("auction", Auction), read("bid", Bid)

    j = info.join(visit, info.product == visit.product).select(
        category=info.category, length=visit.length)
    maxlen = j.groupby(j.category).reduce(j.category, m=pw.reducers.max(j.length))
    w = auction.join(bid, auction.aid == bid.auction).select(
        auction=auction.aid, category=auction.category, price=bid.price)
    winning = w.groupby(w.auction, w.category).reduce(
        w.auction, w.category, price=pw.reducers.max(w.price))
    if spec["avg"] == "strict":
        avg_expr = pw.reducers.sum(winning.price, strict=True) / pw.reducers.count()
    else:
        avg_expr = pw.reducers.avg(winning.price)
    avg_winning = winning.groupby(winning.category).reduce(winning.category, avg_price=avg_expr)
    hot = bid.groupby(bid.auction).reduce(bid.auction, bids=pw.reducers.count()).filter(
        pw.this.bids > 10)
    views = {"maxlen": (maxlen, ["category", "m"]),
             "avg_winning": (avg_winning, ["category", "avg_price"]),
             "hot": (hot, ["auction", "bids"])}
    for name, (table, _) in views.items():
        pw.io.jsonlines.write(table, str(out_dir / f"{name}.jsonl"))

    class Watch:
        """The marker row of one view: the value of the last output time that showed it."""

        def __init__(self, name: str, table: Any, key_col: str, key: Any, val_col: str) -> None:
            self.name, self.key_col, self.key, self.val_col = name, key_col, key, val_col
            self.cond = threading.Condition()
            self.pending: Any = None
            self.mark: Any = None
            self.mark_at = 0.0
            pw.io.subscribe(table.filter(pw.this[key_col] == key), on_change=self.on_change,
                            on_time_end=self.on_time_end, name=f"watch-{name}")

        def on_change(self, key: Any, row: dict, time: int, is_addition: bool) -> None:
            if is_addition:
                self.pending = row[self.val_col]

        def on_time_end(self, t: int) -> None:
            if self.pending is not None:
                now = time.perf_counter()
                with self.cond:
                    self.mark, self.mark_at, self.pending = self.pending, now, None
                    self.cond.notify_all()

        def wait(self, value: Any, timeout: float = 600.0) -> float:
            deadline = time.monotonic() + timeout
            with self.cond:
                while self.mark != value:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"{self.name}: marker {value} not seen "
                                           f"(last {self.mark})")
                    self.cond.wait(left)
                return self.mark_at

    w_max = Watch("maxlen", maxlen, "category", MARK_CATEGORY, "m")
    w_avg = Watch("avg_winning", avg_winning, "category", MARK_ACAT, "avg_price")
    w_hot = Watch("hot", hot, "auction", MARK_AUCTION, "bids")

    results: list[dict] = []
    errors: list[str] = []

    def push(table: str, batches: list[list[tuple]]) -> threading.Event:
        done = threading.Event()
        feeders[table].cmds.put((batches, done))
        return done

    def controller() -> None:
        try:
            push("visit", [[(MARK_PRODUCT, "u_mark", 0)]])
            push("bid", [[(0, MARK_AUCTION, 0, MARK_PRICE)] * MARK_FILL_BIDS])
            w_max.wait(0)
            w_avg.wait(mark_avg(0))
            w_hot.wait(MARK_FILL_BIDS)
            seq = {"visit": 0, "bid": 0}
            for ph in phases:
                table = ph["table"]
                seq[table] += 1
                k = seq[table]
                batches = [list(rows) for rows in ph["writes"]]
                if table == "visit":
                    batches[-1].append((MARK_PRODUCT, "u_mark", k))
                else:
                    batches[-1].append((0, MARK_AUCTION, 0, MARK_PRICE))
                    batches[-1].append((0, MARK_AUCTION + k, 0, MARK_PRICE + k))
                n = sum(len(r) for r in ph["writes"])
                cpu0 = thread_cpu()
                t0 = time.perf_counter()
                done = push(table, batches)
                if table == "visit":
                    t1 = w_max.wait(k)
                else:
                    t1 = max(w_avg.wait(mark_avg(k)), w_hot.wait(MARK_FILL_BIDS + k))
                done.wait()
                cpu1 = thread_cpu()
                work = sum(v - cpu0.get(name, 0.0) for name, v in cpu1.items()
                           if name.startswith("pathway:work"))
                wall = t1 - t0
                results.append({"table": table, "batch": ph["batch"], "rows": n,
                                "wall_s": round(wall, 4), "rows_per_s": round(n / wall),
                                "worker_cpu_s": round(work, 4),
                                "rows_per_worker_cpu_s": round(n / work) if work else None})
        except BaseException as e:  # noqa: BLE001 (reported in the result file)
            import traceback

            errors.append(traceback.format_exc())
            print(f"peers_pathway: {e!r}", file=sys.stderr, flush=True)
        finally:
            for t in ("visit", "bid"):
                feeders[t].cmds.put(None)

    threading.Thread(target=controller, name="controller", daemon=True).start()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)

    answers: dict[str, list] = {}
    for name, (_, vcols) in views.items():
        rows = consolidate(out_dir / f"{name}.jsonl", vcols)
        marker = MARK_AUCTION if name == "hot" else (
            MARK_CATEGORY if name == "maxlen" else MARK_ACAT)
        # the marker groups are the harness's own: not part of the answer checked
        answers[name] = [list(r) for r in rows if r[0] != marker and not (
            name == "hot" and r[0] > MARK_AUCTION)]
    Path(spec["result"]).write_text(json.dumps({
        "pathway": pw.__version__, "threads": os.environ.get("PATHWAY_THREADS", "1"),
        "avg": spec["avg"], "phases": results, "answers": answers, "errors": errors,
    }))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
