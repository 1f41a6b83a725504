"""``partialflow stress`` end to end, as a user runs it: the command in a subprocess against
a real server (in-process here, so no second server JVM), with a memory limit that forces
eviction, the background sampler on, and test hooks enabled.

1. A minute of load (PARTIALFLOW_STRESS_CLI_SECONDS) with Spark scans failing, crawling
   and hanging in windows of about 7 s each (the three windows and their gaps fit in the
   middle 55% of the load): no wrong answer, no lost write, only clean errors, recovery
   afterwards, a readable report.
2. A wrong answer planted (through the test hook) in a filled key during a stress run: the
   run fails and shows the mismatch, and the server's sampler counts it too. The checkers
   can fail.

Correctness, not speed, is under test: the machine is small and shared, so nothing here
depends on how many operations get done, only on every one of them being right.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import InProcessServer

from partialflow.client.stress.hooks import TestHooks

# Each fault mode gets a window either way, and "fail" must make an upquery fail (checked
# below): a longer run adds reads, not kinds of check. The verification after the load is
# one Spark job per view whatever the length. Not shorter: each subscriber must see an
# event, so it needs its snapshot (Spark fills) in the clean 20% before the faults or the
# 25% after them; at 30 s (load 36) neither subscriber got one, at 40 s (load 35) the
# maxlen subscriber's stream was cut 7 times without an event.
DURATION = os.environ.get("PARTIALFLOW_STRESS_CLI_SECONDS", "60")


@pytest.fixture(scope="module")
def hooked_server(spark, tmp_path_factory):
    """A server with test hooks on, a memory limit well under what all keys need (about
    600 KB filled) and every read sampled by the verifier."""
    yield from _with_hooks(tmp_path_factory.mktemp("stress_cli") / "data", spark,
                           memory_limit=300 * 1024, verify_sample=1.0,
                           verify_max_per_second=5.0)


def _with_hooks(data: Path, spark, **config):  # type: ignore[no-untyped-def]
    """A started server with test hooks on (PARTIALFLOW_TEST_HOOKS, put back after)."""
    old = os.environ.get("PARTIALFLOW_TEST_HOOKS")
    os.environ["PARTIALFLOW_TEST_HOOKS"] = "1"
    srv = InProcessServer(data, spark, **config).start()
    yield srv
    srv.stop()
    if old is None:
        os.environ.pop("PARTIALFLOW_TEST_HOOKS", None)
    else:
        os.environ["PARTIALFLOW_TEST_HOOKS"] = old


def _stress(address: str, report: Path, *args: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "partialflow.client.cli",
        "stress",
        "--server",
        address,
        "--report-json",
        str(report),
        *args,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"stress did not finish in {timeout}s:\n{out}\n{err[-3000:]}")


def test_stress_cli_with_faults_finds_nothing_wrong(hooked_server, tmp_path):
    engine = hooked_server.engine
    before = engine.stats()
    report = tmp_path / "report.json"
    proc = _stress(
        hooked_server.address,
        report,
        "--duration",
        DURATION,
        "--writers",
        "2",
        "--write-rate",
        "10",
        "--readers",
        "4",
        "--timeout",
        "30",
        "--seed",
        "7",
        "--faults",
        "fail,slow:3,hang",
        "--fault-window",
        "8",
        "--fault-settle",
        "30",
        "--subscription-gap",
        "10",
    )
    out, err = _finish(proc)
    assert proc.returncode == 0, f"{out}\n{err[-3000:]}"
    r = json.loads(report.read_text())
    # Every read was checked against Spark and none differed; every write is in the tables.
    # Subscribers' rebuilt rows (--subscribers, default 2) are checked like reads.
    assert r["verification"]["checked"] == (
        r["reads"]["keys"] + r["reads"]["recovery_keys"] + r["reads"]["subscription_keys"])
    assert r["reads"]["keys"] > 0 and r["reads"]["recovery_keys"] > 0
    assert r["reads"]["subscription_keys"] > 0
    assert r["verification"]["mismatches"] == 0
    assert r["lost_writes"]["differences"] == 0 and len(r["lost_writes"]["checked_at_lsns"]) == 2
    assert r["writes"]["acknowledged"] > 0 and set(r["views"]) >= {
        "maxlen",
        "avg_winning",
        "top3",
        "tagged",
    }
    # The faults happened, and the only errors were clean ones; afterwards it recovered.
    assert [f["mode"] for f in r["faults"]] == ["fail", "slow:3", "hang"]
    assert r["errors"]["unclean"] == [] and r["recovery"] == [] and r["lsn_regressions"] == []
    after = engine.stats()
    assert after.get("upquery_failures", 0) > before.get("upquery_failures", 0)  # fail fired
    assert engine.dataflow.runner.faults.mode == ""  # and was lifted
    # Subscribers' LSNs (under the memory limit, through the faults) never stood still for
    # more than 10 s with no fault active. (How often they moved depends on the
    # machine: a stream cut off by the "fail" window resumes through a Spark query.)
    subs = r["subscriptions"]
    assert subs["silent_over_bound"] == 0 and len(subs["streams"]) == 2
    for x in subs["streams"]:
        assert x["events"] >= 1 and x["max_gap_without_fault_s"] <= 10, x
    # The memory limit forced evictions beyond the run's own.
    assert after["memory_evictions"] > before.get("memory_evictions", 0)
    assert after["state_anomalies"] == 0
    # The sampler re-checked reads meanwhile and found nothing either.
    assert after["verifier"]["checks"] > 0 and after["verifier"]["mismatches"] == 0
    # A readable report, on stdout; the live progress went to stderr.
    for line in (
        "operations",
        "read latency",
        "fault windows",
        "subscriptions",
        "verification",
        "lost writes",
        "PASS",
    ):
        assert line in out
    assert "writes" in err and "reads" in err


def test_planted_wrong_answer_is_caught_by_stress_and_sampler(hooked_server, tmp_path):
    prefix = "planted_"
    view = prefix + "hot"
    report = tmp_path / "report.json"
    sampler_before = hooked_server.engine.stats()["verifier"]["mismatches"]
    # The run plants the wrong row itself (through the test hook) in the first key of `hot`
    # it reads, and reads it again at once: no race with how fast this machine is. So the
    # load needs only to last until that read (reader 0 picks `hot` half the time), with
    # room for a slow first fill; no subscribers, which the checks here do not look at
    # (the run above checks theirs).
    proc = _stress(
        hooked_server.address,
        report,
        "--duration",
        "8",
        "--subscribers",
        "0",
        "--views",
        "hot,user_products",
        "--writers",
        "1",
        "--write-rate",
        "5",
        "--readers",
        "3",
        "--evict-rate",
        "0",
        "--plant-wrong-answer",
        "hot",
        "--prefix",
        prefix,
        "--keep",
        "--timeout",
        "60",
    )
    out, err = _finish(proc)
    assert proc.returncode == 1, f"{out}\n{err[-3000:]}"
    r = json.loads(report.read_text())
    assert r["planted"] and r["verification"]["mismatches"] > 0 and not r["passed"]
    # Only the planted key is wrong: the oracle raises no false alarm on the other view.
    wrong = {(m["view"], tuple(m["key"])) for m in r["verification"]["first_mismatches"]}
    assert wrong == {(view, ())}
    assert r["lost_writes"]["differences"] == 0 and r["errors"]["unclean"] == []
    assert "MISMATCH 1: view planted_hot key ()" in out and out.rstrip().endswith("FAIL")
    # The sampler, re-checking served reads in the background, counts it too (it may still be
    # working through its queue; a few more reads of the wrong answer help it along).
    with hooked_server.client() as c:
        hooks = TestHooks(c)
        deadline = time.monotonic() + 120
        while hooked_server.engine.stats()["verifier"]["mismatches"] == sampler_before:
            assert time.monotonic() < deadline, hooked_server.engine.stats()["verifier"]
            c.lookup(view, ())  # fill the key
            hooks.corrupt(view, [])
            c.lookup(view, ())  # a read of the wrong answer, for the sampler
            time.sleep(1.0)
        last = hooked_server.engine.stats()["verifier"]["last_mismatch"]
        assert last["view"] == view and last["key"] == []
        for name in ("hot", "user_products"):
            c.execute(f"DROP VIEW IF EXISTS {prefix}{name}")
        for table in ("info", "visit", "auction", "bid", "score"):
            c.execute(f"DROP TABLE IF EXISTS {prefix}{table}")


@pytest.fixture(scope="module")
def tiered_server(spark, tmp_path_factory):
    """A server with a disk tier under a memory limit well under what the keys need, and
    test hooks on (a stress run's --disk-limit changes the tier's limit through them)."""
    yield from _with_hooks(tmp_path_factory.mktemp("stress_tier") / "data", spark,
                           memory_limit=8 * 1024, disk_limit=64 << 20)


def test_stress_cli_with_a_small_disk_tier_verifies_every_read(tiered_server, tmp_path):
    """A short run with keys shelved, brought back and made holes at the tier's limit all
    the time: every read is still checked against Spark and none differs."""
    report = tmp_path / "report.json"
    proc = _stress(
        tiered_server.address, report,
        "--views", "top3,user_products", "--duration", "6", "--writers", "1",
        "--write-rate", "10", "--readers", "3", "--evict-rate", "0", "--subscribers", "0",
        "--timeout", "30", "--seed", "11", "--disk-limit", "8KB",
    )
    out, err = _finish(proc)
    assert proc.returncode == 0, f"{out}\n{err[-3000:]}"
    r = json.loads(report.read_text())
    assert r["verification"]["checked"] == r["reads"]["keys"] + r["reads"]["recovery_keys"]
    assert r["reads"]["keys"] > 0 and r["verification"]["mismatches"] == 0
    assert r["lost_writes"]["differences"] == 0 and r["errors"]["unclean"] == []
    tier = r["disk_tier"]
    assert tier["limit"] == 8 * 1024 and tier["broken"] == 0
    assert tier["shelved"] > 0 and tier["unshelved"] > 0 and tier["evictions"] > 0, tier
    assert "disk tier  limit 8192 bytes" in out and out.rstrip().endswith("PASS")
    # The server has its own limit back, and kept to it meanwhile.
    stats = tiered_server.engine.stats()
    assert stats["tier_limit"] == 64 << 20 and stats["state_anomalies"] == 0


def test_stress_cli_disk_limit_needs_a_server_with_a_tier(hooked_server, tmp_path):
    proc = _stress(hooked_server.address, tmp_path / "r.json", "--disk-limit", "1MB")
    out, err = _finish(proc, timeout=120)
    assert proc.returncode == 1 and "--disk-limit" in err and "without a disk tier" in err, err
    assert not (tmp_path / "r.json").exists()
