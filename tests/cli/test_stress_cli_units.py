"""The pieces of ``partialflow stress`` that need no server or Spark: the write history the
oracle is built from, the writers' model, the fault schedule, and how the report judges."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from partialflow.client.stress import workload as wl
from partialflow.client.stress.load import Writer, fault_schedule
from partialflow.client.stress.record import (
    Failure,
    FaultWindow,
    Journal,
    Read,
    Stream,
    Write,
)
from partialflow.client.stress.report import RunInfo, render, summarize
from partialflow.client.stress.verify import FOREVER, Mismatch, Verdict, intervals, rows_at


def test_history_intervals_give_every_table_as_of_every_lsn():
    writes = [
        Write(1, "t", "seed", [], [("a",), ("a",), ("b",)]),
        Write(2, "t", "delete", [("a",)], []),
        Write(3, "t", "update", [("b",)], [("b",)]),  # same row out and in: still there
        Write(4, "t", "update", [("a",)], [("c",)]),
    ]
    h = intervals(writes)["t"]
    assert rows_at(h, 0) == Counter()
    assert rows_at(h, 1) == Counter({("a",): 2, ("b",): 1})
    assert rows_at(h, 2) == Counter({("a",): 1, ("b",): 1})
    assert rows_at(h, 3) == rows_at(h, 2)
    assert rows_at(h, 4) == Counter({("b",): 1, ("c",): 1})
    assert sum(1 for r in h if r[-1] == FOREVER) == 2


def test_history_refuses_a_delete_nobody_recorded():
    with pytest.raises(ValueError, match="no recorded write inserted"):
        intervals([Write(1, "t", "delete", [("x",)], [])])


def test_writers_only_delete_what_they_inserted_and_never_collide():
    rng = random.Random(3)
    seed = wl.seed_rows(rng)
    writers = [Writer(i, 3, seed, random.Random(i)) for i in range(3)]
    writes = [Write(i + 1, t, "seed", [], rows) for i, (t, rows) in enumerate(seed.items())]
    for n in range(3000):
        table, op, deletes, inserts = writers[n % 3].next_write()
        writes.append(Write(len(writes) + 1, table, op, deletes, inserts))
    history = intervals(writes)  # raises if any delete had nothing to delete
    final = rows_at(history["info"], len(writes))
    assert max(Counter(p for p, _ in final).values()) == 1  # the primary key held
    assert {op for w in writes for op in [w.op]} >= {"insert", "delete", "update"}


def test_fault_windows_sit_in_the_middle_with_gaps():
    windows = fault_schedule(["fail", "slow:3", "hang"], 60, 8)
    assert [m for _, _, m in windows] == ["fail", "slow:3", "hang"]
    assert windows[0][0] == 12 and windows[-1][1] <= 45  # clean start, a quarter clean at the end
    assert all(b[0] - a[1] > 0 for a, b in itertools.pairwise(windows))


def _info(**kw) -> RunInfo:
    base = {
        "server": "s",
        "prefix": "p_",
        "seed": 1,
        "views": ["maxlen"],
        "duration": 10.0,
        "miss_ms": 50.0,
        "settle": 5.0,
        "recovery": [],
        "plant": None,
        "server_delta": {},
        "server_upquery_ms": {},
        "phases": {},
    }
    return RunInfo(**{**base, **kw})


def test_report_judges_errors_by_kind_and_fault_window():
    j = Journal()
    j.windows.append(FaultWindow("fail", 2.0, 4.0))
    j.reads.append(Read("maxlen", ("c1",), 7, [("c1", 3)], 1.0, 3.0, "lookup", 0))
    j.calls.append((3.0, "lookup", 1))
    j.failures += [
        Failure("read", "Unavailable", "upquery failed", 3.0, 3.1, "maxlen"),  # in the window
        Failure("read", "DeadlineExceeded", "slow", 6.0, 7.0, "maxlen"),  # settling after it
    ]
    s = summarize(j, Verdict(checked=1), _info())
    assert s["passed"]
    assert s["errors"]["clean_in_fault_windows"] == {"Unavailable": 1, "DeadlineExceeded": 1}
    # A read that failed with no fault active (it timed out) fails the run: liveness.
    j.failures.append(Failure("read", "DeadlineExceeded", "slow", 20.0, 21.0, "maxlen"))
    s = summarize(j, Verdict(checked=1), _info())
    assert not s["passed"] and s["errors"]["clean_without_fault"] == {"DeadlineExceeded": 1}
    j.failures.pop()
    j.failures.append(Failure("write", "Unavailable", "down", 5.0, 5.1, "insert visit"))
    s = summarize(j, Verdict(checked=1), _info())
    assert not s["passed"] and len(s["errors"]["unclean"]) == 1  # writes never touch Spark


def test_report_fails_a_read_slower_than_the_bound_with_no_fault_active():
    j = Journal()
    j.windows.append(FaultWindow("slow:30", 2.0, 4.0))
    j.reads.append(Read("maxlen", ("c1",), 7, [("c1", 3)], 3.0, 25_000.0, "lookup", 0))
    s = summarize(j, Verdict(checked=1), _info(read_bound=20.0))
    assert s["passed"]  # slow because of the fault: expected
    j.reads.append(Read("maxlen", ("c2",), 9, [("c2", 3)], 40.0, 21_000.0, "lookup", 0))
    s = summarize(j, Verdict(checked=2), _info(read_bound=20.0))
    assert not s["passed"] and s["latency_ms"]["over_bound_count"] == 1
    assert "reads over 20 s with no fault active (a failure): 1" in render(s)


def test_report_shows_a_mismatch_in_full_and_fails():
    j = Journal()
    read = Read("maxlen", ("c1",), 7, [("c1", 3)], 1.0, 3.0, "lookup", 0)
    j.reads.append(read)
    verdict = Verdict(checked=1, mismatches=[Mismatch(read, 6, [("c1", 4)])])
    text = render(summarize(j, verdict, _info()))
    assert "MISMATCH 1: view p_maxlen key ('c1',) at LSN 7" in text
    assert "served:   [\"('c1', 3)\"]" in text and "expected: [\"('c1', 4)\"]" in text
    assert text.endswith("FAIL")


def test_report_fails_a_subscription_silent_over_the_gap_with_no_fault_active():
    """Issue 31: a stream whose LSN stands still (heartbeats repeating one LSN count as
    nothing) fails the run, unless a fault window explains it; the wait for the snapshot
    is judged like a read's."""
    j = Journal()
    j.windows.append(FaultWindow("hang", 10.0, 18.0))
    # Snapshot after 6 s, heartbeats each second, then 9 s of silence inside the window
    # (counting its settle time), then on to the end.
    events = [6.0 + i for i in range(6)] + [20.0 + i for i in range(20)]
    j.streams.append(Stream(0, "maxlen", 0.0, events))  # open when the load ended
    s = summarize(j, Verdict(), _info(duration=40.0, subscription_gap=5.0, settle=2.0))
    assert s["passed"], render(s)
    x = s["subscriptions"]["streams"][0]
    assert x["max_gap_s"] == 9.0 and x["max_gap_without_fault_s"] == 1.0 and x["events"] == 26
    # The same stream silent for its last 13 s (the load ended at 52 s): a failure.
    s = summarize(j, Verdict(), _info(duration=52.0, subscription_gap=5.0, settle=2.0))
    assert not s["passed"] and s["subscriptions"]["silent_over_bound"] == 1
    assert s["subscriptions"]["streams"][0]["max_gap_without_fault_s"] == 13.0
    assert "stood still at most 13 s, 13 s with no fault active at 39 s: FAIL" in render(s)
    # A snapshot slower than the read bound is a silence like any other.
    j = Journal()
    j.streams.append(Stream(1, "top", 1.0, [15.0, 16.0], 17.0))
    s = summarize(j, Verdict(), _info(duration=20.0, subscription_gap=5.0, read_bound=20.0))
    assert s["passed"], render(s)
    s = summarize(j, Verdict(), _info(duration=20.0, subscription_gap=5.0, read_bound=10.0))
    assert not s["passed"] and s["subscriptions"]["streams"][0]["max_gap_without_fault_s"] == 14.0


def test_report_says_what_the_disk_tier_did_during_the_run():
    from partialflow.client.stress.run import _tier_delta, _tier_figures

    assert _tier_figures({"lsn": 3}) is None  # a server without a tier: no line
    before = _tier_figures({"tier_limit": 8192, "tier_keys": 5, "tier_bytes": 900,
                            "tier_shelved": 10, "tier_unshelved": 4, "tier_evictions": 1,
                            "tier_commits": 2, "tier_broken": 0, "tier_read": 3})
    after = _tier_figures({"tier_limit": 8192, "tier_keys": 7, "tier_bytes": 1200,
                           "tier_shelved": 30, "tier_unshelved": 20, "tier_evictions": 6,
                           "tier_commits": 3, "tier_broken": 1, "tier_read": 40})
    tier = _tier_delta(before, after)
    assert tier == {"limit": 8192, "keys": 7, "bytes": 1200, "shelved": 20, "unshelved": 16,
                    "evictions": 5, "commits": 1, "broken": 1, "read": 37}
    j = Journal()
    j.reads.append(Read("maxlen", ("c1",), 7, [("c1", 3)], 1.0, 3.0, "lookup", 0))
    s = summarize(j, Verdict(checked=1), _info(disk_tier=tier))
    assert s["passed"] and s["disk_tier"] == tier
    text = render(s)
    assert ("disk tier  limit 8192 bytes: 20 keys shelved, 37 read from it and 16 brought "
            "back (no upquery), 5 made holes at its limit; 7 keys (1200 bytes) shelved at the "
            "end; BROKEN") in text
    assert "disk tier" not in render(summarize(j, Verdict(checked=1), _info()))
