"""Subscriptions stay live under memory pressure, against a real server.

The reported scenario: subscriptions to categories of the visits MAX-per-category view and
of a row view over the same join, while two writers insert visits, delete the longest ones
(MAX candidates run out: the group is refilled) and move products between categories (the
join key moves), and another client's ``lookup_many`` of a different view keeps a small
memory limit evicting. Before the fix the streams' LSNs stood still (heartbeats repeating
one LSN) for most of the run and caught up only once the writes stopped. Now each stream's
LSN moves at least every GAP_BOUND seconds while the writes go on (generous for CI's two
busy cores) and is at the last write soon after, and the rows a subscriber rebuilds equal
Spark SQL over the base tables (``query(..., as_of=lsn)``) at the LSNs it was told (a
spread sample: one Spark query per LSN; the stepped test in
tests/dataflow/test_subscription_liveness.py checks every event).
"""

from __future__ import annotations

import random
import threading
import time

from helpers import InProcessServer
from test_subscribe import Rebuilt, check_against_spark

from partialflow.client import Change, Snapshot
from partialflow.server.dataflow.subscriptions import DEFER_MAX

# Seconds a stream's LSN may stand still while the writers write (heartbeats come every
# second; before the fix they kept coming at one LSN for the whole run). A stream waits
# for its holes' refills: a hole waits up to DEFER_MAX for a refill of the subscription
# in flight (refills in rounds), then for a free fill slot of its state (at most two fills
# of one state run at once: up to one upquery's time), then for its own upquery, and the
# updates that refill replays may meet a join index key evicted meanwhile and wait for an
# index fill (another upquery). So the bound is DEFER_MAX plus three of the slowest
# upqueries of the run (measured on the executor's upquery hook, as the /metrics histogram
# is) plus a second for the executor and the stream. CI on 2026-11-27: 6.5 s with the
# slowest upquery at 1.7 s, where two refills' time (the bound before) was 5.4 s. A stream
# stalled for the rest of the run (the defect) still stands still longer on a machine as
# quiet as CI's; the stepped JVM-free test (tests/dataflow/test_subscription_liveness.py)
# is the sharp check, in steps rather than seconds.
GAP_BOUND = 5.0
RUN = 20.0  # seconds of writes once both streams have their snapshot
LIMIT = 1024 * 1024  # the pad view alone needs more
CATS = [f"c{i}" for i in range(10)]
SUBSCRIBED = CATS[:8]
PRODUCTS = [f"p{i}" for i in range(120)]


class Stream:
    """A subscription read on its own thread: when its LSN moved, the rebuilt rows at every
    LSN it was told, and the first error."""

    def __init__(self, client, view: str, keys: list[str]) -> None:
        self.sub = client.subscribe(view, keys)
        self.rebuilt = Rebuilt()
        self.times: list[tuple[float, int]] = []  # (arrival, lsn) of each newer LSN
        self.error: BaseException | None = None
        self.snapshot = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.sub:
                if not isinstance(event, Change) or (
                        self.rebuilt.pending_lsn is not None
                        and event.lsn != self.rebuilt.pending_lsn):
                    self.rebuilt.batch_done()
                self.rebuilt.apply(event)
                if not self.times or event.lsn > self.times[-1][1]:
                    self.times.append((time.monotonic(), event.lsn))
                if isinstance(event, Snapshot):
                    self.snapshot.set()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            if not self.sub._closed:
                self.error = e

    def gaps_after(self, t0: float) -> float:
        """The longest time its LSN stood still from ``t0`` on (to now)."""
        ts = [t for t, _ in self.times if t >= t0] + [time.monotonic()]
        last, worst = t0, 0.0
        for t in ts:
            worst, last = max(worst, t - last), t
        return worst

    def close(self) -> None:
        self.sub.close()
        self.thread.join(timeout=10)
        self.rebuilt.batch_done()


def test_subscriptions_stay_live_under_pressure_refills_and_moves(spark, tmp_path):
    rng = random.Random(31)
    where = {p: rng.choice(CATS) for p in PRODUCTS}
    visits = [(p, f"u{i}", rng.randrange(1000)) for i in range(20) for p in PRODUCTS]
    mx_sql = ("SELECT category, MAX(length) AS max_length FROM info JOIN visit "
              "ON info.product = visit.product WHERE category = ? GROUP BY category")
    rows_sql = ("SELECT category, visit.product, length FROM info JOIN visit "
                "ON info.product = visit.product WHERE category = ?")
    with InProcessServer(tmp_path / "data", spark, memory_limit=LIMIT) as srv, \
            srv.client(timeout=120) as c:
        c.execute("CREATE TABLE info (product TEXT, category TEXT)")
        c.execute("CREATE TABLE visit (product TEXT, usr TEXT, length BIGINT)")
        c.execute("CREATE TABLE pad (k BIGINT, body TEXT)")
        c.insert("info", list(where.items()))
        c.insert("visit", visits)
        c.insert("pad", [(k, "x" * 300) for k in range(6000)])
        c.execute(f"CREATE VIEW mx AS {mx_sql}")
        c.execute(f"CREATE VIEW vrows AS {rows_sql}")
        c.execute("CREATE VIEW padv AS SELECT k, body FROM pad WHERE k = ?")
        upqueries: list[tuple[float, float]] = []  # (when it landed, seconds)

        def observe(event: str, fields: dict) -> None:
            if event == "upquery":
                upqueries.append((time.monotonic(), float(fields.get("ms", 0.0)) / 1000))

        assert srv.engine is not None
        srv.engine.dataflow.executor.observers.append(observe)
        streams = [Stream(c, "mx", SUBSCRIBED), Stream(c, "vrows", SUBSCRIBED[:3])]
        for s in streams:
            assert s.snapshot.wait(120), f"no snapshot: {s.error!r}"

        stop = threading.Event()
        lock = threading.Lock()
        last = [0]
        errors: list[str] = []

        def writer(seed: int) -> None:
            r = random.Random(seed)
            with srv.client(timeout=120) as w:
                while not stop.is_set():
                    x = r.random()
                    try:
                        with lock:
                            if x < 0.35:  # a product moves: the join key moves
                                p = r.choice(PRODUCTS)
                                new = r.choice([k for k in CATS if k != where[p]])
                                lsn = w.update("info", [(p, where[p])], [(p, new)])
                                where[p] = new
                            elif x < 0.7:  # the longest visit goes: MAX candidates run out
                                visits.sort(key=lambda v: v[2])
                                lsn = w.delete("visit", [visits.pop()])
                            else:
                                row = (r.choice(PRODUCTS), "w", r.randrange(1000))
                                lsn = w.insert("visit", [row])
                                visits.append(row)
                            last[0] = max(last[0], lsn)
                    except Exception as e:  # noqa: BLE001 - reported by the test
                        errors.append(f"writer: {e!r}")
                        return
                    stop.wait(0.03)

        def presser() -> None:  # another client's reads keep the memory limit evicting
            r = random.Random(7)
            with srv.client(timeout=120) as p:
                while not stop.is_set():
                    try:
                        p.lookup_many("padv", r.sample(range(6000), 300))
                    except Exception as e:  # noqa: BLE001 - reported by the test
                        errors.append(f"presser: {e!r}")
                        return

        threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
        threads.append(threading.Thread(target=presser))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(RUN)
        gaps = [s.gaps_after(t0) for s in streams]
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[0]
        final = last[0]
        deadline = time.monotonic() + 60
        while any(s.rebuilt.lsn < final for s in streams) and time.monotonic() < deadline:
            time.sleep(0.2)
        for s in streams:
            s.close()
        for s in streams:
            assert s.error is None, s.error
        stats = c.stats()
        assert stats.get("memory_evictions", 0) > 0, "the memory limit should have evicted"
        assert stats.get("exhausted", 0) > 0, "MAX candidates should have run out"
        slowest = max((sec for t, sec in upqueries if t >= t0), default=0.0)
        bound = max(GAP_BOUND, DEFER_MAX + 3 * slowest + 1)
        for s, gap in zip(streams, gaps, strict=True):
            assert gap <= bound, (f"a stream's LSN stood still for {gap:.1f}s; slowest "
                                  f"upquery {slowest:.1f}s ({stats})")
            assert s.rebuilt.lsn >= final, f"stuck at LSN {s.rebuilt.lsn}, writes at {final}"
        keys = [(k,) for k in SUBSCRIBED]
        inlist = ", ".join(f"'{k}'" for k in SUBSCRIBED)
        check_against_spark(
            c, streams[0].rebuilt, f"SELECT category, category, MAX(length) FROM info JOIN visit "
            f"ON info.product = visit.product WHERE category IN ({inlist}) GROUP BY category",
            keys, samples=6)
        inlist = ", ".join(f"'{k}'" for k in SUBSCRIBED[:3])
        check_against_spark(
            c, streams[1].rebuilt, f"SELECT category, category, visit.product, length FROM info "
            f"JOIN visit ON info.product = visit.product WHERE category IN ({inlist})",
            keys[:3], samples=4)
