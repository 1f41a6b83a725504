"""A dataflow on the Python model, stepped by the test: no JVM, no threads, no sleeping.

``Harness`` wires the real ``Dataflow`` (planner, graph, executor, fills, evictor, reads)
to the model (as storage), the fake runner (as Spark) and a fake clock, with the executor
*stepped*: packets run only when the test calls ``run()``, so every interleaving of
writes, reads, replies and evictions is one the test chose and can replay.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

from fake_runner import FakeRunner, node_rows, state_rows
from model import Model, SqliteOracle

from partialflow.operators.base import GroupedOperator, Row
from partialflow.server.checkpoint import CheckpointStore
from partialflow.server.dataflow import Dataflow, bags
from partialflow.server.dataflow.executor import EXPIRY_EVERY
from partialflow.server.dataflow.packets import Tick
from partialflow.server.dataflow.reads import Read
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.tier import Tier
from partialflow.server.sql import planner


class Clock:
    """Monotonic time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


class Harness:
    def __init__(self, *, memory_limit: int | None = None, upquery_timeout: float = 5.0,
                 checkpoints: Path | None = None, model: Model | None = None,
                 tier: Path | None = None, disk_limit: int = 1 << 40) -> None:
        """``checkpoints``: a checkpoint directory (taken on request only; the start
        recovers from it); ``model``: the base tables of an earlier harness (a restart);
        ``tier``: the disk tier's file (``disk_limit`` bytes), none if None."""
        self.model = model or Model()
        self.runner = FakeRunner(self.model)
        self.clock = Clock()
        store = CheckpointStore(checkpoints) if checkpoints is not None else None
        self.tier = Tier(tier, disk_limit) if tier is not None else None
        self.df = Dataflow(self.model, self.runner, memory_limit=memory_limit,
                           upquery_timeout=upquery_timeout, clock=self.clock,
                           checkpoints=store, tier=self.tier)
        self.df.start(threaded=False)
        self.ex = self.df.executor
        # Keys read from the disk tier are brought back at the next packet asked for, not
        # at most every BRING_BACK_EVERY seconds of the real clock: deterministic steps.
        self.ex.publisher.bring_back_every = 0.0
        self.views: dict[str, str] = {}
        self._oracle: SqliteOracle | None = None
        # The executor logs and survives a packet that raises (a server must not die of
        # one); here any such exception is a bug the test must see.
        self.errors: list[str] = []
        handler = _Collect(self.errors)
        logging.getLogger("partialflow.executor").addHandler(handler)
        self._handler = handler

    def close(self) -> None:
        logging.getLogger("partialflow.executor").removeHandler(self._handler)
        self.df.close()

    # -- setting up ----------------------------------------------------------------------
    def table(self, name: str, columns: list[tuple[str, str]], rows: list[Row] = ()) -> None:
        self.model.create_table(name, columns)
        if rows:
            self.model.write(name, inserts=rows)

    def view(self, name: str, sql: str, candidates: tuple[int, int] | None = None) -> None:
        """CREATE VIEW (its full state is loaded at once). ``candidates``: (MIN/MAX
        candidates, top-k slack) for its partial state instead of the planner's."""
        auto, self.runner.auto = self.runner.auto, True
        saved = planner.MINMAX_CANDIDATES, planner.TOPK_SLACK
        if candidates is not None:
            planner.MINMAX_CANDIDATES, planner.TOPK_SLACK = candidates
        try:
            self.df.create_view(name, sql)
        finally:
            self.runner.auto = auto
            planner.MINMAX_CANDIDATES, planner.TOPK_SLACK = saved
        self.views[name] = sql
        self._oracle = None

    @property
    def oracle(self) -> SqliteOracle:
        if self._oracle is None:
            self._oracle = SqliteOracle(self.model, list(self.views.items()))
        return self._oracle

    # -- driving -------------------------------------------------------------------------
    def run(self) -> int:
        """Run every queued packet (and a tick whose time has come)."""
        return self.ex.run_pending()

    def settle(self) -> None:
        """Run until nothing is left: replies delivered, gathering windows closed."""
        for _ in range(10_000):
            self.run()
            if self.runner.pending or (self.runner.bounds and not self.runner.hold_bounds):
                self.runner.deliver_all()
                continue
            wake = self.ex.next_wake()
            if wake is not None:
                self.clock.now = max(self.clock.now, wake)
                continue
            active = self.ex.fills.active
            if active:  # replies that will never come: let their deadline pass
                deadline = min(f.started for f in active) + self.ex.fills.upquery_timeout
                self.clock.now = max(self.clock.now, deadline) + EXPIRY_EVERY + 0.001
                self.ex.submit(Tick())
                continue
            return
        raise AssertionError("the dataflow did not settle")

    def begin(self, view: str, keys: list[Any]) -> Read:
        return self.df.begin_read(view, keys).start()

    def finish(self, read: Read) -> list[tuple[list[Row], int]]:
        """Drive ``read`` to its answer (delivering every reply)."""
        for _ in range(100):
            if read.done:
                return read.answer()
            if not read.waiter.event.is_set():  # type: ignore[union-attr]
                self.settle()
            if read.waiter.event.is_set():  # type: ignore[union-attr]
                read.resume()
        raise AssertionError(f"read of {read.keys} never finished")

    def lookup(self, view: str, keys: list[Any]) -> list[tuple[list[Row], int]]:
        return self.finish(self.begin(view, keys))

    # -- checking ------------------------------------------------------------------------
    def expected(self, view: str, key: Row, lsn: int) -> list[Row]:
        return self.oracle.answer(self.views[view], key, lsn)

    def mismatch(self, view: str, key: Row, rows: list[Row], lsn: int) -> str | None:
        """None if ``rows`` are the view's answer for ``key`` at ``lsn``, else why not."""
        want = self.expected(view, key, lsn)
        ordered = bool(self.df.reader(view).plan.order)
        got_n, want_n = [norm_row(r) for r in rows], [norm_row(r) for r in want]
        same = got_n == want_n if ordered else Counter(got_n) == Counter(want_n)
        if same:
            return None
        return f"view {view} key {key!r} at LSN {lsn}: dataflow {rows} != sqlite {want}"

    def check_states(self) -> list[str]:
        """Every filled key of every state equals the model at the applied LSN, and the
        byte accounting (each key's rows or groups counted, every state's bytes) matches
        the states (call when nothing is queued)."""
        problems = []
        lsn = self.ex.applied_lsn
        memo: dict[int, list[Row]] = {}
        ev = self.ex.evictor
        lru = ev.lru_sizes()
        tier_keys = 0
        for st in ev.states.values():
            for fk in st.filled_keys():
                # A key shelved in the disk tier is read where it is (not brought back).
                where = st.shelved(fk)
                held = None
                if where is not None:
                    assert self.tier is not None
                    tier_keys += 1
                    held = self.tier.peek(where)
                    if held is None:
                        problems.append(f"{st.label} key {fk!r}: shelved, not in the tier")
                        continue
                    if (st.sid, fk) in lru:
                        problems.append(f"{st.label} key {fk!r}: shelved, yet in the LRU")
                    if st.size_of(fk):
                        problems.append(f"{st.label} key {fk!r}: shelved, yet counted in memory")
                got, want = _state_content(st, fk, self.model, lsn, memo, held)
                if got != want:
                    problems.append(
                        f"{st.label} key {fk!r} at LSN {lsn}: {sorted(got.items(), key=repr)} != "
                        f"model {sorted(want.items(), key=repr)}"
                    )
                if where is None and st.mode != "full" and lru.get((st.sid, fk)) != st.size_of(fk):
                    problems.append(
                        f"{st.label} key {fk!r}: {st.size_of(fk)} B but accounted "
                        f"{lru.get((st.sid, fk))}"
                    )
            if st.anomalies:
                problems.append(f"{st.label}: {st.anomalies} anomalies")
            if st.meter.item_counts() != st.recounted_items():
                kept, counted = st.meter.item_counts(), st.recounted_items()
                wrong = {k: (kept.get(k), counted.get(k)) for k in kept.keys() | counted.keys()
                         if kept.get(k) != counted.get(k)}
                problems.append(f"{st.label}: item counts kept != counted (kept, counted): "
                                f"{dict(list(wrong.items())[:5])}")
            if st.memory_bytes != st.meter.recounted_bytes():
                problems.append(f"{st.label}: running total {st.memory_bytes} B != "
                                f"{st.meter.recounted_bytes()} B summed from its keys")
        if self.tier is not None and not self.tier.broken and (
                (self.tier.keys, self.tier.bytes) != self.tier.stored()
                or self.tier.keys != tier_keys):
            problems.append(f"tier counts {self.tier.keys} keys, {self.tier.bytes} B; "
                            f"stores (keys, bytes) {self.tier.stored()}; states shelve "
                            f"{tier_keys} keys")
        if ev.partial_bytes != sum(lru.values()):
            problems.append(f"partial bytes {ev.partial_bytes} != LRU total {sum(lru.values())}")
        if ev.full_bytes != sum(st.memory_bytes for st in ev.states.values() if st.mode == "full"):
            problems.append("full bytes out of date")
        return problems

    def check_quiet(self) -> list[str]:
        """After settle(): nothing pending, wanted or in flight anywhere, and no packet
        raised."""
        problems = list(self.errors)
        for st in self.ex.evictor.states.values():
            if st.pending_keys():
                problems.append(f"{st.label}: keys {st.pending_keys()} still pending")
        if self.ex.fills.wanted:
            problems.append(f"wanted keys left: {self.ex.fills.wanted}")
        if self.ex.fills.active:
            problems.append(f"fills still in flight: {self.ex.fills.active}")
        return problems


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(f"executor error: {record.getMessage()}: {record.exc_info!r}")


def _state_content(
    st: State, fk: Row, model: Model, lsn: int, memo: dict, held: Any = None
) -> tuple[Counter, Counter]:
    """(what the state holds at ``fk``, what it should hold) as comparable bags. Grouped
    states are compared by their output rows (bounded candidates may differ legitimately).
    ``held``: the key's contents as the disk tier has them (a shelved key)."""
    if st.kind == "rows":
        if held is not None:
            got = Counter(norm_row(r) for r in bags.rows_of((held,) if st.flat else held.values()))
        else:
            got = Counter(norm_row(r) for r in st.bucket_rows(fk))
        want = Counter(norm_row(r) for r in state_rows(st, {fk}, model, lsn, {}))
        return got, want
    op = st.node.op
    assert isinstance(op, GroupedOperator)
    entries = held.items() if held is not None else st.entries(fk)
    got = Counter(norm_row(r) for g, e in entries for r in op.output_rows(g, e))
    want: Counter = Counter()
    for r in node_rows(st.node, model, lsn, memo):
        if st.fill_key_of_index(tuple(r[c] for c in st.index_cols)) == fk:
            want[norm_row(r)] += 1
    return got, want


def norm_row(r: Row) -> Row:
    return tuple(norm_value(v) for v in r)


def norm_value(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return float(f"{v:.9g}")  # incremental float sums differ in the last bits
    return v


def assert_exact(h: Harness, view: str, keys: list, answers: list) -> None:
    """Each key's answer equals sqlite over the model's tables at the answer's LSN."""
    for key, (rows, lsn) in zip(keys, answers, strict=True):
        problem = h.mismatch(view, key, rows, lsn)
        assert problem is None, problem


def assert_settled(h: Harness) -> None:
    """Run until nothing is left; then nothing is pending anywhere and every state and
    its byte accounting match the model."""
    h.settle()
    problems = h.check_quiet() + h.check_states()
    assert not problems, "\n".join(problems)
