"""The disk tier (``--disk-limit``) through a real server: real Spark, gRPC, SQLite files.

Under a memory limit far below what the keys read need, most keys are *shelved* in the
tier: reading them again, or writing to them, costs no upquery, and every answer equals
Spark SQL over the base tables at the answer's LSN. A tiny tier makes keys holes and the
answers stay exact. A restart (clean, or kill -9 after a checkpoint) reuses the tier; a
smaller tier makes the restored keys beyond it holes; a restart without the tier starts
those keys as holes, and a later one with it empties the stale store; a damaged file is
moved aside. A tier whose disk fills up breaks: its keys become holes, the server goes on
exact, checkpoints go on, and stats and metrics say so. (The ordering rules with a tier are
covered without a JVM in tests/dataflow, and so is a tier that fails while a key is brought
back: test_tier_failures.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from helpers import InProcessServer, ServerProcess
from prometheus_client.parser import text_string_to_metric_families
from tmpfs import fill, small_tmpfs

from partialflow.server.app.main import metrics_port_of

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
    """Every answer against Spark SQL over the base tables at the answer's LSN: one query
    (both views' GROUP BYs) per LSN the answers were given at."""
    answers = [("counts", k, r) for k, r in counts.items()]
    answers += [("joined", g, r) for g, r in joined.items()]
    for lsn in {r.lsn for _, _, r in answers}:
        rows = c.query(
            "SELECT 'counts' AS v, k, COUNT(*) AS n, SUM(v) AS x FROM ev GROUP BY k "
            "UNION ALL SELECT 'joined', g.grp, COUNT(*), MAX(e.v) FROM ev e JOIN grp g "
            "ON e.k = g.k GROUP BY g.grp", as_of=lsn).rows
        want = {(row[0], row[1]): [tuple(row[1:])] for row in rows}
        for view, key, r in answers:
            if r.lsn == lsn:
                assert r.rows == want.get((view, key), []), (view, key, lsn, r.rows)


def _shelved(srv: InProcessServer, view: str) -> set[Any]:
    """Keys of ``view`` whose contents are shelved in the tier now (to aim writes at them):
    the reader's shelved keys, and, for a reader derived from its aggregate (whose keys
    are made holes instead, and derived again when read), the aggregate's."""
    df = srv.engine.dataflow
    st = df.reader(view).state
    states = [st] if st.source is None else [st, st.source[0]]
    return df.executor.call(
        lambda: {fk[0] for x in states for fk in x.shelved_keys()}).result()


def _memory_settles(c, bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while (used := c.stats()["memory_bytes"]) > MEMORY:
        assert time.monotonic() < deadline, f"memory {used} stays over the limit {MEMORY}"
        time.sleep(0.1)


def _stats_when(c, done: Callable[[dict], bool], bound: float = 10.0) -> dict:
    """The server's stats once ``done`` holds of them (within a liveness bound)."""
    deadline = time.monotonic() + bound
    while not done(stats := c.stats()):
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)
    return stats


def _scrape(srv: InProcessServer) -> dict[str, float]:
    """The server's Prometheus gauges without labels, by name."""
    port = metrics_port_of(srv.server)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if not s.labels}


def test_shelved_keys_answer_exactly_without_upqueries(tmp_path, spark):
    srv = _server(tmp_path / "data", spark, disk_limit=64 << 20)
    try:
        with srv.client() as c:
            _setup(c)
            _check(c, *_read(c))
            _memory_settles(c)  # what the read brought back is shelved again
            s0 = c.stats()
            assert s0["tier_limit"] == 64 << 20
            assert s0["tier_shelved"] > 0 and s0["tier_keys"] > KEYS // 2, s0
            assert s0["tier_evictions"] == 0 and s0.get("tier_broken", 0) == 0
            shelved = _shelved(srv, "counts")
            # (Keys whose aggregate stays in memory, if any: a view's reader keys are
            # derived from them, so most are shelved through their aggregate's.)
            hot = set(range(KEYS)) - shelved
            assert len(shelved) > KEYS // 2
            # Writes to shelved and to in-memory keys, of both views (a write to ev
            # looks grp's join index up by k: shelved index keys come back too).
            some_shelved = sorted(shelved)[:20]
            c.insert("ev", [(10_000 + k, k, 5000 + k) for k in some_shelved])
            c.delete("ev", [(k, k, k * 7 % 1000) for k in some_shelved[:5]])
            c.insert("ev", [(20_000 + k, k, 1) for k in (sorted(hot)[:5] or sorted(shelved)[-5:])])
            last = c.update("grp", [(some_shelved[0], some_shelved[0] % GROUPS)],
                            [(some_shelved[0], (some_shelved[0] + 1) % GROUPS)])
            s1 = _stats_when(c, lambda s: s["applied_lsn"] >= last)  # the writes applied
            counts, joined = _read(c)
            s2 = c.stats()
            _check(c, counts, joined)
            # Keys a read brings back count at once; the limit is kept again at the end of
            # the executor's next packet (an idle one comes every 0.2 s).
            _memory_settles(c)
            # Brought back from the disk, not from Spark: no upquery, no Spark job. (A
            # read of a shelved key counts as a view miss: it was not in memory.)
            assert s2.get("upqueries", 0) == s0.get("upqueries", 0)
            assert s2["spark_jobs"] == s1["spark_jobs"]
            for view in ("counts", "joined"):
                assert s2["views"][view]["upqueries"] == s0["views"][view]["upqueries"]
            # Writes brought keys back; the reads read shelved keys from the store (and the
            # executor brings those back into memory after them).
            assert s1["tier_unshelved"] > s0["tier_unshelved"]
            assert s2["tier_read"] > s1["tier_read"]
            assert s2["state_anomalies"] == 0
            # (Keys of counts' reader are made holes, not shelved: derived from its
            # aggregate's again when read. Nothing was made a hole by the disk limit.)
            assert s2["tier_evictions"] == 0
            # A dropped view's shelved keys leave the store too.
            shelved_before = c.stats()["tier_keys"]
            c.execute("DROP VIEW joined")
            tier = srv.engine.dataflow.tier
            assert c.stats()["tier_keys"] < shelved_before
            assert srv.engine.dataflow.executor.call(
                lambda: (tier.stored()[0], tier.keys)).result() == (c.stats()["tier_keys"],) * 2
    finally:
        srv.stop()


def test_a_tiny_disk_limit_makes_keys_holes_and_answers_stay_exact(tmp_path, spark):
    limit = 4096  # a few keys' worth of pickles
    srv = _server(tmp_path / "data", spark, disk_limit=limit)
    try:
        with srv.client() as c:
            _setup(c)
            _check(c, *_read(c))
            s0 = c.stats()
            assert s0["tier_evictions"] > 0 and s0["tier_bytes"] <= limit, s0
            assert 0 < s0["tier_keys"] < KEYS // 2
            # Writes to every key, whether in memory, shelved or a hole, then all read
            # again: the holes are filled from Spark as without a tier.
            c.insert("ev", [(30_000 + k, k, 3 * k) for k in range(KEYS)])
            counts, joined = _read(c)
            _check(c, counts, joined)
            s1 = c.stats()
            assert s1.get("upqueries", 0) > s0.get("upqueries", 0)
            assert s1["tier_bytes"] <= limit and s1["state_anomalies"] == 0
            _memory_settles(c)
    finally:
        srv.stop()


def _restart_server(path, spark, **config: Any) -> InProcessServer:
    config.setdefault("checkpoint_interval", 3600)  # on: at a request and at shutdown
    return _server(path, spark, **config)


def test_a_restart_reuses_the_tier_and_one_without_it_starts_those_keys_as_holes(
        tmp_path, spark, caplog):
    data = tmp_path / "data"
    srv = _restart_server(data, spark, disk_limit=64 << 20)
    with srv.client() as c:
        _setup(c)
        _read(c)
        _memory_settles(c)  # what the read brought back is shelved again
        shelved = sorted(_shelved(srv, "counts"))
        assert len(shelved) > KEYS // 2
        # Changed after being shelved: the shutdown's checkpoint records the new contents.
        c.insert("ev", [(40_000 + k, k, 7) for k in shelved[:10]])
    srv.stop()  # a clean stop: a last checkpoint, the tier committed at its cut

    srv = _restart_server(data, spark, disk_limit=64 << 20)
    try:
        with srv.client() as c:
            s0 = c.stats()
            assert s0["checkpoint"]["recovered_keys"] > 0
            assert s0["tier_keys"] > KEYS // 2 and s0["spark_jobs"] == 0, s0
            assert s0["tier_evictions"] == 0
            counts, joined = _read(c)
            s1 = c.stats()
            assert s1["spark_jobs"] == 0 and s1.get("upqueries", 0) == 0, s1
            assert s1["tier_read"] > 0
            _check(c, counts, joined)
            # Changed now, while the tier holds their old contents: the next start must
            # not take those for the new ones.
            c.insert("ev", [(50_000 + k, k, 11) for k in range(KEYS)])
    finally:
        srv.stop()

    # A smaller tier: the restored keys beyond its limit become holes.
    srv = _restart_server(data, spark, disk_limit=4096)
    try:
        with srv.client() as c:
            s0 = _stats_when(c, lambda s: s["tier_bytes"] <= 4096)
            assert s0["tier_evictions"] > 0 and s0["tier_keys"] > 0, s0
            counts, joined = _read(c)
            _check(c, counts, joined)
    finally:
        srv.stop()

    srv = _restart_server(data, spark)  # no tier: its keys start as holes
    try:
        with srv.client() as c:
            s0 = c.stats()
            assert "tier_keys" not in s0 and s0["checkpoint"]["recovered_keys"] > 0
            counts, joined = _read(c)
            s1 = c.stats()
            assert s1.get("upqueries", 0) > 0
            _check(c, counts, joined)
            c.insert("ev", [(60_000 + k, k, 13) for k in range(KEYS)])
    finally:
        srv.stop()

    # The tier again: its file is older than the last checkpoint, which names no commit of
    # it, so it is emptied and not one stale key is served.
    srv = _restart_server(data, spark, disk_limit=64 << 20)
    try:
        with srv.client() as c:
            assert c.stats()["tier_keys"] == 0
            counts, joined = _read(c)
            _check(c, counts, joined)
            assert c.stats().get("upqueries", 0) > 0
    finally:
        srv.stop()

    # A damaged file: moved aside, a new one made, the server starts and stays exact.
    (data / "tier" / "tier.db").write_bytes(b"not a database" * 512)
    srv = _restart_server(data, spark, disk_limit=64 << 20)
    try:
        assert "can't be opened" in caplog.text
        assert list((data / "tier").glob("tier.db.damaged-*"))
        with srv.client() as c:
            assert c.stats()["tier_keys"] == 0
            counts, joined = _read(c)
            _check(c, counts, joined)
            _memory_settles(c)
            assert c.stats()["tier_keys"] > 0  # the new store is used
    finally:
        srv.stop()


def test_a_disk_limit_without_a_memory_limit_is_warned_about(tmp_path, spark, caplog):
    InProcessServer(tmp_path / "data", spark, disk_limit=1 << 20, checkpoint_interval=0
                    ).start().stop()
    assert "--disk-limit without --memory-limit" in caplog.text


def test_kill_9_after_a_checkpoint_restarts_with_the_tier(tmp_path, spark):
    data = tmp_path / "data"
    proc = ServerProcess(data, args=(
        "--memory-limit", str(MEMORY), "--disk-limit", "64MB",
        "--checkpoint-interval", "3600", "--pg-port", "off"))
    proc.start()
    try:
        with proc.client() as c:
            _setup(c)
            _read(c)  # keys read first are the least recently used: shelved
            assert c.stats()["tier_keys"] > KEYS // 2
            taken = c.checkpoint()
            # Acknowledged after the checkpoint, to keys on the shelf: the log has them,
            # the tier's store does not (its open transaction dies with the process).
            last = c.insert("ev", [(70_000 + k, k, 17) for k in range(20)])
            _read(c)
    finally:
        proc.kill()
    # The restart runs in this process (on the tests' Spark: one JVM start less).
    srv = _restart_server(data, spark, disk_limit=64 << 20)
    try:
        with srv.client() as c:
            s0 = c.stats()
            assert s0["checkpoint"]["recovered_from"] == taken["seq"]
            assert s0["checkpoint"]["replayed_writes"] == last - taken["lsn"]
            assert s0["tier_keys"] > KEYS // 2, s0
            counts, joined = _read(c)
            s1 = c.stats()
            assert s1.get("upqueries", 0) == 0 and s1["tier_read"] > 0, s1
            assert all(r.lsn >= last for r in counts.values())
            _check(c, counts, joined)
    finally:
        srv.stop()


def test_a_tier_whose_disk_fills_up_breaks_and_answers_stay_exact(tmp_path, spark):
    data = tmp_path / "data"
    with small_tmpfs(data / "tier", "2m") as tier_dir:
        srv = _restart_server(data, spark, disk_limit=64 << 20, metrics_port=0)
        try:
            with srv.client() as c:
                _setup(c)
                _read(c)
                _memory_settles(c)
                s0 = c.stats()
                assert s0["tier_keys"] > KEYS // 2 and s0["tier_broken"] == 0
                fill(tier_dir / "filler", leave=0)
                # The checkpoint commits the tier's store at its cut: SQLite can't (the
                # disk is full), the tier breaks, and the checkpoint goes on without it.
                taken = c.checkpoint(timeout=60)
                s1 = _stats_when(c, lambda s: s["tier_keys"] == 0)
                assert s1["tier_broken"] == 1, s1
                assert s1["checkpoint"]["last_seq"] == taken["seq"]
                metrics = _scrape(srv)
                assert metrics["partialflow_tier_broken"] == 1
                assert metrics["partialflow_tier_keys"] == 0
                assert metrics["partialflow_tier_limit"] == 64 << 20
                # Its keys are holes now, filled from Spark when read; eviction makes
                # holes from now on, and the memory limit holds.
                c.insert("ev", [(80_000 + k, k, 19) for k in range(KEYS)])
                counts, joined = _read(c)
                s2 = c.stats()
                assert s2.get("upqueries", 0) > s1.get("upqueries", 0)
                assert s2["tier_shelved"] == s1["tier_shelved"] and s2["tier_keys"] == 0
                assert s2["state_anomalies"] == 0
                _check(c, counts, joined)
                _memory_settles(c)
                # Checkpoints go on without the tier.
                assert c.checkpoint(timeout=60)["seq"] > taken["seq"]
        finally:
            srv.stop()


@pytest.mark.parametrize("value, message", [
    ("0", "invalid disk limit 0: must be positive"),
    ("abc", "argument --disk-limit: invalid size 'abc'"),
    ("10XB", "argument --disk-limit: invalid size '10XB'"),
])
def test_a_bad_disk_limit_is_a_usage_error_and_changes_nothing(tmp_path, value, message):
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", "serve", "--data", str(data),
         "--port", "0", "--memory-limit", "1MB", "--disk-limit", value],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")},
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not data.exists()
