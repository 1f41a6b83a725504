"""The Spark supervisor's own logic (server/spark_supervisor.py) on fake sessions: which
failures mean Spark is down, the restart with backoff, what listeners and stats see.

Fakes only here: a real driver killed is tests/app/test_spark_restart.py (a subprocess,
as the tests' shared Spark must live). The fake master is a Spark Connect address, so the
supervisor tears a session down by its ``stop()`` and pings it with a one-row job.
"""

from __future__ import annotations

import threading
import time

import pytest
from pyspark.errors.exceptions.captured import AnalysisException

from partialflow.server.errors import InvalidArgument, Unavailable
from partialflow.server.spark_supervisor import SparkDown, SparkSupervisor

MASTER = "sc://fake:15002"


class FakeSession:
    """Answers jobs until ``dead``; ``hang`` makes a job block (an unresponsive driver)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self.hang = threading.Event()
        self.stopped = False

    def range(self, n: int) -> FakeSession:
        return self

    def collect(self) -> list:
        if self.hang.is_set():
            time.sleep(30)
        if self.dead:
            raise ConnectionRefusedError(111, "Connection refused")
        return [1]

    def stop(self) -> None:
        self.stopped = True


class Builder:
    """Builds FakeSessions; the first ``failures`` builds fail as a JVM that won't start."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.made: list[FakeSession] = []

    def __call__(self, master: str, *, app_name: str, conf: tuple) -> FakeSession:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("JAVA_GATEWAY_EXITED")
        s = FakeSession(f"s{len(self.made)}")
        self.made.append(s)
        return s


def analysis_error(text: str) -> AnalysisException:
    """An error as Spark raises it (built without a JVM: its constructor asks one)."""
    err = AnalysisException.__new__(AnalysisException)
    Exception.__init__(err, text)
    err._desc, err._stackTrace, err._cause, err._origin = text, "", None, None
    return err


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def sup():
    build = Builder()
    s = SparkSupervisor(MASTER, (("spark.sql.shuffle.partitions", "2"),), build=build,
                        ping_interval=0.05, ping_timeout=0.3, backoff=(0.01, 0.02))
    s.build = build  # for the tests
    yield s
    s.close()


def test_an_error_spark_answered_is_the_requests_own(sup):
    err = analysis_error("[TABLE_OR_VIEW_NOT_FOUND] x")
    assert sup.failure(err, sup.generation) is None
    assert sup.failure(InvalidArgument("bad"), sup.generation) is None
    # A connection error from a live driver (it answers the check): not Spark's death.
    assert sup.failure(ConnectionResetError("reset"), sup.generation) is None
    assert sup.up and sup.stats()["restarts"] == 0
    with pytest.raises(AnalysisException), sup.guard():
        raise err


def test_a_dead_driver_is_reported_then_replaced_with_backoff(sup):
    events: list[object] = []
    sup.add_listener(lambda up: events.append(up))
    sup.on_restart(lambda gen: events.append(("restarted", gen)))
    old = sup.session
    sup.build.failures = 2  # the first two new drivers fail to start
    old.dead = True
    with pytest.raises(SparkDown) as info, sup.guard() as session:
        session.range(1).collect()
    assert "Spark is down since" in str(info.value) and "restarted" in str(info.value)
    assert isinstance(info.value, Unavailable)
    stats = sup.stats()
    assert not stats["up"] and stats["down_since"] and "Connection refused" in (
        stats["down_reason"])
    # While down, anything that needs the session fails at once, saying so.
    with pytest.raises(SparkDown):
        sup.range(5)
    sup.start()
    _until(lambda: sup.up)
    stats = sup.stats()
    assert stats["restarts"] == 1 and stats["restart_failures"] == 2
    assert stats["generation"] == 2 and stats["down_since"] is None
    assert stats["last_outage"]["seconds"] >= 0 and stats["last_outage"]["reason"]
    assert old.stopped and sup.session is sup.build.made[-1] is not old
    assert events == [False, ("restarted", 2), True]
    # Work begun on the old session and failing now is told Spark was replaced.
    down = sup.failure(analysis_error("stale plan"), generation=1)
    assert isinstance(down, SparkDown) and "restarted" in str(down)
    # The new session serves through the supervisor.
    assert sup.range(1).collect() == [1]


def test_the_watchdog_notices_a_driver_that_stops_answering(sup):
    sup.start()
    sup.session.hang.set()  # pings block: unresponsive, not dead
    _until(lambda: sup.stats()["restarts"] == 1)
    assert sup.up and "did not answer a ping" in sup.stats()["last_outage"]["reason"]


def test_close_stops_the_watchdog_without_restarting(sup):
    sup.start()
    sup.close()
    sup.session.dead = True
    time.sleep(0.2)
    assert sup.up and sup.stats()["restarts"] == 0


def test_a_spark_connect_failure_is_reported_by_its_status_and_details():
    from partialflow.server.spark_supervisor import _first_line

    grpc_text = (
        "<_MultiThreadedRendezvous of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "failed to connect to all addresses; last error: Connection refused"\n'
        '\tdebug_error_string = "UNKNOWN:Error received from peer"\n>'
    )
    assert _first_line(RuntimeError(grpc_text)) == (
        "UNAVAILABLE: failed to connect to all addresses; last error: Connection refused")
    assert _first_line(ConnectionRefusedError(111, "Connection refused")) == (
        "[Errno 111] Connection refused")
