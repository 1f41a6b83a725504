"""The ordering rules under random interleavings, checked without a JVM.

A Hypothesis state machine drives the real dataflow (stepped executor, fake runner on a
Python model of the base tables, fake clock) through random inserts, deletes and
updates, single and batch reads, evictions (of view keys and of keys inside the graph),
memory-limit changes, and upquery replies that are delivered late, out of order, failed
or never (then the fill's deadline must end it). Every answered read is compared with
sqlite running the view's SQL over the model's tables as of the answer's LSN. At the end
every reply is delivered: every read must complete, nothing may stay pending, every
filled key of every state must equal the model, and the byte accounting must add up.

Runs in CI on every run: ``PARTIALFLOW_HYPOTHESIS=ci`` (the default) is derandomized and
bounded; ``=long`` explores much further (e.g. before merging changes to the executor).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from scenarios import SCENARIOS, Scenario
from stepped import Harness

from partialflow.server.dataflow.executor import EXPIRY_EVERY
from partialflow.server.dataflow.packets import Tick
from partialflow.server.dataflow.reads import Read
from partialflow.server.errors import DeadlineExceeded, Unavailable

settings.register_profile(
    "ci", max_examples=int(os.environ.get("PARTIALFLOW_HYPOTHESIS_EXAMPLES", "25")),
    stateful_step_count=60, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "long", max_examples=1000, stateful_step_count=100, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = os.environ.get("PARTIALFLOW_HYPOTHESIS", "ci")

# Clock steps: none, below, around and above the gathering windows (5 and 50 ms). The
# fills' deadline (UPQUERY_TIMEOUT) passes only in pass_deadline.
UPQUERY_TIMEOUT = 5.0
CLOCK_STEPS = [0.0, 0.0, 0.001, 0.004, 0.006, 0.006, 0.03, 0.06, 0.5]


class Ordering(RuleBasedStateMachine):
    """One scenario (tables and views, set by a subclass); rules interleave freely."""

    scenario_name: str = ""
    scenario: Scenario
    h: Harness
    steps = 0  # rules run, over all examples (for the steps/second figure)

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, Read]] = []  # reads waiting for fills
        self.answered = 0
        self.failed = 0
        # Set once a reply failed or was lost, or the clock jumped past a deadline: only
        # then may a read fail.
        self.faults = False

    # -- set-up ------------------------------------------------------------------------
    @initialize(data=st.data())
    def setup(self, data: st.DataObject) -> None:
        sc = self.scenario = SCENARIOS[self.scenario_name]
        # Half the examples keep keys evicted for memory in a disk tier (dataflow/tier.py),
        # some with a tier so small that shelved keys become holes too.
        self._dir = tempfile.mkdtemp(prefix="pf-tier-")
        tier = data.draw(st.sampled_from([None, 1 << 30, 2_000]), label="disk limit")
        self.h = Harness(upquery_timeout=UPQUERY_TIMEOUT,
                         tier=None if tier is None else Path(self._dir) / "tier.db",
                         disk_limit=tier or 0)
        for table, columns in sc.tables.items():
            rows = data.draw(
                st.lists(sc.rows[table], max_size=sc.initial), label=f"rows of {table}"
            )
            self.h.table(table, columns, rows)
        for view, sql in sc.views.items():
            self.h.view(view, sql, sc.candidates)
        # Set after creating the views: a full state over the limit would refuse them.
        self.h.df.set_memory_limit(
            data.draw(st.sampled_from(sc.memory_limits), label="memory_limit")
        )

    # -- writes ------------------------------------------------------------------------
    @rule(data=st.data(), kind=st.sampled_from(["insert", "insert", "delete", "update"]))
    def write(self, data: st.DataObject, kind: str) -> None:
        sc, model = self.scenario, self.h.model
        table = data.draw(st.sampled_from(sorted(sc.tables)), label="table")
        live = model.live(table)
        if kind == "insert" or not live:
            rows = data.draw(st.lists(sc.rows[table], min_size=1, max_size=3), label="inserts")
            model.write(table, inserts=rows)
            return
        n = 1 if kind == "update" else data.draw(st.integers(1, min(2, len(live))), label="n")
        picked = data.draw(st.lists(st.sampled_from(live), min_size=n, max_size=n), label="deletes")
        live_left = list(live)
        gone = []
        for r in picked:  # a bag: delete each row at most as often as it is there
            if r in live_left:
                live_left.remove(r)
                gone.append(r)
        new = [data.draw(sc.rows[table], label="new row")] if kind == "update" else []
        model.write(table, inserts=new, deletes=gone)

    @rule(data=st.data())
    def transaction(self, data: st.DataObject) -> None:
        """Changes to several tables (and to one table twice) at one LSN: joins and sums
        over both must equal sqlite's answer over the tables after the whole transaction."""
        sc, model = self.scenario, self.h.model
        tables = data.draw(st.lists(st.sampled_from(sorted(sc.tables)), min_size=2,
                                    max_size=4), label="tables")
        live = {t: model.live(t) for t in sc.tables}
        changes = []
        for table in tables:
            rows = data.draw(st.lists(sc.rows[table], max_size=2), label="inserts")
            left = live[table]
            gone = data.draw(st.lists(st.sampled_from(left), max_size=2, unique=True)
                             if left else st.just([]), label="deletes")
            for r in gone:
                left.remove(r)
            left.extend(rows)
            changes.append((table, rows, gone))
        model.write_many(changes)

    @rule(data=st.data(), extreme=st.sampled_from([min, max]), times=st.integers(1, 3))
    def delete_extreme(self, data: st.DataObject, extreme: Any, times: int) -> None:
        """In one group of rows (equal in a column), delete the rows holding another
        column's least (or greatest) value, ``times`` writes in a row: what exhausts the
        bounded candidates of MIN/MAX and top-k groups."""
        sc, model = self.scenario, self.h.model
        table, by, col = data.draw(st.sampled_from(sc.extremes), label="table, group by, column")
        live = model.live(table)
        if not live:
            return
        group = data.draw(st.sampled_from(live), label="group of")[by] if by is not None else None
        for _ in range(times):
            rows = [
                r
                for r in model.live(table)
                if (by is None or r[by] == group) and r[col] is not None
            ]
            if not rows:
                return
            target = extreme(r[col] for r in rows)
            model.write(table, deletes=[r for r in rows if r[col] == target])

    # -- reads -------------------------------------------------------------------------
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        view = data.draw(st.sampled_from(sorted(self.scenario.views)), label="view")
        keys = data.draw(
            st.lists(st.sampled_from(self.scenario.keys[view]), min_size=1, max_size=3),
            label="keys",
        )
        self._start(view, keys)

    def _start(self, view: str, keys: list[Any]) -> None:
        read = self.h.begin(view, keys)
        if read.done:  # every key was filled (or NULL)
            self._check(view, read)
        else:
            self.reads.append((view, read))

    # Settling answers every fill in flight, so the two rules below act only now and
    # then: most of the time fills stay in flight for writes, evictions and faults to
    # interleave with.
    @rule(data=st.data(), now=st.sampled_from([False, False, True]))
    def read_and_settle(self, data: st.DataObject, now: bool) -> None:
        """A read that waits until it is answered, every reply delivered meanwhile."""
        self.read(data)
        if now:
            self.h.settle()
            self._resume_reads()

    @rule(now=st.sampled_from([False, False, True]))
    def read_everything(self, now: bool) -> None:
        """Every key of every view, read until answered: the whole graph gets filled."""
        if not now:
            return
        for view, keys in self.scenario.keys.items():
            self._start(view, keys)
        self.h.settle()
        self._resume_reads()

    def _check(self, view: str, read: Read) -> None:
        for key, (rows, lsn) in zip(read.keys, read.answer(), strict=True):
            assert lsn <= self.h.model.lsn
            problem = self.h.mismatch(view, key, rows, lsn)
            assert problem is None, problem
        self.answered += 1

    def _resume_reads(self) -> None:
        still = []
        for view, read in self.reads:
            if read.waiter is not None and read.waiter.event.is_set():
                try:
                    read.resume()
                except (Unavailable, DeadlineExceeded) as e:
                    # A failed or lost reply fails its reads cleanly; nothing else may.
                    assert self.faults, f"read of {read.keys} failed with no fault injected: {e}"
                    self.failed += 1
                    continue
                if read.done:
                    self._check(view, read)
                    continue
            still.append((view, read))
        self.reads = still

    # -- the executor, the clock and the runner ----------------------------------------
    @rule(dt=st.sampled_from(CLOCK_STEPS))
    def run(self, dt: float) -> None:
        """Let time pass (gathering windows close), then run what is queued."""
        self.h.clock.advance(dt)
        self.h.run()
        self._resume_reads()

    @precondition(lambda self: bool(self.h.runner.pending))
    @rule(data=st.data(), outcome=st.sampled_from(["deliver"] * 8 + ["fail", "drop"]))
    def reply(self, data: st.DataObject, outcome: str) -> None:
        """Answer any submitted fill (replies come back in any order), or fail or lose it."""
        runner = self.h.runner
        i = data.draw(st.integers(0, len(runner.pending) - 1), label="which reply")
        self.faults |= outcome != "deliver"
        getattr(runner, outcome)(i)

    @precondition(lambda self: bool(self.h.ex.fills.active))
    @rule(now=st.sampled_from([False] * 5 + [True]))
    def pass_deadline(self, now: bool) -> None:
        """Now and then, every fill in flight outlives its deadline."""
        if now:
            self.faults = True
            self.h.clock.advance(UPQUERY_TIMEOUT + EXPIRY_EVERY + 0.01)
            self.h.ex.submit(Tick())

    # -- eviction and memory -----------------------------------------------------------
    @rule(data=st.data())
    def evict_view_key(self, data: st.DataObject) -> None:
        view = data.draw(st.sampled_from(sorted(self.scenario.views)), label="view")
        keys = [k for k in self.scenario.keys[view] if None not in k]
        key = data.draw(st.sampled_from(keys + [None]), label="key")
        self.h.df.evict(view, key)
        self._resume_reads()

    @rule(data=st.data())
    def evict_inside(self, data: st.DataObject) -> None:
        """Evict a key of any partial state inside the graph (as memory pressure may)."""
        ex = self.h.ex
        candidates = sorted(((s.sid, fk) for s in ex.evictor.states.values() if s.mode != "full"
                             for fk in s.filled_keys() + s.pending_keys()), key=repr)
        if not candidates:
            return
        sid, fk = data.draw(st.sampled_from(candidates), label="state key")
        state = ex.evictor.states[sid]
        ex.call(lambda: ex.evictor.evict(state, fk)).result()
        self._resume_reads()

    @rule(limit=st.sampled_from([None, None, 1_500, 4_000, 20_000]))
    def memory_limit(self, limit: int | None) -> None:
        self.h.df.set_memory_limit(limit)
        self._resume_reads()

    # -- always ------------------------------------------------------------------------
    @invariant()
    def no_anomalies(self) -> None:
        Ordering.steps += 1
        if hasattr(self, "h"):
            bad = [s.label for s in self.h.ex.evictor.states.values() if s.anomalies]
            assert not bad, f"rows retracted that were never there in {bad}"
            assert not self.h.errors, self.h.errors

    def teardown(self) -> None:
        if not hasattr(self, "h"):
            return
        h = self.h
        try:
            # Deliver everything: every read must now complete (or have failed cleanly).
            for _ in range(50):
                h.settle()
                self._resume_reads()
                if not self.reads:
                    break
            assert not self.reads, f"reads never answered: {[r.keys for _, r in self.reads]}"
            problems = h.check_quiet() + h.check_states()
            assert not problems, "\n".join(problems)
            # A last read of every key of every view, cold or hot.
            for view, keys in self.scenario.keys.items():
                for key, (rows, lsn) in zip(keys, h.lookup(view, keys), strict=True):
                    problem = h.mismatch(view, key, rows, lsn)
                    assert problem is None, problem
            h.settle()
            problems = h.check_quiet() + h.check_states()
            assert not problems, "\n".join(problems)
        finally:
            h.close()
            shutil.rmtree(self._dir, ignore_errors=True)


def _machine(name: str) -> type[Ordering]:
    cls = type(f"Ordering_{name}", (Ordering,), {"scenario_name": name})
    cls.TestCase.settings = settings.get_profile(PROFILE)
    return cls


# One state machine per scenario, so every view shape gets its share of the examples.
for _name in sorted(SCENARIOS):
    globals()[f"TestOrdering_{_name}"] = _machine(_name).TestCase


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@settings(max_examples=3, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_every_scenario_settles_exactly(name: str, data: st.DataObject) -> None:
    """A fixed pass over each scenario (reads cold, writes, reads hot, evict, read again),
    so every view shape runs in CI whatever the random runs pick."""
    sc = SCENARIOS[name]
    h = Harness(upquery_timeout=UPQUERY_TIMEOUT)
    for table, columns in sc.tables.items():
        h.table(
            table,
            columns,
            data.draw(st.lists(sc.rows[table], min_size=sc.initial, max_size=sc.initial)),
        )
    for view, sql in sc.views.items():
        h.view(view, sql, sc.candidates)
    try:
        for step in range(3):
            for view, keys in sc.keys.items():
                for key, (rows, lsn) in zip(keys, h.lookup(view, keys), strict=True):
                    problem = h.mismatch(view, key, rows, lsn)
                    assert problem is None, problem
            for table in sc.tables:
                live = h.model.live(table)
                h.model.write(table, inserts=[data.draw(sc.rows[table])], deletes=live[:1])
            if step == 1:
                for view in sc.keys:
                    h.df.evict(view, None)
        h.settle()
        problems = h.check_quiet() + h.check_states()
        assert not problems, "\n".join(problems)
    finally:
        h.close()
