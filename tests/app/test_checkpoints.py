"""Checkpoints through a real server (session Spark, real files, gRPC): a restart serves the
keys filled before it as hits with no Spark job, exact at their LSN against Spark SQL over
the base tables; writes after the checkpoint are replayed; checkpoints after the first hold
only what changed; a damaged checkpoint falls back to the one before; views created,
dropped or changed after a checkpoint are handled. Kill -9 at random moments is in
test_checkpoint_crash.py."""

from __future__ import annotations

import logging
import shutil

import pytest
from helpers import InProcessServer
from oracle import assert_matches, check_results

from partialflow.client import FailedPrecondition

VISITS = (
    "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
    "ON info.product = visit.product WHERE category = ? GROUP BY category"
)
COUNTS = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
WINNING = (
    "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
    "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category"
)
AVG_WINNING = (
    "SELECT category, AVG(price) AS avg_price FROM winning WHERE category = ? GROUP BY category"
)


def _server(tmp_path, spark, **config):
    return InProcessServer(tmp_path / "data", spark, checkpoint_interval=3600, **config).start()


def _check_counts(c, got: dict) -> None:
    """Every key of ``counts`` against Spark: one GROUP BY per LSN the keys were read at."""
    for lsn in {r.lsn for r in got.values()}:
        spark = {row[0]: [tuple(row)] for row in c.query(
            "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k", as_of=lsn).rows}
        for k, r in got.items():
            if r.lsn == lsn:
                assert r.rows == spark.get(k, []), (k, lsn, r.rows, spark.get(k))


def _stop_without_final_checkpoint(srv):
    """Stop as a crash would leave things: no last checkpoint at shutdown, so the writes
    after the latest one must be replayed from the log (the real kill -9 is in
    test_checkpoint_crash.py)."""
    srv.engine.dataflow.executor.checkpointer.enabled = False
    srv.stop()


def _visits(c, categories: int = 20) -> list[str]:
    c.execute("CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)")
    c.execute("CREATE TABLE visit (product TEXT, user TEXT, length BIGINT)")
    c.insert("info", [(f"p{i}", f"c{i % categories}") for i in range(4 * categories)])
    c.insert("visit", [(f"p{i % (4 * categories)}", f"u{i}", i) for i in range(10 * categories)])
    c.execute(f"CREATE VIEW mv AS {VISITS}")
    return [f"c{i}" for i in range(categories)]


def _nexmark(c) -> None:
    c.execute("CREATE TABLE auction (id BIGINT PRIMARY KEY, category BIGINT, seller BIGINT)")
    c.execute("CREATE TABLE bid (bidder BIGINT, auction BIGINT, price DOUBLE)")
    c.insert("auction", [(a, a % 5, a % 7) for a in range(40)])
    c.insert("bid", [(b, b % 40, float(b * 13 % 101)) for b in range(300)])
    c.execute(f"CREATE VIEW winning AS {WINNING}")
    c.execute(f"CREATE VIEW avg_winning AS {AVG_WINNING}")


def test_a_restart_serves_checkpointed_keys_hot_and_exact(tmp_path, spark):
    srv = _server(tmp_path, spark)
    with srv.client() as c:
        cats = _visits(c)
        _nexmark(c)
        for k in cats:
            c.lookup("mv", k)
        for cat in range(5):
            c.lookup("avg_winning", cat)
        taken = c.checkpoint()
        assert taken["kind"] == "full" and taken["lsn"] == c.stats()["lsn"]
        # Writes after the checkpoint: replayed from the log at the restart. They change
        # hot keys (a MAX whose top visit is deleted, a new winning bid). None of them
        # misses a join index (that would fill it from Spark, restart or not: see
        # test_replayed_writes_that_miss_a_join_index_are_exact).
        c.delete("visit", [(f"p{199 % 80}", "u199", 199)])
        c.insert("visit", [("p3", "late", 1000), ("p0", "late", 5)])
        last = c.insert("bid", [(999, 7, 500.0)])
    _stop_without_final_checkpoint(srv)

    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            info = c.stats()["checkpoint"]
            assert info["recovered_from"] == taken["seq"]
            assert info["recovered_lsn"] == taken["lsn"]
            assert info["replayed_writes"] == last - taken["lsn"]
            assert info["recovered_keys"] > len(cats)
            assert c.stats()["spark_jobs"] == 0
            results = {k: c.lookup("mv", k) for k in cats}
            avg = {cat: c.lookup("avg_winning", cat) for cat in range(5)}
            stats = c.stats()
            # Hits, and not one Spark job: the keys came from the checkpoint.
            assert stats["spark_jobs"] == 0
            assert stats["views"]["mv"]["misses"] == 0
            assert stats["views"]["mv"]["hits"] == len(cats)
            assert stats["views"]["avg_winning"]["upqueries"] == 0
            assert all(r.lsn >= last for r in results.values())
            assert check_results(c, VISITS, {(k,): r for k, r in results.items()}) == []
            for cat, r in avg.items():
                assert_matches(c, AVG_WINNING.replace("winning", f"({WINNING}) w"), (cat,), r)
            # A key nobody read before the restart is a miss filled as usual.
            c.insert("info", [("new", "c99")])
            c.insert("visit", [("new", "u", 3)])
            r = c.lookup("mv", "c99")
            assert r.rows == [("c99", 3)]
    finally:
        srv.stop()


def test_replayed_writes_that_miss_a_join_index_are_exact(tmp_path, spark):
    """Replayed writes take the live path: a join miss is filled from Spark at the LSN
    before it while the keys it reaches wait; the answers are exact either way."""
    srv = _server(tmp_path, spark)
    with srv.client() as c:
        cats = _visits(c, 5)
        _nexmark(c)
        for k in cats:
            c.lookup("mv", k)
        for cat in range(5):
            c.lookup("avg_winning", cat)
        c.checkpoint()
        c.update("info", [("p1", "c1")], [("p1", "c2")])  # misses the visit index at p1
        c.insert("auction", [(100, 2, 1)])  # misses the bid index at 100
        c.insert("bid", [(5, 100, 90.0)])
    _stop_without_final_checkpoint(srv)
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            assert c.stats()["checkpoint"]["replayed_writes"] == 3
            results = {k: c.lookup("mv", k) for k in cats}
            assert check_results(c, VISITS, {(k,): r for k, r in results.items()}) == []
            for cat in range(5):
                r = c.lookup("avg_winning", cat)
                assert_matches(c, AVG_WINNING.replace("winning", f"({WINNING}) w"), (cat,), r)
    finally:
        srv.stop()


def test_checkpoints_after_the_first_write_only_what_changed(tmp_path, spark):
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
            c.insert("ev", [(k, v) for k in range(2000) for v in range(3)])
            c.execute(f"CREATE VIEW counts AS {COUNTS}")
            c.lookup_many("counts", list(range(2000)))
            full = c.checkpoint()
            c.insert("ev", [(k, 7) for k in range(0, 2000, 100)])  # 1% of the keys
            inc = c.checkpoint()
            assert full["kind"] == "full" and inc["kind"] == "incremental"
            assert inc["chain_files"] == 2
            # It scales with the churn: 1% of the keys, a few percent of the bytes.
            assert inc["bytes"] < full["bytes"] / 20, (inc, full)
            empty = c.checkpoint()
            assert empty["bytes"] < inc["bytes"]
            c.insert("ev", [(1, 1)])
            last = c.stats()["lsn"]
        srv.stop()  # a clean stop takes a last checkpoint: nothing to replay
        srv = _server(tmp_path, spark)
        with srv.client() as c:
            info = c.stats()["checkpoint"]
            assert info["recovered_lsn"] == last and info["replayed_writes"] == 0
            got = c.lookup_many("counts", list(range(2000)))
            assert c.stats()["views"]["counts"]["misses"] == 0
            _check_counts(c, got)
    finally:
        srv.stop()


def test_a_damaged_checkpoint_falls_back_to_the_one_before(tmp_path, spark, caplog):
    srv = _server(tmp_path, spark)
    with srv.client() as c:
        cats = _visits(c, 5)
        for k in cats:
            c.lookup("mv", k)
        first = c.checkpoint()
        c.insert("visit", [("p0", "x", 777)])
        second = c.checkpoint()
        c.insert("visit", [("p1", "y", 888)])
    _stop_without_final_checkpoint(srv)
    ckpt = tmp_path / "data" / "checkpoints"
    newest = max(ckpt.glob("data-*.ckpt"))
    raw = bytearray(newest.read_bytes())
    raw[-5] ^= 0x55
    newest.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="partialflow.checkpoint"):
        srv = _server(tmp_path, spark)
    try:
        assert any(f"checkpoint {second['seq']} skipped" in r.getMessage()
                   for r in caplog.records)
        with srv.client() as c:
            info = c.stats()["checkpoint"]
            assert info["recovered_from"] == first["seq"]
            assert info["replayed_writes"] == 2
            results = {k: c.lookup("mv", k) for k in cats}
            assert c.stats()["views"]["mv"]["misses"] == 0
            assert check_results(c, VISITS, {(k,): r for k, r in results.items()}) == []
            assert results["c0"].rows == [("c0", 777)] and results["c1"].rows == [("c1", 888)]
    finally:
        srv.stop()
    # With every checkpoint gone the views start cold, and are still exact.
    shutil.rmtree(ckpt)
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            assert c.stats()["checkpoint"]["recovered_from"] == 0
            r = c.lookup("mv", "c0")
            assert c.stats()["views"]["mv"]["misses"] == 1
            assert_matches(c, VISITS, ("c0",), r)
    finally:
        srv.stop()


def test_views_created_dropped_or_changed_after_the_checkpoint(tmp_path, spark):
    srv = _server(tmp_path, spark)
    with srv.client() as c:
        cats = _visits(c, 5)
        c.execute("CREATE VIEW gone AS SELECT product, category FROM info WHERE category = ?")
        c.execute("CREATE VIEW redo AS SELECT product FROM visit WHERE user = ?")
        for k in cats:
            c.lookup("mv", k)
            c.lookup("gone", k)
        c.lookup("redo", "u1")
        c.checkpoint()
        c.execute("DROP VIEW gone")
        c.execute("DROP VIEW redo")
        # Same name, other SQL: its old keys must not come back.
        c.execute("CREATE VIEW redo AS SELECT product, length FROM visit WHERE user = ?")
        c.execute("CREATE VIEW fresh AS SELECT category, COUNT(*) AS n FROM info "
                  "WHERE category = ? GROUP BY category")
        c.insert("visit", [("p1", "u1", 5)])
    srv.stop()
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            info = c.stats()["checkpoint"]
            assert info["recovered_from"] > 0
            views = c.stats()["views"]
            assert "gone" not in views and {"mv", "redo", "fresh"} <= set(views)
            assert views["redo"]["keys_filled"] == 0  # planned differently: nothing restored
            r = c.lookup("redo", "u1")
            assert_matches(c, "SELECT product, length FROM visit WHERE user = ?", ("u1",), r)
            r = c.lookup("fresh", "c1")
            assert_matches(c, "SELECT category, COUNT(*) AS n FROM info WHERE category = ? "
                              "GROUP BY category", ("c1",), r)
            assert c.lookup("mv", "c1").rows and c.stats()["views"]["mv"]["misses"] == 0
    finally:
        srv.stop()


def test_a_full_state_comes_from_the_checkpoint_not_from_spark(tmp_path, spark):
    """A view without parameters over a join keeps full state: recovery loads it from the
    checkpoint (no Spark job at start), and it stays exact through replayed writes."""
    srv = _server(tmp_path, spark)
    sql = ("SELECT info.category AS category, COUNT(*) AS n FROM info JOIN visit "
           "ON info.product = visit.product GROUP BY info.category")
    with srv.client() as c:
        _visits(c, 5)
        c.execute(f"CREATE VIEW per_cat AS {sql}")
        c.lookup("per_cat", ())
        c.checkpoint()
        c.insert("visit", [("p2", "z", 1)])
    srv.stop()
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            assert c.stats()["spark_jobs"] == 0
            r = c.lookup("per_cat", ())
            assert c.stats()["spark_jobs"] == 0
            assert_matches(c, sql, (), r)
    finally:
        srv.stop()


def test_checkpoint_command_when_checkpoints_are_off(tmp_path, spark):
    srv = InProcessServer(tmp_path / "data", spark, checkpoint_interval=0).start()
    try:
        with srv.client() as c:
            with pytest.raises(FailedPrecondition, match="checkpoints are off"):
                c.checkpoint()
            assert "checkpoint" not in c.stats()
    finally:
        srv.stop()


def test_keys_evicted_at_recovery_do_not_come_back_stale(tmp_path, spark):
    """Restarted under a smaller memory limit, recovery evicts restored keys; writes to
    them are then dropped at the holes. The next checkpoint must record those holes, or
    the restart after it would bring the keys back without those writes."""
    srv = _server(tmp_path, spark)
    with srv.client() as c:
        c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
        c.insert("ev", [(k, 1) for k in range(500)])
        c.execute(f"CREATE VIEW counts AS {COUNTS}")
        c.lookup_many("counts", list(range(500)))
        full = c.stats()["memory_bytes"]
    srv.stop()
    srv = _server(tmp_path, spark, memory_limit=full // 4)
    with srv.client() as c:
        assert c.stats()["views"]["counts"]["keys_filled"] < 200  # most evicted at recovery
        last = c.insert("ev", [(k, 5) for k in range(500)])  # every key changes
    srv.stop()
    srv = _server(tmp_path, spark)
    try:
        with srv.client() as c:
            got = c.lookup_many("counts", list(range(500)), min_lsn=last)
            _check_counts(c, got)
            assert all(r.rows[0][1] == 2 for r in got.values())
    finally:
        srv.stop()


def test_an_unusable_checkpoint_directory_is_refused_at_start(tmp_path, spark):
    from partialflow.server.errors import FailedPrecondition as ServerFailedPrecondition

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ServerFailedPrecondition, match="cannot use the checkpoint directory"):
        InProcessServer(tmp_path / "data", spark, checkpoint_dir=str(blocker / "x")).start()
