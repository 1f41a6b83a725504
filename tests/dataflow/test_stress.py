"""Concurrency stress: writers, cold and hot readers and evictions at once, under a
memory limit small enough to force constant eviction. Every read is checked against
Spark SQL over the base tables at the read's own LSN (one Spark job per view, see
history_oracle.py), and no client may ever see its LSN go backwards.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from helpers import InProcessServer
from history_oracle import Recorder, first, verify
from oracle import bind_params, norm

from partialflow.server.dataflow import publish

# The load runs DURATION seconds and then on until MIN_READS reads were made (all of them
# checked against Spark), so a shorter default checks no fewer reads on a slow machine.
# A longer load adds more of the same interleavings (3 writers, 4 readers, evictions all
# the time), not new kinds, and a longer history for the oracle to rebuild.
DURATION = float(os.environ.get("PARTIALFLOW_STRESS_SECONDS", "8"))
MIN_READS = 150
# No fault is active here: every read must be answered within this bound. A read that
# times out fails the test (a read that never returns is a failure, like a wrong one).
READ_BOUND = 20.0
SUMMARY = "partialflow_summary"  # a user property printed in the run's summary (conftest.py)

SCHEMAS = {
    "info": "product string, category string",
    "visit": "product string, user string, length bigint",
    "score": "game bigint, player bigint, points bigint",
    "auction": "id bigint, category bigint",
    "bid": "auction bigint, bidder bigint, price double",
}
PRODUCTS = [f"p{i}" for i in range(40)]
CATEGORIES = [f"c{i}" for i in range(8)]
USERS = [f"u{i}" for i in range(30)]

VIEWS = {
    "maxlen": (
        "SELECT category, MAX(length) AS max_length FROM info JOIN visit ON info.product = "
        "visit.product WHERE category = ? GROUP BY category",
        "SELECT i._at, i.category, i.category, MAX(v.length) FROM info_at i JOIN visit_at v ON "
        "i.product = v.product AND i._at = v._at GROUP BY i._at, i.category",
        1,
    ),
    "top3": (
        "SELECT game, player, points FROM score WHERE game = ? ORDER BY points DESC, player LIMIT "
        "3",
        "SELECT _at, game, game, player, points FROM (SELECT *, row_number() OVER (PARTITION BY "
        "_at, game ORDER BY points DESC, player, game) AS rn FROM score_at) WHERE rn <= 3",
        1,
    ),
    "product_visits": (
        "SELECT visit.product, visit.user, visit.length, info.category FROM visit JOIN info ON "
        "visit.product = info.product WHERE visit.product = ?",
        "SELECT v._at, v.product, v.product, v.user, v.length, i.category FROM visit_at v JOIN "
        "info_at i ON v.product = i.product AND v._at = i._at",
        1,
    ),
    "long_visits": (
        "SELECT user, product, length FROM visit WHERE length > 30 AND user = ?",
        "SELECT _at, user, user, product, length FROM visit_at WHERE length > 30",
        1,
    ),
    "winning": (
        "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price FROM auction a JOIN "
        "bid b ON a.id = b.auction GROUP BY a.id, a.category",
        None,
        0,
    ),
    "avg_winning": (
        "SELECT category, AVG(price) AS avg_price FROM winning WHERE category = ? GROUP BY "
        "category",
        "SELECT _at, category, category, AVG(price) FROM (SELECT a._at, a.id, a.category, "
        "MAX(b.price) AS price FROM auction_at a JOIN bid_at b ON a.id = b.auction AND a._at = "
        "b._at GROUP BY a._at, a.id, a.category) GROUP BY _at, category",
        1,
    ),
    "hot": (
        "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction HAVING COUNT(*) > 10",
        "SELECT _at, auction, COUNT(*) FROM bid_at GROUP BY _at, auction HAVING COUNT(*) > 10",
        0,
    ),
}
KEYS = {
    "maxlen": [(c,) for c in CATEGORIES],
    "top3": [(g,) for g in range(25)],
    "product_visits": [(p,) for p in PRODUCTS],
    "long_visits": [(u,) for u in USERS],
    "avg_winning": [(c,) for c in range(5)],
    "hot": [()],
}


@pytest.fixture(scope="module")
def small_server(spark, tmp_path_factory):
    srv = InProcessServer(
        tmp_path_factory.mktemp("stress") / "data", spark, memory_limit=96 * 1024
    ).start()
    yield srv
    srv.stop()


def _setup(c, rec: Recorder, rng: random.Random) -> None:
    for t, schema in SCHEMAS.items():
        cols = ", ".join(
            f"{n} {'TEXT' if ty == 'string' else 'DOUBLE' if ty == 'double' else 'BIGINT'}"
            for n, ty in (x.split() for x in schema.split(", "))
        )
        c.execute(f"CREATE TABLE {t} ({cols})")
    seed = {
        "info": [(p, rng.choice(CATEGORIES)) for p in PRODUCTS],
        "visit": [
            (rng.choice(PRODUCTS), rng.choice(USERS), rng.randrange(100)) for _ in range(300)
        ],
        "score": [(rng.randrange(25), rng.randrange(50), rng.randrange(1000)) for _ in range(300)],
        "auction": [(i, i % 5) for i in range(60)],
        "bid": [
            (rng.randrange(60), rng.randrange(40), float(rng.randrange(1, 1000)))
            for _ in range(600)
        ],
    }
    for t, rows in seed.items():
        rec.write(c.insert(t, rows), t, rows, +1)
    for name, (sql, _, _) in VIEWS.items():
        c.execute(f"CREATE VIEW {name} AS {sql}")


def _writer(
    server, rec: Recorder, lock: threading.Lock, seed: int, stop: threading.Event, errors: list
) -> None:
    rng = random.Random(seed)
    mine: dict[str, list[tuple]] = {"visit": [], "score": [], "bid": [], "info": []}
    with server.client() as c:
        while not stop.is_set():
            try:
                # Dimension updates (a product changing category) are rare, as in practice:
                # each one evicts the categories it touches (a join miss), and a fill of a
                # category is cancelled if one lands while it is pending.
                table = (
                    "info"
                    if rng.random() < 0.01
                    else rng.choice(["visit", "visit", "score", "bid", "bid"])
                )
                if table == "info":
                    # Move a product to another category: an update of the dimension table.
                    rows = c.query(
                        "SELECT product, category FROM info WHERE product = "
                        f"'{rng.choice(PRODUCTS)}'"
                    ).rows
                    if rows:
                        old = rows[0]
                        new = (old[0], rng.choice(CATEGORIES))
                        try:
                            lsn = c.update("info", [old], [new])
                        except Exception:  # another writer moved it first: NotFound, fine
                            continue
                        with lock:
                            rec.write(lsn, "info", [old], -1)
                            rec.write(lsn, "info", [new], +1)
                    continue
                if mine[table] and rng.random() < 0.4:
                    rows = [
                        mine[table].pop(rng.randrange(len(mine[table])))
                        for _ in range(min(len(mine[table]), rng.randint(1, 3)))
                    ]
                    lsn = c.delete(table, rows)
                    sign = -1
                else:
                    n = rng.randint(1, 5)
                    if table == "visit":
                        rows = [
                            (rng.choice(PRODUCTS), rng.choice(USERS), rng.randrange(100))
                            for _ in range(n)
                        ]
                    elif table == "score":
                        rows = [
                            (rng.randrange(25), rng.randrange(50), rng.randrange(1000))
                            for _ in range(n)
                        ]
                    else:
                        rows = [
                            (rng.randrange(60), rng.randrange(40), float(rng.randrange(1, 1000)))
                            for _ in range(n)
                        ]
                    lsn = c.insert(table, rows)
                    mine[table] += rows
                    sign = +1
                with lock:
                    rec.write(lsn, table, rows, sign)
                time.sleep(rng.random() * 0.02)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(f"writer: {e!r}")
                return


def _reader(
    server,
    rec: Recorder,
    lock: threading.Lock,
    seed: int,
    stop: threading.Event,
    errors: list,
    stats: dict,
) -> None:
    rng = random.Random(seed)
    last_lsn = 0
    views = list(KEYS)
    with server.client(timeout=READ_BOUND) as c:
        while not stop.is_set():
            view = rng.choice(views)
            try:
                # Skewed: a few hot keys (hits) and a long tail (misses, evictions).
                pool = KEYS[view]
                weights = [1 / (i + 1) for i in range(len(pool))]
                keys = list(dict.fromkeys(rng.choices(pool, weights, k=rng.choice([1, 1, 1, 4]))))
                if rng.random() < 0.15:
                    c.evict(view, keys[0])
                    stats["evicts"] += 1
                results = (
                    c.lookup_many(view, keys)
                    if len(keys) > 1
                    else {keys[0]: c.lookup(view, keys[0])}
                )
                lsns = {res.lsn for res in results.values()}
                if min(lsns) < last_lsn:
                    errors.append(f"LSN went backwards for a client: {min(lsns)} after {last_lsn}")
                # (One lookup_many is answered at one LSN unless its keys keep being evicted
                # under memory pressure before they can all be read; each is still exact.)
                last_lsn = max(last_lsn, *lsns)
                for key, res in results.items():
                    with lock:
                        rec.read(
                            view,
                            tuple(key) if isinstance(key, tuple) else (key,),
                            res.lsn,
                            res.rows,
                        )
                stats["reads"] += len(results)
            except Exception as e:  # a DeadlineExceeded after READ_BOUND seconds included
                errors.append(f"reader {view}: {e!r}")
                return


def test_stress_concurrent_reads_writes_evictions(small_server, spark, monkeypatch, request):
    # Keys of more than 2 rows are published stale (publish.py), so both ways of reading a
    # filled key race with the writers here: lock-free copies (1-2 rows) and a read under
    # the lock that leaves its copy published (the others).
    monkeypatch.setattr(publish, "EAGER_ROWS", 2)
    rng = random.Random(7)
    rec = Recorder(SCHEMAS)
    lock = threading.Lock()
    errors: list[str] = []
    stats = {"reads": 0, "evicts": 0}
    with small_server.client() as c:
        _setup(c, rec, rng)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_writer, args=(small_server, rec, lock, 100 + i, stop, errors))
        for i in range(3)
    ]
    threads += [
        threading.Thread(
            target=_reader, args=(small_server, rec, lock, 200 + i, stop, errors, stats)
        )
        for i in range(4)
    ]
    for t in threads:
        t.start()
    # At least DURATION seconds; on a slow machine (every miss is a Spark job) go on until
    # enough reads were checked, up to a hard limit.
    start = time.monotonic()
    while time.monotonic() - start < DURATION or (
        stats["reads"] < MIN_READS and time.monotonic() - start < DURATION + 120
    ):
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(timeout=300)
    assert not errors, first(errors)
    with small_server.client() as c:
        server_stats = c.stats()
    assert server_stats["memory_bytes"] <= server_stats["memory_limit"]
    assert server_stats["state_anomalies"] == 0
    assert server_stats["memory_evictions"] > 0, (
        f"the memory limit should force evictions: {stats} {server_stats}"
    )
    loaded = time.monotonic() - start
    oracles = {v: (VIEWS[v][1], VIEWS[v][2]) for v in KEYS}
    details: list[tuple] = []
    began = time.monotonic()
    checked, bad = verify(spark, rec, oracles, details)
    request.node.user_properties.append((SUMMARY, (
        "dataflow stress", f"{loaded:.0f} s of load: {len(rec.writes)} writes, {checked} reads "
        f"({stats['evicts']} evicts) checked against Spark in {time.monotonic() - began:.0f} s")))
    assert checked == stats["reads"] and checked > 20, stats
    assert not bad, (
        f"{len(bad)} of {checked} reads differ from "
        f"Spark:\n{first(bad)}\n{_diagnose(small_server, details)}"
    )


def _diagnose(server, details: list[tuple]) -> str:
    """Tell a dataflow bug from a storage one: the server's own snapshot query at the read's
    LSN either agrees with the recorded history (the view was wrong) or with the view."""
    lines = []
    with server.client() as c:
        for view, key, lsn, rows, want in details[:3]:
            try:
                sql = VIEWS[view][0]
                for name, (inner, _, nkey) in VIEWS.items():  # views over views: inline them
                    if nkey == 0 and f"FROM {name} " in sql:
                        sql = sql.replace(f"FROM {name} ", f"FROM ({inner}) {name} ")
                got = c.query(bind_params(sql, key), as_of=lsn).rows
            except Exception as e:  # e.g. older than the retention horizon
                lines.append(f"{view} {key} @ {lsn}: snapshot query failed: {e}")
                continue
            side = "history (a dataflow bug)" if norm(got) == norm(want) else (
                "the view (a storage bug)" if norm(got) == norm(rows) else "neither")
            lines.append(
                f"{view} {key} @ {lsn}: the server's snapshot query agrees with {side}: "
                f"{sorted(got)}"
            )
    return "\n".join(lines)


def test_the_oracles_intervals_hold_each_row_as_often_as_its_writes_say():
    """The oracle's table as of LSN V (rows whose interval holds V, each ``_n`` times) is
    the multiset of every write up to V, checked here against that sum at every LSN of a
    random history (repeated rows, deletes and re-inserts at one LSN included)."""
    from collections import Counter

    from history_oracle import _intervals

    rng = random.Random(5)
    writes, live = [], Counter()
    for lsn in range(1, 300):
        if live and rng.random() < 0.4:
            row = rng.choice(sorted(live))
            writes.append((lsn, "t", [row], -1))
            live[row] -= 1
            live += Counter()  # drops rows no longer there
            if rng.random() < 0.3:  # and back at the same LSN
                writes.append((lsn, "t", [row], +1))
                live[row] += 1
        else:
            rows = [(rng.randrange(5), "x") for _ in range(rng.randint(1, 3))]
            writes.append((lsn, "t", rows, +1))
            live.update(rows)
        writes.append((lsn, "other", [(lsn,)], +1))
    rng.shuffle(writes)  # recorded in any order (writers take the lock after the call)
    spans = _intervals(writes, "t")
    for at in range(301):
        want = Counter()
        for lsn, table, rows, sign in writes:
            if table == "t" and lsn <= at:
                for r in rows:
                    want[tuple(r)] += sign
        got = Counter()
        for *row, since, until, n in spans:
            if since <= at < until:
                got[tuple(row)] += n
        assert got == +want, at
