"""Change subscriptions against a real server: the rows a subscriber rebuilds from its
events equal Spark SQL over the base tables (``query(..., as_of=lsn)``, which shares
nothing with the dataflow) at every LSN it was told, under concurrent writes, evictions
and join misses; resuming from an LSN; a slow reader cut off with the LSN to resume from;
bad input refused; pinning and the memory limit."""

from __future__ import annotations

import contextlib
import io
import random
import threading
import time
from collections import Counter

import pytest
from helpers import InProcessServer

from partialflow.client import (
    CaughtUp,
    Change,
    FailedPrecondition,
    Heartbeat,
    InvalidArgument,
    NotFound,
    OutOfRange,
    ResourceExhausted,
    Snapshot,
    Unavailable,
)
from partialflow.client.cli import main as cli_main
from partialflow.server.verifier import same_rows


class Rebuilt:
    """A subscriber's rows per key, rebuilt from the events, with the state at each LSN
    it was told (every key is exact there)."""

    def __init__(self) -> None:
        self.rows: dict[tuple, Counter] = {}
        self.at: dict[int, dict[tuple, list[tuple]]] = {}
        self.lsn = 0
        self.pending_lsn: int | None = None

    def apply(self, event) -> None:
        if isinstance(event, Snapshot):
            self.rows = {k: Counter(v) for k, v in event.rows.items()}
            self._told(event.lsn)
        elif isinstance(event, Change):
            bag = self.rows.setdefault(event.key, Counter())
            for r in event.deleted:
                assert bag[r] > 0, f"deleted a row not held: {r} of {event.key} at {event.lsn}"
                bag[r] -= 1
            bag.update(event.inserted)
            bag += Counter()  # drop zero counts
            assert event.lsn >= self.lsn
            self.pending_lsn = event.lsn
        else:
            assert isinstance(event, (Heartbeat, CaughtUp))
            self._told(event.lsn)

    def _told(self, lsn: int) -> None:
        assert lsn >= self.lsn, f"LSN went back: {lsn} after {self.lsn}"
        self.lsn = lsn
        self.pending_lsn = None
        self.at[lsn] = self.snapshot()

    def batch_done(self) -> None:
        """All changes of ``pending_lsn`` applied (the next event has another LSN)."""
        if self.pending_lsn is not None:
            self._told(self.pending_lsn)

    def snapshot(self) -> dict[tuple, list[tuple]]:
        return {k: sorted(v.elements(), key=repr) for k, v in self.rows.items()}


def consume(sub, rebuilt: Rebuilt, until_lsn: int, timeout: float = 60.0) -> None:
    """Apply events until a heartbeat (or snapshot) at ``until_lsn`` or later."""
    deadline = time.monotonic() + timeout
    for event in sub:
        if not isinstance(event, Change) or (
            rebuilt.pending_lsn is not None and event.lsn != rebuilt.pending_lsn
        ):
            rebuilt.batch_done()
        rebuilt.apply(event)
        if isinstance(event, (Heartbeat, Snapshot, CaughtUp)) and event.lsn >= until_lsn:
            return
        assert time.monotonic() < deadline, "the subscription did not catch up"


def check_against_spark(client, rebuilt: Rebuilt, oracle: str, keys: list[tuple],
                        samples: int = 8) -> int:
    """Compare the rebuilt rows at up to ``samples`` told LSNs (first, last and spread)
    with ``oracle`` (SQL whose first column is the key, then the view's columns) run on
    Spark as of each LSN. Returns how many LSNs were checked."""
    lsns = sorted(rebuilt.at)
    if len(lsns) > samples:
        step = (len(lsns) - 1) / (samples - 1)
        lsns = sorted({lsns[round(i * step)] for i in range(samples)})
    for lsn in lsns:
        want: dict[tuple, list[tuple]] = {k: [] for k in keys}
        for row in client.query(oracle, as_of=lsn).rows:
            want.setdefault((row[0],), []).append(tuple(row[1:]))
        got = rebuilt.at[lsn]
        for k in keys:
            assert same_rows(got.get(k, []), want[k]), (
                f"key {k} at LSN {lsn}: rebuilt {got.get(k)} but Spark says {want[k]}")
    return len(lsns)


def test_changes_equal_spark_under_writes_evictions_and_join_misses(server, uniq):
    info, visit, mx, tot = f"{uniq}info", f"{uniq}visit", f"{uniq}max_visit", f"{uniq}tot"
    rng = random.Random(15)
    cats = ["Fruit", "Vegetable", "Nut"]
    with server.client(timeout=120) as c:
        c.execute(f"CREATE TABLE {info} (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {visit} (product TEXT, usr TEXT, length BIGINT)")
        c.insert(info, [("Apple", "Fruit"), ("Banana", "Fruit"), ("Carrot", "Vegetable")])
        c.insert(visit, [("Apple", "Alice", 10), ("Apple", "Bob", 20), ("Carrot", "Bob", 50)])
        c.execute(f"CREATE VIEW {mx} AS SELECT category, MAX(length) AS max_length "
                  f"FROM {info} JOIN {visit} ON {info}.product = {visit}.product "
                  "WHERE category = ? GROUP BY category")
        c.execute(f"CREATE VIEW {tot} AS SELECT product, SUM(length) AS total, "
                  f"COUNT(*) AS n FROM {visit} WHERE product = ? GROUP BY product")
        products = ["Apple", "Banana", "Carrot", "Date", "Elder"]
        sub_mx = c.subscribe(mx, cats)
        sub_tot = c.subscribe(tot, products)
        r_mx, r_tot = Rebuilt(), Rebuilt()
        consume(sub_mx, r_mx, 0)
        consume(sub_tot, r_tot, 0)

        # Tall visits deleted from the top: MAX's candidates (8) run out, the group
        # becomes a hole and is refilled; the subscriber sees one correction.
        tall = [("Carrot", f"T{i}", 200 + i) for i in range(12)]
        c.insert(visit, tall)
        for _ in range(9):
            lsn = c.delete(visit, [tall.pop()])
        consume(sub_mx, r_mx, lsn)
        assert r_mx.rows[("Vegetable",)] == Counter({("Vegetable", 202): 1})
        assert c.stats()["exhausted"] > 0

        stop = threading.Event()
        last = [0]
        visits: list[tuple] = [("Apple", "Alice", 10), ("Apple", "Bob", 20),
                               ("Carrot", "Bob", 50), *tall]

        def writer() -> None:
            n = 0
            with server.client(timeout=120) as w:
                while not stop.is_set():
                    n += 1
                    if n % 7 == 0:  # a new product: the join's info index misses on it
                        p = f"P{n}"
                        last[0] = w.insert(info, [(p, rng.choice(cats))])
                        row = (p, "Zed", rng.randint(1, 100))
                    elif visits and rng.random() < 0.35:  # deletions exhaust MAX candidates
                        row = visits.pop(rng.randrange(len(visits)))
                        last[0] = w.delete(visit, [row])
                        continue
                    else:
                        row = (rng.choice(products), rng.choice(["Al", "Bo"]),
                               rng.randint(1, 100))
                    visits.append(row)
                    last[0] = w.insert(visit, [row])
                    if n % 10 == 0:
                        w.evict(mx, rng.choice(cats))
                        w.evict(tot, (rng.choice(products),))
                    time.sleep(0.01)

        t = threading.Thread(target=writer)
        t.start()
        done = time.monotonic() + 4.0
        while time.monotonic() < done:  # read both streams while writes go on
            consume(sub_mx, r_mx, 0)
            consume(sub_tot, r_tot, 0)
        stop.set()
        t.join()
        consume(sub_mx, r_mx, last[0])
        consume(sub_tot, r_tot, last[0])
        sub_mx.close()
        sub_tot.close()
        assert len(r_mx.at) > 3 and len(r_tot.at) > 3
        stats = c.stats()
        assert stats["views"][mx]["evictions"] > 0
        assert stats["index_fills"] > 0
        n = check_against_spark(
            c, r_mx, f"SELECT category, category, MAX(length) FROM {info} JOIN {visit} "
            f"ON {info}.product = {visit}.product WHERE category IN ('Fruit', 'Vegetable', "
            "'Nut') GROUP BY category", [(k,) for k in cats])
        n += check_against_spark(
            c, r_tot, f"SELECT product, product, SUM(length), COUNT(*) FROM {visit} "
            f"WHERE product IN ({', '.join(repr(p) for p in products)}) GROUP BY product",
            [(p,) for p in products])
        assert n >= 8


def test_resume_many_keys_from_an_lsn(server, uniq):
    t, v = f"{uniq}kv", f"{uniq}kv_sum"
    keys = list(range(60))
    with server.client(timeout=120) as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, x BIGINT)")
        c.insert(t, [(k, k) for k in keys])
        c.execute(f"CREATE VIEW {v} AS SELECT k, SUM(x) AS s FROM {t} WHERE k = ? GROUP BY k")
        rebuilt = Rebuilt()
        sub = c.subscribe(v, keys)
        first = next(sub)
        assert isinstance(first, Snapshot) and first.columns == ["k", "s"]
        assert first.rows[(5,)] == [(5, 5)] and len(first.rows) == len(keys)
        rebuilt.apply(first)
        lsn = c.insert(t, [(k, 1) for k in keys[:10]])
        consume(sub, rebuilt, lsn)
        sub.close()
        held = sub.lsn
        assert held >= lsn
        # Writes while disconnected: changed, new and deleted rows.
        c.insert(t, [(k, 100) for k in keys[20:30]])
        c.delete(t, [(k, k) for k in keys[40:45]])
        last = c.insert(t, [(59, 7)])
        resumed = c.subscribe(v, keys, from_lsn=held)
        events = []
        for event in resumed:
            events.append(event)
            if isinstance(event, CaughtUp):
                break
        assert not any(isinstance(e, Snapshot) for e in events)
        assert events[-1].lsn >= last and events[-1].columns == ["k", "s"]
        changed = {e.key for e in events if isinstance(e, Change)}
        assert changed == {(k,) for k in keys[20:30] + keys[40:45] + [59]}
        for e in events:
            rebuilt.batch_done() if isinstance(e, CaughtUp) else None
            rebuilt.apply(e)
        lsn2 = c.insert(t, [(0, 1000)])
        consume(resumed, rebuilt, lsn2)
        resumed.close()
        check_against_spark(c, rebuilt, f"SELECT k, k, SUM(x) FROM {t} GROUP BY k",
                            [(k,) for k in keys], samples=3)
        assert rebuilt.at[max(rebuilt.at)][(0,)] == [(0, 1001)]  # 0 + 1 + 1000


def test_slow_reader_is_cut_off_with_the_lsn_to_resume_from(server, uniq):
    t, v = f"{uniq}blob", f"{uniq}blob_rows"
    big = "x" * 60_000
    with server.client(timeout=120) as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, n BIGINT, body TEXT)")
        c.execute(f"CREATE VIEW {v} AS SELECT k, n, body FROM {t} WHERE k = ?")
        sub = c.subscribe(v, [1], max_buffered=4)
        assert isinstance(next(sub), Snapshot)
        # Not reading: gRPC's own buffers fill with these big batches, then the server's
        # queue of 4 does.
        last = 0
        for n in range(250):
            last = c.insert(t, [(1, n, big)])
        rebuilt = Rebuilt()
        rebuilt.apply(Snapshot({(1,): []}, 0))
        with pytest.raises(ResourceExhausted) as err:
            consume(sub, rebuilt, last)
        resume = err.value.resume_lsn
        assert f"resume from LSN {resume}" in str(err.value)
        assert 0 < resume < last
        rebuilt.batch_done()
        assert rebuilt.lsn <= resume  # the events received end at or before it
        # What was received is the rows at the resume LSN exactly (nothing later).
        assert sum(rebuilt.rows.get((1,), Counter()).values()) == resume_count(c, t, resume)
        resumed = c.subscribe(v, [1], from_lsn=resume)
        inserted = 0
        for event in resumed:
            if isinstance(event, Change):
                assert not event.deleted
                inserted += len(event.inserted)
            if isinstance(event, CaughtUp):
                break
        resumed.close()
        assert inserted == 250 - resume_count(c, t, resume)
        assert wait_unsubscribed(c)


def resume_count(c, t: str, lsn: int) -> int:
    return c.query(f"SELECT COUNT(*) FROM {t}", as_of=lsn).rows[0][0]


def wait_unsubscribed(c) -> bool:
    for _ in range(50):
        if c.stats()["subscriptions"] == 0:
            return True
        time.sleep(0.1)
    return False


def test_bad_input_is_refused_naming_the_problem(server, uniq):
    t, v = f"{uniq}bad", f"{uniq}bad_v"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, s TEXT)")
        lsn = c.insert(t, [(1, "a")])
        c.execute(f"CREATE VIEW {v} AS SELECT k, s FROM {t} WHERE k = ? AND s = ?")
        cases = [
            (NotFound, f"{uniq}nope", [(1, "a")], None, "unknown view"),
            (InvalidArgument, v, [(1,)], None, "takes 2 parameter"),
            (InvalidArgument, v, [("x", "a")], None, "is BIGINT"),
            (InvalidArgument, v, [(1, None)], None, "NULL"),
            (InvalidArgument, v, [], None, "at least one key"),
            (OutOfRange, v, [(1, "a")], lsn + 10_000, "beyond the last"),
            (InvalidArgument, v, [(1, "a")], -1, "must not be negative"),
        ]
        for cls, view, keys, from_lsn, text in cases:
            with pytest.raises(cls) as err:
                next(c.subscribe(view, keys, from_lsn=from_lsn))
            assert text in str(err.value), (view, keys, str(err.value))
        assert wait_unsubscribed(c)
        # Dropping a view ends its subscriptions (UNAVAILABLE, with the LSN to resume from).
        sub = c.subscribe(v, [(1, "a")])
        assert next(sub).rows == {(1, "a"): [(1, "a")]}
        c.execute(f"DROP VIEW {v}")
        with pytest.raises(Unavailable, match="was dropped") as err:
            list(sub)
        assert err.value.resume_lsn >= lsn
        assert wait_unsubscribed(c)


def test_pinned_keys_and_the_memory_limit(spark, tmp_path):
    with InProcessServer(tmp_path / "data", spark, memory_limit=40_000, workers=4) as srv, \
            srv.client(timeout=120) as c:
        c.execute("CREATE TABLE m (k BIGINT, x BIGINT)")
        c.insert("m", [(k, k) for k in range(400)])
        c.execute("CREATE VIEW ms AS SELECT k, SUM(x) AS s FROM m WHERE k = ? GROUP BY k")
        with pytest.raises(ResourceExhausted, match="memory limit"):
            next(c.subscribe("ms", list(range(300))))
        sub = c.subscribe("ms", [1, 2, 3])
        assert next(sub).rows[(2,)] == [(2, 2)]
        stats = c.stats()
        assert stats["subscriptions"] == 1 and stats["subscribed_keys"] == 3
        # Memory pressure: reading many other keys evicts cold ones, never the pinned.
        for i in range(4, 400, 50):
            c.lookup_many("ms", list(range(i, i + 50)))
        assert c.stats()["memory_evictions"] > 0
        st = srv.engine.dataflow.graph.readers["ms"].state
        assert all(st.is_filled((k,)) for k in (1, 2, 3))
        lsn = c.insert("m", [(2, 5)])
        rebuilt = Rebuilt()
        rebuilt.apply(Snapshot({(k,): [(k, k)] for k in (1, 2, 3)}, 0))
        consume(sub, rebuilt, lsn)
        assert rebuilt.rows[(2,)] == Counter({(2, 7): 1})
        # A refill that fails (Spark down) ends the stream with UNAVAILABLE and the LSN to
        # resume from, instead of retrying at every packet.
        faults = srv.engine.dataflow.runner.faults
        faults.mode = "fail"
        try:
            c.evict("ms", 2)
            with pytest.raises(Unavailable, match="refilling subscribed key") as err:
                consume(sub, rebuilt, lsn + 1_000)
            assert err.value.resume_lsn == rebuilt.lsn >= lsn
        finally:
            faults.mode = ""
        sub.close()
        assert wait_unsubscribed(c)
        assert not srv.engine.dataflow.executor.evictor.pins
        # Streams hold handler threads: at most half of --workers (4) are open at once.
        open_subs = [c.subscribe("ms", [k]) for k in (1, 2)]
        for s in open_subs:
            next(s)
        with pytest.raises(ResourceExhausted, match="too many open subscriptions"):
            next(c.subscribe("ms", [3]))
        for s in open_subs:
            s.close()
        assert wait_unsubscribed(c)
        assert next(c.subscribe("ms", [3])).rows == {(3,): [(3, 3)]}


class _Printed(io.StringIO):
    """stdout for a command run in this thread: tells another thread when ``text`` was
    printed."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.text in self.getvalue():
            self.seen.set()
        return n


def test_watch_prints_changes(server, uniq):
    t, v = f"{uniq}w", f"{uniq}w_v"
    printed = _Printed("key=[9]")  # the snapshot's last line
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, x BIGINT)")
        c.insert(t, [(1, 1)])
        c.execute(f"CREATE VIEW {v} AS SELECT k, x FROM {t} WHERE k = ?")

        def write_later() -> None:
            # Once the snapshot is out (a write before it would be in the snapshot, not a
            # change: a fixed sleep raced with watch's start on a loaded machine).
            if printed.seen.wait(120):
                c.insert(t, [(1, 2)])

        th = threading.Thread(target=write_later)
        th.start()
        with contextlib.redirect_stdout(printed):
            code = cli_main(["watch", "--server", server.address, "--count", "2", v, "1", "9"])
        th.join()
    out = printed.getvalue().splitlines()
    assert code == 0
    assert "snapshot key=[1] rows=[[1, 1]]" in out[0] and "key=[9] rows=[]" in out[1]
    assert "change key=[1] +[[1, 2]] -[]" in out[2]


def test_resume_from_beyond_the_retention_horizon_is_refused(spark, tmp_path):
    with InProcessServer(tmp_path / "data", spark, retention_lsns=3) as srv, srv.client() as c:
        c.execute("CREATE TABLE short (k BIGINT, a BIGINT)")
        c.execute("CREATE VIEW short_v AS SELECT k, a FROM short WHERE k = ?")
        first = c.insert("short", [(1, 0)])
        for i in range(1, 10):
            c.update("short", [(1, i - 1)], [(1, i)])
        c.flush()
        c.compact("short")
        with pytest.raises(FailedPrecondition, match=r"retention|horizon|compacted"):
            next(c.subscribe("short_v", [1], from_lsn=first))
        # A recent LSN resumes: the first batch replaces the row held then.
        recent = c.stats()["lsn"] - 1
        events = []
        for event in c.subscribe("short_v", [1], from_lsn=recent):
            events.append(event)
            if isinstance(event, CaughtUp):
                break
        assert [(e.inserted, e.deleted) for e in events if isinstance(e, Change)] == [
            ([(1, 9)], [(1, 8)])]
