"""Load of the "reads under a stream" section (bench/stream.py), run in the harness's
worker processes (common.LoadPool) like bench/loadgen.py.

``run(spec)`` does one of (``spec["kind"]``):

- ``writer``: an open-loop, rate-controlled writer. A scheduler thread emits a tick every
  ``1 / writes_per_s`` seconds on a fixed timetable (the rows of ``rate`` rows/s spread
  over the ticks; a tick's rows go out as one write per table, one after another) and
  hands each tick to a pool of sender threads, so a slow server never slows the timetable
  down. Latency of a tick is measured from its *scheduled* instant to its last
  acknowledgement (no coordinated omission); ``lag`` is how late its send started (only
  non-zero when every sender thread was busy, or the scheduler itself ran late). The
  stream goes on past ``seconds`` until the harness creates ``stop_file`` (when every
  reader and probe has finished its last call), so reads in flight at the end still see
  writes arriving.

  - ``visits``: new visits of random products, and a fraction ``move_fraction`` of the
    rows are products changing category (an atomic delete + insert on ``info``): both
    kinds of update join against the other side's index and can miss it.
  - ``nexmark``: the Nexmark generator (new people, new auctions, bids on hot, old and
    this writer's new auctions): a new auction misses the bids index.
- ``reader``: ``threads`` clients (each its own channel) that read ``view`` by key, keys
  drawn uniformly from ``keys``, back to back for ``seconds``. Every read has a deadline
  (the client's timeout); a read that fails or times out is an error, and its time until
  the failure counts in the latencies too.
- ``probe``: loadgen's write-to-visible probe (one-row write, then a lookup with
  ``min_lsn`` of its LSN), with failed probes counted and timed.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import datasets
import loadgen

from partialflow.client import Client

MAX_ERROR_SAMPLES = 5


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def _wait_start(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


# -- writer --------------------------------------------------------------------------------

class _Visits:
    """Rows of the visits stream; category moves never overlap for one product (the
    delete of an in-flight move's old row would be refused), and a product whose move
    failed (applied or not: unknown) is never moved again."""

    def __init__(self, spec: dict, rng: random.Random) -> None:
        self.rng = rng
        self.products = spec["products"]
        self.categories = spec["categories"]
        self.frac = spec.get("move_fraction", 0.1)
        self.cur: dict[int, str] = {int(p): c for p, c in spec.get("moved", {}).items()}
        self.unknown: set[int] = {int(p) for p in spec.get("unknown", [])}
        self.busy: set[int] = set()
        self.lock = threading.Lock()
        self.due = 0.0
        self.moves_sent = 0

    def category(self, p: int) -> str:
        return self.cur.get(p, datasets.category_of(p, self.categories))

    def make(self, n: int) -> tuple[list[tuple[str, list, list]], list[int]]:
        self.due += n * self.frac
        want = min(n, int(self.due))
        self.due -= want
        old, new, moved = [], [], []
        with self.lock:
            for _ in range(want):
                for _attempt in range(20):
                    p = self.rng.randrange(self.products)
                    if p not in self.busy and p not in self.unknown and p not in moved:
                        break
                else:
                    continue
                was = self.category(p)
                to = was
                while to == was:
                    to = f"c{self.rng.randrange(self.categories)}"
                old.append((f"p{p}", was))
                new.append((f"p{p}", to))
                moved.append(p)
                self.cur[p] = to
                self.busy.add(p)
        writes: list[tuple[str, list, list]] = []
        if moved:
            writes.append(("info", new, old))
            self.moves_sent += len(moved)
        visits = n - len(moved)
        if visits:
            writes.append(("visit", datasets.visit_rows(self.rng, visits, self.products), []))
        return writes, moved

    def done(self, moved: list[int], ok: bool) -> None:
        with self.lock:
            for p in moved:
                self.busy.discard(p)
                if not ok:
                    self.unknown.add(p)


class _Nexmark:
    def __init__(self, spec: dict, seed: int) -> None:
        self.nx = datasets.Nexmark(seed=seed, people=spec["people"], auctions=spec["auctions"],
                                   id_base=spec["id_base"])
        self.counts = {"person": 0, "auction": 0, "bid": 0}

    def make(self, n: int) -> tuple[list[tuple[str, list, list]], list[int]]:
        out: list[tuple[str, list, list]] = []
        for table, rows in self.nx.batch(n).items():  # person, auction, bid: in that order
            if rows:
                out.append((table, rows, []))
                self.counts[table] += len(rows)
        return out, []

    def done(self, moved: list[int], ok: bool) -> None:
        pass


def _writer(spec: dict) -> dict:
    rate = float(spec["rate"])
    ticks_per_s = min(float(spec.get("writes_per_s", 20)), rate)
    interval = 1.0 / ticks_per_s
    seconds = spec["seconds"]
    rng = random.Random(spec["seed"])
    gen: Any = _Visits(spec, rng) if spec["gen"] == "visits" else _Nexmark(spec, spec["seed"])
    lock = threading.Lock()
    ack: list[float] = []
    lag: list[float] = []
    errors: list[str] = []
    st = {"writes_ok": 0, "rows_ok": 0, "errors": 0, "scheduled": 0, "rows_scheduled": 0,
          "last_lsn": 0}

    def send(client: Client, sched: float, writes: list[tuple[str, list, list]],
             moved: list[int], rows: int) -> None:
        began = time.monotonic()
        ok = False
        try:
            lsn = 0
            for table, ins, dels in writes:
                lsn = client.write(table, inserts=ins, deletes=dels)
            ok = True
            with lock:
                ack.append(time.monotonic() - sched)
                lag.append(began - sched)
                st["writes_ok"] += 1
                st["rows_ok"] += rows
                st["last_lsn"] = max(st["last_lsn"], lsn)
        except Exception as e:  # counted and reported, never dropped
            with lock:
                st["errors"] += 1
                lag.append(began - sched)
                if len(errors) < MAX_ERROR_SAMPLES:
                    errors.append(_err(e))
        finally:
            gen.done(moved, ok)

    senders = spec.get("senders", 64)
    with Client(spec["address"], timeout=spec["deadline"]) as client:
        client.ping()
        pool = ThreadPoolExecutor(max_workers=senders)
        _wait_start(spec["start_at"])
        began = time.monotonic()
        due = 0.0
        k = 0
        # After ``seconds`` the stream goes on until the harness says every reader and
        # probe is done (``stop_file`` exists), so no read in flight sees the writes stop.
        stop_file, cap = spec.get("stop_file"), seconds + spec.get("max_extra_s", 0.0)
        while True:
            sched = began + k * interval
            if sched >= began + seconds and (
                    not stop_file or os.path.exists(stop_file) or sched >= began + cap):
                break
            delay = sched - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            due += rate * interval
            n = int(due)
            due -= n
            k += 1
            if n == 0:
                continue
            writes, moved = gen.make(n)
            st["scheduled"] += 1
            st["rows_scheduled"] += n
            pool.submit(send, client, sched, writes, moved, n)
        sched_end = time.monotonic()
        pool.shutdown(wait=True)
        ended = time.monotonic()
    out: dict[str, Any] = {
        **st, "error_samples": errors, "ack": ack, "lag": lag,
        "schedule_s": sched_end - began, "elapsed": ended - began,
        "extended_s": max(0.0, sched_end - began - seconds),
        "drain_after_schedule_s": ended - sched_end, "ticks_per_s": ticks_per_s,
    }
    if isinstance(gen, _Visits):
        out["moves"] = gen.moves_sent
        out["moved"] = {str(p): c for p, c in gen.cur.items()}
        out["unknown"] = sorted(gen.unknown)
    else:
        out["tables"] = gen.counts
    return out


# -- readers and probes --------------------------------------------------------------------

def _threads(spec: dict, body: Any) -> list[dict]:
    threads = spec.get("threads", 1)
    results: list[dict] = [{} for _ in range(threads)]
    ready = threading.Barrier(threads + 1)

    def one(t: int) -> None:
        try:
            results[t] = body(t, ready)
        except Exception as e:  # a thread that died is reported, not lost
            results[t] = {"crash": _err(e)}
            try:
                ready.wait(timeout=1)
            except threading.BrokenBarrierError:
                pass

    ws = [threading.Thread(target=one, args=(t,), daemon=True) for t in range(threads)]
    for w in ws:
        w.start()
    try:
        ready.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass  # a thread crashed before it was ready: its result says so
    for w in ws:
        w.join()
    return results


def _reader(spec: dict) -> dict:
    view, keys = spec["view"], spec["keys"]
    seconds = spec["seconds"]

    def body(t: int, ready: threading.Barrier) -> dict:
        rng = random.Random(spec["seed"] * 1000 + t)
        lat: list[float] = []
        ok = errs = 0
        samples: list[str] = []
        answers: list[dict] = []
        with Client(spec["address"], timeout=spec["deadline"]) as client:
            client.ping()
            ready.wait()
            _wait_start(spec["start_at"])
            began = time.perf_counter()
            end = began + seconds
            mid = began + seconds / 2
            while time.perf_counter() < end:
                key = rng.choice(keys)
                k = tuple(key) if isinstance(key, list) else key
                t0 = time.perf_counter()
                try:
                    r = client.lookup(view, k)
                except Exception as e:
                    lat.append(time.perf_counter() - t0)
                    errs += 1
                    if len(samples) < MAX_ERROR_SAMPLES:
                        samples.append(_err(e))
                    continue
                t1 = time.perf_counter()
                lat.append(t1 - t0)
                ok += 1
                if not answers and t1 >= mid:  # one answer per thread to check on Spark
                    answers.append({"view": view, "key": key, "lsn": r.lsn,
                                    "rows": [list(x) for x in r.rows]})
            return {"lat": lat, "ok": ok, "errors": errs, "error_samples": samples,
                    "answers": answers, "elapsed": time.perf_counter() - began}

    parts = _threads(spec, body)
    return _merge_threads(parts)


def _probe(spec: dict) -> dict:
    op = spec["op"]
    seconds = spec["seconds"]

    def body(t: int, ready: threading.Barrier) -> dict:
        seed = spec["seed"] * 1000 + t
        rec = loadgen._Recorder(seed)
        failed: list[float] = []
        samples: list[str] = []
        ok = 0
        with Client(spec["address"], timeout=spec["deadline"]) as client:
            client.ping()
            probe = loadgen._prober(op, client, t, seed)
            # loadgen's probe: nexmark thread 0 waits for hot, thread 1 for avg_winning
            name = "visible_avg_winning" if op["gen"] == "nexmark" and t % 2 else "visible"
            ready.wait()
            _wait_start(spec["start_at"])
            began = time.perf_counter()
            end = began + seconds
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                try:
                    probe(rec)
                    ok += 1
                except Exception as e:
                    failed.append(time.perf_counter() - t0)
                    rec.extra.setdefault("failed_" + name, []).append(failed[-1])
                    if len(samples) < MAX_ERROR_SAMPLES:
                        samples.append(_err(e))
            return {"lat": [], "ok": ok, "errors": len(failed), "failed": failed,
                    "error_samples": samples, "extra": rec.extra,
                    "elapsed": time.perf_counter() - began}

    return _merge_threads(_threads(spec, body))


def _merge_threads(parts: list[dict]) -> dict:
    crashed = [p["crash"] for p in parts if "crash" in p]
    parts = [p for p in parts if "crash" not in p]
    extra: dict[str, list[float]] = {}
    for p in parts:
        for k, v in p.get("extra", {}).items():
            extra.setdefault(k, []).extend(v)
    return {
        "lat": [x for p in parts for x in p["lat"]],
        "ok": sum(p["ok"] for p in parts),
        "errors": sum(p["errors"] for p in parts) + len(crashed),
        "error_samples": ([f"reader thread crashed: {c}" for c in crashed]
                          + [s for p in parts for s in p["error_samples"]])[:MAX_ERROR_SAMPLES],
        "failed": [x for p in parts for x in p.get("failed", [])],
        "answers": [a for p in parts for a in p.get("answers", [])],
        "extra": extra,
        "elapsed": max((p["elapsed"] for p in parts), default=0.0),
    }


def run(spec: dict) -> dict:
    """One load spec in this worker process (see the module docstring)."""
    kind = spec["kind"]
    if kind == "writer":
        return _writer(spec)
    if kind == "reader":
        return _reader(spec)
    if kind == "probe":
        return _probe(spec)
    raise ValueError(f"unknown stream load {kind}")
