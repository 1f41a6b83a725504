"""The background read sampler (server/verifier.py) without Spark: the oracle SQL it
builds, how it compares, and how it samples, drops and counts. The end-to-end check that
it catches a planted wrong answer on a real server is in test_stress_cli.py."""

from __future__ import annotations

import threading
import time

import pytest

from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.oracle import oracle_sql
from partialflow.server.verifier import Verifier, same_rows

WINNING = (
    "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
    "FROM auction AS a JOIN bid AS b ON a.id = b.auction GROUP BY a.id, a.category"
)
VIEWS = {"winning": WINNING}


def test_oracle_sql_binds_parameters_in_order():
    sql = oracle_sql("SELECT k, s FROM t WHERE k = ? AND s = ?", (3, "it's"), VIEWS.get)
    assert sql == "SELECT k, s FROM t WHERE k = 3 AND s = 'it\\'s'"  # Spark's quoting


def test_oracle_sql_inlines_views_under_their_alias():
    sql = oracle_sql(
        "SELECT category, AVG(price) AS p FROM winning WHERE category = ? GROUP BY category",
        (2,),
        VIEWS.get,
    )
    assert f"FROM ({WINNING}) AS winning WHERE category = 2" in sql
    aliased = oracle_sql("SELECT w.price FROM winning AS w WHERE w.auction = ?", (1,), VIEWS.get)
    assert f"FROM ({WINNING}) AS w WHERE" in aliased


def test_oracle_sql_breaks_top_k_ties_like_the_dataflow():
    # Without the tie-breakers Spark could keep a different row among equal points.
    sql = oracle_sql(
        "SELECT g, p, pts FROM s WHERE g = ? ORDER BY pts DESC LIMIT 3", (1,), VIEWS.get
    )
    assert sql.endswith("ORDER BY pts DESC, 1, 2, 3 LIMIT 3")


def test_oracle_sql_refuses_a_key_of_the_wrong_width():
    with pytest.raises(InvalidArgument):
        oracle_sql("SELECT k FROM t WHERE k = ?", (1, 2), VIEWS.get)
    with pytest.raises(InvalidArgument):
        oracle_sql("SELECT k FROM t WHERE k = ? AND s = ?", (1,), VIEWS.get)


def test_same_rows_is_a_multiset_comparison_with_float_tolerance():
    assert same_rows([(1, 0.1 + 0.2)], [(1, 0.3)])
    assert same_rows([("a",), ("b",)], [("b",), ("a",)])
    assert not same_rows([("a",), ("a",)], [("a",)])  # an extra copy is a wrong answer
    assert not same_rows([(1, 0.3)], [(1, 0.30001)])


class FakeStorage:
    """storage.query stand-in: answers from a dict, optionally slowly or failing."""

    def __init__(self, answers: dict[str, list[tuple]], delay: float = 0.0) -> None:
        self.answers = answers
        self.delay = delay
        self.calls: list[tuple[str, int]] = []

    def query(self, sql: str, as_of: int | None = None) -> tuple[list[str], list[tuple], int]:
        time.sleep(self.delay)
        self.calls.append((sql, as_of))
        if sql not in self.answers:
            raise RuntimeError("Spark fell over")
        return ["c"], self.answers[sql], as_of or 0


def _wait(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_verifier_counts_checks_and_mismatches_at_the_reads_lsn(caplog):
    views = {"v": "SELECT k, n FROM t WHERE k = ?"}
    storage = FakeStorage(
        {
            "SELECT k, n FROM t WHERE k = 'a'": [("a", 1)],
            "SELECT k, n FROM t WHERE k = 'b'": [("b", 2)],
        }
    )
    ver = Verifier(storage, views.get, sample=1.0, max_per_second=1000)
    ver.start()
    try:
        ver.observe("v", ("a",), [("a", 1)], 7)
        ver.observe("v", ("b",), [("b", 2), ("b", 2)], 9)  # a wrong answer
        ver.observe("v", ("c",), [], 9)  # storage fails: an error, not a verdict
        _wait(lambda: ver.stats()["checks"] + ver.stats()["errors"] == 3)
    finally:
        ver.close()
    s = ver.stats()
    assert (s["sampled"], s["checks"], s["mismatches"], s["errors"]) == (3, 2, 1, 1)
    assert [lsn for _, lsn in storage.calls] == [7, 9, 9]
    assert s["last_mismatch"]["key"] == ["b"] and s["last_mismatch"]["lsn"] == 9
    assert any("MISMATCH in view v key ('b',) at LSN 9" in r.getMessage() for r in caplog.records)


def test_verifier_never_blocks_reads_and_drops_when_full():
    views = {"v": "SELECT k FROM t WHERE k = ?"}
    storage = FakeStorage({"SELECT k FROM t WHERE k = 1": [(1,)]}, delay=0.2)
    ver = Verifier(storage, views.get, sample=1.0, max_per_second=1000, queue_size=4)
    ver.start()
    try:
        t0 = time.perf_counter()
        for _ in range(200):
            ver.observe("v", (1,), [(1,)], 1)
        # observe only enqueues: one that waited for its check would take 200 x 0.2 s.
        assert time.perf_counter() - t0 < 5
        s = ver.stats()
        assert s["sampled"] + s["dropped"] == 200 and s["dropped"] >= 190
    finally:
        ver.close()


def test_verifier_samples_a_fraction_and_paces_its_checks():
    views = {"v": "SELECT k FROM t WHERE k = ?"}
    storage = FakeStorage({"SELECT k FROM t WHERE k = 1": [(1,)]})
    ver = Verifier(storage, views.get, sample=0.25, max_per_second=4, queue_size=10_000)
    started = time.monotonic()
    ver.start()
    try:
        for _ in range(4000):
            ver.observe("v", (1,), [(1,)], 1)
        assert 800 <= ver.stats()["sampled"] <= 1200
        time.sleep(1.0)
        _wait(lambda: ver.stats()["checks"] >= 1)
        checks = ver.stats()["checks"]
        # At most 4 per second since the start (plus the first, which is not delayed),
        # however long the loop above took on a loaded machine; unpaced, it would have
        # checked all ~1000 at once.
        assert 1 <= checks <= 1 + 4 * (time.monotonic() - started)
    finally:
        ver.close()


def test_verifier_is_off_at_zero_and_skips_dropped_views():
    ver = Verifier(FakeStorage({}), {}.get, sample=0.0)
    ver.observe("v", (1,), [], 1)
    assert not ver.enabled and ver.stats()["sampled"] == 0
    assert ver.check("gone", (1,), [], 1) == "skipped"


def test_verifier_close_is_prompt_with_an_idle_queue():
    ver = Verifier(FakeStorage({}), {}.get, sample=1.0)
    ver.start()
    t0 = time.monotonic()
    ver.close()
    assert time.monotonic() - t0 < 2 and not any(
        t.name == "verifier" and t.is_alive() for t in threading.enumerate()
    )
