"""Load functions that run in the harness's worker processes (see common.LoadPool).

``run(spec)`` starts ``spec["threads"]`` threads, each with its own Client (its own
channel), waits for the wall-clock instant ``spec["start_at"]`` so every process starts
together, then loops one operation for ``spec["seconds"]`` (or ``spec["calls"]`` calls
per thread) and returns counts and per-call latencies (seconds).

Operations (``spec["op"]["kind"]``):

- ``ping``: the no-op RPC, the transport's own limit; with ``payload`` and ``reply_bytes``
  (byte counts) it moves as many bytes as a call it is compared with;
- ``lookup``: ``lookup_many(view, batch keys)`` (``lookup`` for batch 1) with keys drawn
  from ``keys`` (``{"type": "zipf", "n", "s"}``, ``{"type": "uniform", "n"}``,
  ``{"type": "list", "values"}``, or ``{"type": "each", "values"}``: thread i reads
  ``values[i]`` once); with ``predraw``
  (a count) the key batches are drawn before the clock starts and used in turn;
- ``query``: the view's SQL on Spark per request (``sql`` with ``{key}``): recomputation;
- ``write``: inserts from a generator (``visits``, ``nexmark``, or ``events`` for users
  drawn from ``keys``), optionally paced to ``rate`` rows/s per thread;
- ``probe``: one-row writes, each followed by a lookup that waits for it (``min_lsn``):
  write-to-visible latency.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import datasets

from partialflow.client import Client

MAX_SAMPLES = 300_000  # latencies kept per process (reservoir beyond that)


class _Keys:
    def __init__(self, spec: dict, seed: int) -> None:
        self.spec = spec
        self.rng = random.Random(seed)
        kind = spec["type"]
        if kind == "zipf":
            import numpy as np
            from common import zipf_cdf, zipf_key

            self.n = spec["n"]
            self.cdf = zipf_cdf(self.n, spec["s"])
            self.np_rng = np.random.default_rng(seed)
            self.zipf_key = zipf_key
        elif kind == "uniform":
            self.n = spec["n"]
        elif kind in ("list", "each"):
            self.values = spec["values"]

    def take(self, k: int) -> list[Any]:
        kind = self.spec["type"]
        if kind == "zipf":
            import numpy as np

            ranks = np.searchsorted(self.cdf, self.np_rng.random(k), side="right")
            return [self.zipf_key(int(r), self.n) for r in ranks]
        if kind == "uniform":
            return [self.rng.randrange(self.n) for _ in range(k)]
        return [self.rng.choice(self.values) for _ in range(k)]


class _Recorder:
    def __init__(self, seed: int) -> None:
        self.lat: list[float] = []
        self.extra: dict[str, list[float]] = {}
        self.seen = 0
        self.rng = random.Random(seed)

    def add(self, x: float) -> None:
        self.seen += 1
        if len(self.lat) < MAX_SAMPLES:
            self.lat.append(x)
        else:
            j = self.rng.randrange(self.seen)
            if j < MAX_SAMPLES:
                self.lat[j] = x


def _make_op(op: dict, client: Client, tno: int, seed: int) -> Callable[[_Recorder], int]:
    """An operation for one thread: does one call, returns the items it moved."""
    kind = op["kind"]
    if kind == "ping":
        payload, reply = b"\x01" * op.get("payload", 0), op.get("reply_bytes", 0)

        def ping(rec: _Recorder) -> int:
            client.ping(payload, reply)
            return 1
        return ping
    if kind == "lookup" and op["keys"]["type"] == "each":
        key = op["keys"]["values"][tno]

        def once(rec: _Recorder) -> int:
            client.lookup(op["view"], key)
            return 1
        return once
    if kind == "lookup":
        keys = _Keys(op["keys"], seed)
        view, batch = op["view"], op.get("batch", 1)
        take = keys.take
        if op.get("predraw"):
            # ``predraw`` batches drawn now, before the clock starts, then used in turn:
            # drawing 1000 keys with random.choice costs about as much as decoding the
            # answer, and that is the load generator's work, not the lookup's.
            drawn = [keys.take(batch) for _ in range(op["predraw"])]
            turn = iter(range(1 << 62))

            def take(k: int) -> list[Any]:
                return drawn[next(turn) % len(drawn)]

        def lookup(rec: _Recorder) -> int:
            ks = take(batch)
            if batch == 1:
                client.lookup(view, ks[0])
            else:
                client.lookup_many(view, ks)
            return batch
        return lookup
    if kind == "query":
        keys = _Keys(op["keys"], seed)
        sql = op["sql"]

        def query(rec: _Recorder) -> int:
            client.query(sql.format(key=_sql_literal(keys.take(1)[0])))
            return 1
        return query
    if kind == "write":
        return _writer(op, client, tno, seed)
    if kind == "probe":
        return _prober(op, client, tno, seed)
    raise ValueError(f"unknown op {kind}")


def _sql_literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v)


def _writer(op: dict, client: Client, tno: int, seed: int) -> Callable[[_Recorder], int]:
    gen, batch, suffix = op["gen"], op["batch"], op.get("suffix", "")
    rate = op.get("rate")  # rows/s for this thread, or None for as fast as possible
    rng = random.Random(seed)
    pace = {"next": time.monotonic()}
    if gen == "visits":
        def make() -> dict[str, list[tuple]]:
            return {"visit": datasets.visit_rows(rng, batch, op["products"])}
    elif gen == "events":  # rows of ``events`` for users drawn from ``keys`` (see _Keys)
        users = _Keys(op["keys"], seed)

        def make() -> dict[str, list[tuple]]:
            return {"events": [(u, 1) for u in users.take(batch)]}
    else:
        nx = datasets.Nexmark(seed=seed, people=op["people"], auctions=op["auctions"],
                              id_base=(seed + 1) * 10**9)

        def make() -> dict[str, list[tuple]]:
            return nx.batch(batch)

    def write(rec: _Recorder) -> int:
        if rate:
            pace["next"] += batch / rate
            delay = pace["next"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        n = 0
        for table, rows in make().items():
            if rows:
                client.insert(table + suffix, rows)
                n += len(rows)
        return n
    return write


def _prober(op: dict, client: Client, tno: int, seed: int) -> Callable[[_Recorder], int]:
    """Write one row, then read the key it changes with min_lsn = the write's LSN."""
    rng = random.Random(seed)
    interval = op.get("interval", 0.05)

    def probe(rec: _Recorder) -> int:
        time.sleep(interval * (0.5 + rng.random()))
        if op["gen"] == "visits":
            p = rng.randrange(op["products"])
            table, row = "visit", (f"p{p}", "probe", rng.randrange(1_000_000))
            view, key = "max_visit", datasets.category_of(p, op["categories"])
        else:  # a bid: thread 0 waits until hot (its count) shows it, thread 1 avg_winning
            a = rng.randrange(op["auctions"])
            table, row = "bid", datasets.bid_row(0, a, 0, rng)
            view, key = ("hot", ()) if tno % 2 == 0 else ("avg_winning", a % datasets.CATEGORIES)
        t0 = time.perf_counter()
        lsn = client.insert(table, [row])
        t1 = time.perf_counter()
        client.lookup(view, key, min_lsn=lsn)
        t2 = time.perf_counter()
        rec.extra.setdefault("ack", []).append(t1 - t0)
        name = "visible_avg_winning" if view == "avg_winning" else "visible"
        rec.extra.setdefault(name, []).append(t2 - t0)
        return 1
    return probe


def run(spec: dict) -> dict:
    """Run one load spec in this process; see the module docstring."""
    threads = spec["threads"]
    seconds, calls = spec.get("seconds"), spec.get("calls")
    recs = [_Recorder(spec.get("seed", 0) * 1000 + t) for t in range(threads)]
    counts = [[0, 0, 0] for _ in range(threads)]  # calls, items, errors
    errors: list[str] = []
    ready = threading.Barrier(threads + 1)
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * threads

    def loop(t: int) -> None:
        seed = spec.get("seed", 0) * 1000 + t
        with Client(spec["address"], timeout=spec.get("timeout", 300.0)) as client:
            client.ping()  # connect before the clock starts
            op = _make_op(spec["op"], client, t + spec.get("thread_base", 0), seed)
            ready.wait()
            delay = spec.get("start_at", 0) - time.time()
            if delay > 0:  # every process starts at the same instant
                time.sleep(delay)
            rec = recs[t]
            began = time.perf_counter()
            end = began + seconds if seconds else None
            n = 0
            while (end is None or time.perf_counter() < end) and (calls is None or n < calls):
                t0 = time.perf_counter()
                try:
                    items = op(rec)
                except Exception as e:  # counted and reported, never silently dropped
                    counts[t][2] += 1
                    if len(errors) < 5:
                        errors.append(f"{type(e).__name__}: {e}".splitlines()[0][:300])
                    continue
                finally:
                    n += 1
                rec.add(time.perf_counter() - t0)
                counts[t][0] += 1
                counts[t][1] += items
            spans[t] = (began, time.perf_counter())

    workers = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    try:
        ready.wait(timeout=120)
    except threading.BrokenBarrierError:
        return {"error": "threads did not get ready", "trace": traceback.format_exc()}
    for w in workers:
        w.join()
    lat = [x for r in recs for x in r.lat]
    extra: dict[str, list[float]] = {}
    for r in recs:
        for k, v in r.extra.items():
            extra.setdefault(k, []).extend(v)
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    return {
        "calls": sum(c[0] for c in counts),
        "items": sum(c[1] for c in counts),
        "errors": sum(c[2] for c in counts),
        "error_samples": errors,
        "elapsed": last - first,
        "lat": lat,
        "extra": extra,
        "ended_at": time.time(),
    }
