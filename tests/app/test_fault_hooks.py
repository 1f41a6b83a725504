"""Fault injection and the test-only hooks: off by default, refused unless enabled, and a
lifted hang lets the stuck scan go on at once (so hung workers do not pile up)."""

from __future__ import annotations

import threading
import time

import pytest

from partialflow.client import FailedPrecondition, InvalidArgument
from partialflow.client.stress.hooks import TestHooks
from partialflow.server.errors import InvalidArgument as ServerInvalidArgument
from partialflow.server.upquery import FaultInjector


def test_faults_are_off_by_default(monkeypatch):
    monkeypatch.delenv("PARTIALFLOW_FAULTS", raising=False)
    faults = FaultInjector()
    assert faults.mode == ""
    t0 = time.monotonic()
    faults.before_scan()
    assert time.monotonic() - t0 < 0.1


def test_fault_modes_fail_slow_and_unknown():
    faults = FaultInjector()
    faults.mode = "fail"
    with pytest.raises(RuntimeError, match="injected fault"):
        faults.before_scan()
    faults.mode = "slow:0.3"
    t0 = time.monotonic()
    faults.before_scan()
    assert 0.25 <= time.monotonic() - t0 < 5
    for bad in ("bogus", "slow:", "slow:-1", "hang:3"):
        with pytest.raises(ServerInvalidArgument, match="unknown fault mode"):
            faults.mode = bad


def test_lifting_a_hang_wakes_the_stuck_scan():
    faults = FaultInjector()
    faults.mode = "hang"
    scans = [threading.Thread(target=faults.before_scan) for _ in range(3)]
    for t in scans:
        t.start()
    time.sleep(0.3)
    assert all(t.is_alive() for t in scans)  # hanging, as asked
    faults.mode = ""
    for t in scans:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in scans)


def test_hooks_are_refused_unless_enabled(server, monkeypatch):
    uniq = "fault_hooks_"
    monkeypatch.delenv("PARTIALFLOW_TEST_HOOKS", raising=False)
    with server.client() as c:
        c.execute(f"CREATE TABLE {uniq}t (k BIGINT, v BIGINT)")
        c.insert(f"{uniq}t", [(1, 10)])
        c.execute(f"CREATE VIEW {uniq}v AS SELECT k, v FROM {uniq}t WHERE k = ?")
        assert c.lookup(f"{uniq}v", 1).rows == [(1, 10)]
        hooks = TestHooks(c)
        with pytest.raises(FailedPrecondition, match="PARTIALFLOW_TEST_HOOKS=1"):
            hooks.set_faults("fail")
        with pytest.raises(FailedPrecondition):
            hooks.corrupt(f"{uniq}v", [1])
        assert server.engine.dataflow.runner.faults.mode == ""
        assert c.lookup(f"{uniq}v", 1).rows == [(1, 10)]

        monkeypatch.setenv("PARTIALFLOW_TEST_HOOKS", "1")
        with pytest.raises(InvalidArgument, match="unknown fault mode"):
            hooks.set_faults("sometimes")
        assert hooks.set_faults("slow:1") == ""
        assert hooks.set_faults("") == "slow:1"
        assert not hooks.corrupt(f"{uniq}v", [2])  # not filled: nothing planted
        assert hooks.corrupt(f"{uniq}v", [1])
        assert c.lookup(f"{uniq}v", 1).rows == [(1, 10), (1, 10)]  # the wrong answer
        c.evict(f"{uniq}v", 1)
        assert c.lookup(f"{uniq}v", 1).rows == [(1, 10)]  # refilled from Spark: right again
