"""The load: writer and reader threads, the fault schedule and the progress line.

Writers each own a share of the rows (the seed rows dealt out, the products and auctions
with ``i % writers == w``), so their deletes and updates never conflict: any refusal is a
finding, not a race. Readers pick a view, then keys (mostly from a hot fifth of the
domain, sometimes uniformly: cold), sometimes evict first, and read with ``lookup`` or
``lookup_many``. Every answer goes into the journal for verification after the run.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partialflow.client import PartialflowError
from partialflow.client.stress import workload as wl
from partialflow.client.stress.record import Failure, FaultWindow, Journal, Read, Write


@dataclass
class LoadConfig:
    writers: int
    readers: int
    duration: float
    evict_rate: float
    write_rate: float  # writes/s per writer; 0 = as fast as the server acknowledges
    seed: int
    faults: list[str]
    fault_window: float


def _failure(what: str, err: Exception, start: float, end: float, detail: str) -> Failure:
    kind = (
        type(err).__name__
        if isinstance(err, PartialflowError)
        else f"{type(err).__name__} (client)"
    )
    return Failure(what, kind, str(err).splitlines()[0] if str(err) else "", start, end, detail)


# Of a writer's writes, the share sent as transactions over several tables
# (PARTIALFLOW_STRESS_TX_SHARE overrides it, e.g. 0 to compare a run without them).
TX_SHARE = float(os.environ.get("PARTIALFLOW_STRESS_TX_SHARE", "0.3"))


class Writer:
    """One writer thread's share of the data and its next write."""

    def __init__(
        self, index: int, count: int, seed_rows: dict[str, list[tuple]], rng: random.Random
    ) -> None:
        self.rng = rng
        # Bag tables: the rows this writer may delete or update (its share of the seed).
        self.bags = {t: seed_rows[t][index::count] for t in ("visit", "bid", "score")}
        self.targets = {t: max(5, len(rows)) for t, rows in self.bags.items()}
        category = dict(seed_rows["info"])
        self.products = {p: category[p] for i, p in enumerate(wl.PRODUCTS) if i % count == index}
        self.auctions = {r[0]: r for r in seed_rows["auction"] if r[0] % count == index}

    def next_write(self) -> tuple[str, str, list[tuple], list[tuple]]:
        """(table, op, deletes, inserts) of the next write; the model assumes it succeeds."""
        table = self.rng.choices(
            ["visit", "bid", "score", "info", "auction"], [35, 25, 20, 10, 10]
        )[0]
        if table == "info" and self.products:
            return self._info()
        if table == "auction" and self.auctions:
            old = self.auctions[self.rng.choice(list(self.auctions))]
            new = (old[0], self.rng.choice(wl.AUCTION_CATEGORIES), *old[2:])
            self.auctions[old[0]] = new
            return "auction", "update", [old], [new]
        table = table if table in self.bags else "visit"
        return self._bag(table)

    def _info(self) -> tuple[str, str, list[tuple], list[tuple]]:
        product = self.rng.choice(list(self.products))
        old = self.products[product]
        if old is None:  # deleted earlier: bring it back
            new = self.rng.choice(wl.CATEGORIES)
            self.products[product] = new
            return "info", "insert", [], [(product, new)]
        if self.rng.random() < 0.15:
            self.products[product] = None
            return "info", "delete", [(product, old)], []
        new = self.rng.choice([c for c in wl.CATEGORIES if c != old])
        self.products[product] = new
        return "info", "update", [(product, old)], [(product, new)]

    def _bag(self, table: str) -> tuple[str, str, list[tuple], list[tuple]]:
        rows, target = self.bags[table], self.targets[table]
        make = {"visit": wl.visit_row, "bid": wl.bid_row, "score": wl.score_row}[table]
        r = self.rng.random()
        p_insert = 0.55 if len(rows) < 0.8 * target else 0.2 if len(rows) > 1.2 * target else 0.4
        if not rows or r < p_insert:
            new = [make(self.rng) for _ in range(self.rng.randint(1, 3))]
            rows.extend(new)
            return table, "insert", [], new
        if r < p_insert + 0.3:
            gone = [
                rows.pop(self.rng.randrange(len(rows)))
                for _ in range(min(len(rows), self.rng.randint(1, 2)))
            ]
            return table, "delete", gone, []
        old = rows.pop(self.rng.randrange(len(rows)))
        # The same row with a new last column (length, price, points).
        changed = (*old[:-1], make(self.rng)[-1])
        rows.append(changed)
        return table, "update", [old], [changed]


def run_writer(
    client: Any, prefix: str, writer: Writer, journal: Journal, stop: threading.Event, rate: float
) -> None:
    gap = 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    while not stop.is_set():
        # Some writes are transactions of 2-3 writes (to different tables or the same one):
        # one LSN for all, recorded as one Write per part, so the views over two tables
        # (joins, MAX and AVG over them) are checked at LSNs that hold them whole.
        n = writer.rng.randint(2, 3) if writer.rng.random() < TX_SHARE else 1
        parts = [writer.next_write() for _ in range(n)]
        start = journal.now()
        try:
            if n == 1:
                table, _, deletes, inserts = parts[0]
                lsn = client.write(prefix + table, inserts=inserts, deletes=deletes)
            else:
                tx = client.transaction()
                for table, _, deletes, inserts in parts:
                    tx.write(prefix + table, inserts=inserts, deletes=deletes)
                lsn = tx.commit()
        except Exception as err:  # noqa: BLE001 - every failure is a finding for the report
            what = " + ".join(f"{op} {table}" for table, op, _, _ in parts)
            journal.failures.append(_failure("write", err, start, journal.now(), what))
            # The model assumed success; after a failed write it no longer knows the table,
            # so this writer stops rather than record writes that may not match.
            return
        for table, op, deletes, inserts in parts:
            journal.writes.append(Write(lsn, table, op, deletes, inserts))
        if gap:
            next_at = max(next_at + gap, time.monotonic() - 1.0)
            stop.wait(max(0.0, next_at - time.monotonic()))


def _pick_keys(rng: random.Random, keys: tuple[tuple, ...]) -> list[tuple]:
    """Mostly keys from the hot fifth of the domain, sometimes uniform (cold ones)."""
    hot = keys[: max(1, len(keys) // 5)]
    n = 1 if rng.random() < 0.7 or len(keys) == 1 else rng.randint(2, min(6, len(keys)))
    out: list[tuple] = []
    while len(out) < n:
        k = rng.choice(hot) if rng.random() < 0.8 else rng.choice(keys)
        if k not in out:
            out.append(k)
    return out


def run_reader(
    client: Any,
    prefix: str,
    index: int,
    views: list[wl.ViewSpec],
    journal: Journal,
    stop: threading.Event,
    rng: random.Random,
    evict_rate: float,
    plant: tuple[str, Callable[[str, tuple], bool]] | None = None,
) -> None:
    """Read until ``stop``. With ``plant`` = (view, corrupt), the first key of that view this
    reader reads gets a wrong row planted and is read again at once (a self-test: the
    verification must then fail)."""
    last_lsn = 0
    again: tuple[wl.ViewSpec, list[tuple]] | None = None
    while not stop.is_set():
        spec, keys = again or (None, [])
        if spec is None:
            spec = rng.choice(views)
            keys = _pick_keys(rng, spec.keys)
        name = prefix + spec.name
        if again is None and rng.random() < evict_rate:
            start = journal.now()
            try:
                # Mostly one key; now and then every key of the view.
                everything = rng.random() < 0.02
                n = client.evict(name, None if everything else keys[0])
                journal.count(evictions=1, evicted_keys=n)
            except Exception as err:  # noqa: BLE001
                journal.add(
                    failure=_failure("evict", err, start, journal.now(), f"{spec.name} {keys[0]!r}")
                )
        start = journal.now()
        t0 = time.perf_counter()
        try:
            if len(keys) == 1:
                got = {keys[0]: client.lookup(name, keys[0])}
                call = "lookup"
            else:
                got = client.lookup_many(name, keys)
                call = "lookup_many"
        except Exception as err:  # noqa: BLE001
            journal.add(
                failure=_failure("read", err, start, journal.now(), f"{spec.name} {keys!r}")
            )
            stop.wait(0.05)  # as a client would: don't spin on a fault that fails at once
            continue
        ms = (time.perf_counter() - t0) * 1000
        reads = []
        # Against this reader's earlier calls: the keys of one lookup_many may be exact at
        # different LSNs (a key blocked by a stream of join misses answers at the LSN it was
        # last exact at), but none older than what this client read before.
        before = last_lsn
        for key, result in got.items():
            if result.lsn < before:
                journal.lsn_regressions.append(
                    f"reader {index}: {spec.name} {key!r} at LSN {result.lsn} after LSN {before}"
                )
            last_lsn = max(last_lsn, result.lsn)
            reads.append(
                Read(spec.name, tuple(key), result.lsn, list(result.rows), start, ms, call, index)
            )
        journal.add(reads=reads, call=(ms, call, len(keys)))
        again = None
        if plant is not None and spec.name == plant[0] and journal.planted is None:
            start = journal.now()
            try:
                if plant[1](name, keys[0]):
                    journal.planted = f"{spec.name} key {keys[0]!r} at {start:.1f} s"
                    again = (spec, keys[:1])
            except Exception as err:  # noqa: BLE001 - e.g. hooks refused: a failure to report
                journal.add(
                    failure=_failure("plant", err, start, journal.now(), f"{spec.name} {keys[0]!r}")
                )
                plant = None


def fault_schedule(
    modes: list[str], duration: float, window: float
) -> list[tuple[float, float, str]]:
    """(start, end, mode) windows in the middle of the load (seconds from its start), gaps
    between them, and a clean first fifth and last quarter (so the run also shows recovery)."""
    if not modes:
        return []
    span = duration * 0.55
    window = min(window, span / (2 * len(modes) - 1))
    t = duration * 0.2
    out = []
    for mode in modes:
        out.append((t, t + window, mode))
        t += 2 * window
    return out


def run_faults(
    set_mode: Callable[[str], None],
    schedule: list[tuple[float, float, str]],
    journal: Journal,
    stop: threading.Event,
) -> None:
    try:
        for start, end, mode in schedule:
            if stop.wait(max(0.0, start - journal.now())):
                return
            set_mode(mode)
            window = FaultWindow(mode, journal.now(), float("inf"))
            journal.windows.append(window)
            stop.wait(max(0.0, end - journal.now()))
            set_mode("")
            window.end = journal.now()
            if stop.is_set():
                return
    finally:
        set_mode("")  # never leave a fault behind, whatever happened
        for w in journal.windows:
            w.end = min(w.end, journal.now())


def progress_line(journal: Journal, elapsed: float) -> str:
    reads, writes = len(journal.reads), len(journal.writes)
    errors = len(journal.failures)
    active = next((w.mode for w in journal.windows if w.end == float("inf")), "")
    rate = f"{writes / elapsed:.0f} w/s, {reads / elapsed:.0f} r/s" if elapsed > 0 else ""
    fault = f", FAULT {active}" if active else ""
    return (
        f"[{elapsed:5.0f}s] writes {writes}, reads {reads} ({rate}), evictions "
        f"{journal.evictions}, "
        f"errors {errors}{fault}"
    )


def run_progress(journal: Journal, stop: threading.Event, out: Any = sys.stderr) -> None:
    """A live line: rewritten in place on a terminal, a new line every 5 s otherwise."""
    tty = hasattr(out, "isatty") and out.isatty()
    every = 1.0 if tty else 5.0
    while not stop.wait(every):
        line = progress_line(journal, journal.now())
        if tty:
            out.write("\r" + line.ljust(100)[:160])
        else:
            out.write(line + "\n")
        out.flush()
    if tty:
        out.write("\n")
        out.flush()
