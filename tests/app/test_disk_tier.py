"""The disk tier (``--disk-limit``) through a real server: real Spark, gRPC, SQLite files.

Under a memory limit far below what the keys read need, most keys are *shelved* in the
tier: reading them again, or writing to them, costs no upquery, and every answer equals
Spark SQL over the base tables at the answer's LSN. A tiny tier makes keys holes and the
answers stay exact. A restart (clean, or kill -9 after a checkpoint) reuses the tier; a
restart without the tier starts those keys as holes. A tier whose disk fills up breaks:
its keys become holes, the server goes on exact and says so in its stats. (The ordering
rules with a tier are covered without a JVM in tests/dataflow.)
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import InProcessServer, ServerProcess

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
JOINED = (
    "SELECT g.grp, COUNT(*) AS n, MAX(e.v) AS top FROM ev e JOIN grp g ON e.k = g.k "
    "WHERE g.grp = ? GROUP BY g.grp"
)
KEYS = 240
GROUPS = 24
MEMORY = 24 * 1024  # far below what KEYS keys of VIEW take in memory


def _server(path, spark, **config: Any) -> InProcessServer:
    config.setdefault("memory_limit", MEMORY)
    config.setdefault("checkpoint_interval", 0)
    return InProcessServer(path, spark, **config).start()


def _setup(c) -> None:
    c.execute("CREATE TABLE ev (id BIGINT, k BIGINT, v BIGINT)")
    c.execute("CREATE TABLE grp (k BIGINT PRIMARY KEY, grp BIGINT)")
    c.insert("ev", [(i, i % KEYS, i * 7 % 1000) for i in range(4 * KEYS)])
    c.insert("grp", [(k, k % GROUPS) for k in range(KEYS)])
    c.execute(f"CREATE VIEW counts AS {VIEW}")
    c.execute(f"CREATE VIEW joined AS {JOINED}")


def _read(c) -> tuple[dict[int, Any], dict[int, Any]]:
    joined = c.lookup_many("joined", [(g,) for g in range(GROUPS)])
    counts = c.lookup_many("counts", [(k,) for k in range(KEYS)])
    return ({k[0]: r for k, r in counts.items()}, {g[0]: r for g, r in joined.items()})


def _check(c, counts: dict[int, Any], joined: dict[int, Any]) -> None:
    """Every answer against Spark SQL over the base tables at the answer's LSN: one
    GROUP BY per view per LSN the answers were given at."""
    for lsn in {r.lsn for r in counts.values()}:
        want = {row[0]: [tuple(row)] for row in c.query(
            "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k", as_of=lsn).rows}
        for k, r in counts.items():
            if r.lsn == lsn:
                assert r.rows == want.get(k, []), ("counts", k, lsn, r.rows, want.get(k))
    for lsn in {r.lsn for r in joined.values()}:
        want = {row[0]: [tuple(row)] for row in c.query(
            "SELECT g.grp, COUNT(*) AS n, MAX(e.v) AS top FROM ev e JOIN grp g ON e.k = g.k "
            "GROUP BY g.grp", as_of=lsn).rows}
        for g, r in joined.items():
            if r.lsn == lsn:
                assert r.rows == want.get(g, []), ("joined", g, lsn, r.rows, want.get(g))


def _shelved(srv: InProcessServer, view: str) -> set[Any]:
    """Keys of ``view``'s reader shelved in the tier now (to aim writes at them)."""
    df = srv.engine.dataflow
    st = df.reader(view).state
    return df.executor.call(lambda: {fk[0] for fk in st.shelved_keys()}).result()


def _memory_settles(c, bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while (used := c.stats()["memory_bytes"]) > MEMORY:
        assert time.monotonic() < deadline, f"memory {used} stays over the limit {MEMORY}"
        time.sleep(0.1)


def test_shelved_keys_answer_exactly_without_upqueries(tmp_path, spark):
    srv = _server(tmp_path / "data", spark, disk_limit=64 << 20)
    try:
        with srv.client() as c:
            _setup(c)
            _check(c, *_read(c))
            s0 = c.stats()
            assert s0["disk_limit"] == 64 << 20
            assert s0["memory_bytes"] <= MEMORY
            assert s0["disk_shelved"] > 0 and s0["disk_keys"] > KEYS // 2, s0
            assert s0["disk_tier_evictions"] == 0 and s0.get("disk_broken", 0) == 0
            shelved = _shelved(srv, "counts")
            hot = set(range(KEYS)) - shelved
            assert len(shelved) > KEYS // 2 and hot
            # Writes to shelved and to in-memory keys, of both views (a write to ev
            # looks grp's join index up by k: shelved index keys come back too).
            some_shelved = sorted(shelved)[:20]
            c.insert("ev", [(10_000 + k, k, 5000 + k) for k in some_shelved])
            c.delete("ev", [(k, k, k * 7 % 1000) for k in some_shelved[:5]])
            c.insert("ev", [(20_000 + k, k, 1) for k in sorted(hot)[:5]])
            c.update("grp", [(some_shelved[0], some_shelved[0] % GROUPS)],
                     [(some_shelved[0], (some_shelved[0] + 1) % GROUPS)])
            s1 = c.stats()
            counts, joined = _read(c)
            s2 = c.stats()
            _check(c, counts, joined)
            # Keys a read brings back count at once; the limit is kept again at the end of
            # the executor's next packet (an idle one comes every 0.2 s).
            _memory_settles(c)
            # Brought back from the disk, not from Spark: no upquery, no Spark job. (A
            # read of a shelved key counts as a view miss: it was not in memory.)
            assert s2["upqueries"] == s0["upqueries"], (s0["upqueries"], s2["upqueries"])
            assert s2["spark_jobs"] == s1["spark_jobs"]
            for view in ("counts", "joined"):
                assert s2["views"][view]["upqueries"] == s0["views"][view]["upqueries"]
            assert s2["disk_unshelved"] > s1["disk_unshelved"] > s0["disk_unshelved"]
            assert s2["state_anomalies"] == 0
            assert s2["disk_tier_evictions"] == 0 and s2.get("evictions", 0) == s0.get("evictions", 0) == 0
    finally:
        srv.stop()
