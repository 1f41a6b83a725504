"""Subscribers in a stress run: each subscribes to every key of one view, rebuilds the
keys' rows from the events, and records them as reads at the LSNs it is told, so the
verifier checks them against Spark over the write history like any lookup.

What is recorded (call "subscription"): every key of the snapshot (or of the first batch
after a resume), each changed key at the LSN of its batch, one random key at each
heartbeat, and every key at the end. And when each stream's LSN moved (``Stream``; a
heartbeat repeating the last LSN does not count): the report fails a stream whose LSN
stood still for longer than ``--subscription-gap`` seconds with no fault active while the
writers kept writing (heartbeats kept coming, at one LSN, for many seconds).

A stream cut off (a slow reader, a refill failing under a fault) is a failure of kind
ResourceExhausted/Unavailable, and the subscriber resumes from the LSN the error
carries, keeping the rows it rebuilt: the resumed stream's first batch must bring
exactly those rows up to date.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

from partialflow.client import CaughtUp, Change, Heartbeat, PartialflowError, Snapshot
from partialflow.client.stress import workload as wl
from partialflow.client.stress.record import Failure, Journal, Read, Stream

CALL = "subscription"


class _Rebuilt:
    def __init__(self, spec: wl.ViewSpec, journal: Journal, index: int) -> None:
        self.spec = spec
        self.journal = journal
        self.index = index
        self.rows: dict[tuple, Counter] = {}
        self.lsn = 0  # the last LSN every key was exact at
        self.batch_lsn: int | None = None
        self.batch_keys: set[tuple] = set()
        self.problems: list[str] = []

    def record(self, keys: Any, lsn: int) -> None:
        now = self.journal.now()
        self.journal.add(reads=[
            Read(self.spec.name, k, lsn, list(self.rows.get(k, Counter()).elements()), now, 0.0,
                 CALL, -1 - self.index)
            for k in keys
        ])

    def end_batch(self) -> None:
        if self.batch_lsn is not None:
            self.record(sorted(self.batch_keys, key=repr), self.batch_lsn)
            self.lsn = self.batch_lsn
            self.batch_lsn, self.batch_keys = None, set()

    def apply(self, event: Any, rng: random.Random) -> None:
        if isinstance(event, Change) and event.lsn != self.batch_lsn:
            self.end_batch()
        if isinstance(event, Snapshot):
            self.end_batch()
            self.rows = {k: Counter(v) for k, v in event.rows.items()}
            self.lsn = event.lsn
            self.record(list(self.rows), event.lsn)
        elif isinstance(event, Change):
            if event.lsn < self.lsn:
                self.problems.append(f"change at LSN {event.lsn} after LSN {self.lsn}")
            bag = self.rows.setdefault(event.key, Counter())
            for r in event.deleted:
                if bag[r] <= 0:  # a deletion of a row not held: the stream lost something
                    self.problems.append(
                        f"{event.key!r} at LSN {event.lsn}: deleted {r!r} not held")
                bag[r] -= 1
            bag.update(event.inserted)
            self.rows[event.key] = +bag
            self.batch_lsn = event.lsn
            self.batch_keys.add(event.key)
        elif isinstance(event, CaughtUp):
            self.end_batch()
            self.lsn = event.lsn
            self.record(list(self.spec.keys), event.lsn)
        elif isinstance(event, Heartbeat):
            self.end_batch()
            if event.lsn < self.lsn:
                self.problems.append(f"heartbeat at LSN {event.lsn} after LSN {self.lsn}")
            self.lsn = event.lsn
            if self.spec.keys:
                self.record([rng.choice(self.spec.keys)], event.lsn)


def run_subscriber(client: Any, prefix: str, index: int, spec: wl.ViewSpec, journal: Journal,
                   stop: threading.Event, rng: random.Random) -> None:
    """Subscribe to every key of ``spec``'s view until ``stop``; resume after cut-offs."""
    state = _Rebuilt(spec, journal, index)
    keys = [tuple(k) for k in spec.keys]
    from_lsn: int | None = None
    while not stop.is_set():
        start = journal.now()
        stream = Stream(index, spec.name, start)
        journal.streams.append(stream)
        try:
            with client.subscribe(prefix + spec.name, keys, from_lsn=from_lsn) as sub:
                # Heartbeats wake the loop at least once a second to notice ``stop``. It
                # stops between batches only: every key recorded at the end is exact then.
                for event in sub:
                    if event.lsn > stream.lsn:
                        stream.lsn = event.lsn
                        stream.events.append(journal.now())
                    mid_batch = isinstance(event, Change) and event.lsn == state.batch_lsn
                    if stop.is_set() and not mid_batch:
                        break
                    state.apply(event, rng)
            stream.closed = journal.now()
            state.end_batch()
        except PartialflowError as err:
            stream.closed = journal.now()
            state.end_batch()
            if stop.is_set():  # the load is over and its channel closed under it
                break
            journal.add(failure=Failure(
                "subscription", type(err).__name__, str(err).splitlines()[0] if str(err) else "",
                start, journal.now(), spec.name))
            resume = getattr(err, "resume_lsn", 0)
            if resume:
                from_lsn = resume
                state.lsn = resume
            elif state.lsn:
                from_lsn = state.lsn
            stop.wait(0.5)  # as a client would: don't spin on a fault that fails at once
    if state.lsn and state.rows:
        state.record(keys, state.lsn)
    for p in state.problems[:5]:
        journal.lsn_regressions.append(f"subscriber {index} ({spec.name}): {p}")
