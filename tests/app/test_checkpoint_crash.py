"""Kill -9 with checkpoints on, through the real binary, at random moments: while writes
stream and checkpoints are written (stretched by a test hook so kills land inside them),
and during recovery itself. After every restart each key of each view is exact at its LSN
against Spark SQL over the base tables, and no acknowledged write is lost.

Each round costs two or three server start-ups (a JVM each). CI runs 2 rounds, which
between them cover every kind of kill: the first round's kill waits for a checkpoint file
being written (so one is always cut short), the second lands at a random moment and then
kills the restart during start-up. PARTIALFLOW_CRASH_ROUNDS=N runs more rounds (kills at
random moments, every other one also during start-up), PARTIALFLOW_CRASH_SEED another
seed."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from helpers import ServerProcess
from oracle import check_results

from partialflow.client import Client, PartialflowError

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("PARTIALFLOW_CRASH_ROUNDS", "2"))
KEYS = 300
COUNTS = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
VISITS = (
    "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
    "ON info.product = visit.product WHERE category = ? GROUP BY category"
)


class Writer(threading.Thread):
    """Streams inserts (and deletes of its own acknowledged rows) until the server dies."""

    def __init__(self, address: str, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.rng, self.stop = address, random.Random(seed), stop
        self.seed = seed
        self.acked = 0  # ev rows inserted minus deleted, acknowledged
        # Rows of the call cut off by the kill: it may or may not have been applied.
        self.unknown_ins = 0
        self.unknown_del = 0
        self.live: list[tuple] = []

    def run(self) -> None:
        n = 0
        with Client(self.address, timeout=10) as c:
            while not self.stop.is_set():
                n += 1
                deleting = bool(self.live) and self.rng.random() < 0.25
                rows = [(self.rng.randrange(KEYS), self.seed * 10**6 + n * 10 + i)
                        for i in range(self.rng.randint(1, 4))]
                try:
                    if deleting:
                        row = self.live.pop(self.rng.randrange(len(self.live)))
                        c.delete("ev", [row])
                        self.acked -= 1
                    else:
                        c.insert("ev", rows)
                        self.live.extend(rows)
                        self.acked += len(rows)
                        if n % 5 == 0:
                            c.insert("visit", [(f"p{self.rng.randrange(40)}", "w", n)])
                except PartialflowError:
                    if deleting:
                        self.unknown_del += 1
                    else:
                        self.unknown_ins += len(rows)
                    return


def _check(srv: ServerProcess, acked: int, unknown: tuple[int, int]) -> dict:
    with Client(srv.address, timeout=60) as c:
        counts = c.lookup_many("counts", list(range(KEYS)))
        visits = {f"c{i}": c.lookup("mv", f"c{i}") for i in range(10)}
        # Every key against Spark: one GROUP BY per LSN the keys were answered at.
        for lsn in {r.lsn for r in counts.values()}:
            spark = {row[0]: [tuple(row)] for row in c.query(
                "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k", as_of=lsn).rows}
            for k, r in counts.items():
                if r.lsn == lsn:
                    assert r.rows == spark.get(k, []), (k, lsn, r.rows, spark.get(k))
        assert check_results(c, VISITS, {(k,): r for k, r in visits.items()}) == []
        total = sum(r.rows[0][1] for r in counts.values() if r.rows)
        # No acknowledged write lost, none applied twice.
        assert acked - unknown[1] <= total <= acked + unknown[0], (acked, total, unknown)
        return c.stats()["checkpoint"]


def _wait_for_checkpoint_write(data_dir, timeout: float = 30.0) -> None:
    """Until a checkpoint file is being written (a ``*.tmp`` in the checkpoint directory:
    the test hook stretches each write to seconds)."""
    deadline = time.monotonic() + timeout
    while not any((data_dir / "checkpoints").glob("*.tmp")):
        assert time.monotonic() < deadline, "no checkpoint was written while writes streamed"
        time.sleep(0.02)


def test_kill_9_during_writes_checkpoints_and_recovery(tmp_path):
    rng = random.Random(int(os.environ.get("PARTIALFLOW_CRASH_SEED", "13")))
    os.environ["PARTIALFLOW_TEST_HOOKS"] = "1"
    os.environ["PARTIALFLOW_TEST_CHECKPOINT_DELAY"] = "0.4"
    srv = ServerProcess(tmp_path / "data", args=("--checkpoint-interval", "0.5"))
    try:
        srv.start()
        with Client(srv.address) as c:
            c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
            c.execute("CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)")
            c.execute("CREATE TABLE visit (product TEXT, user TEXT, length BIGINT)")
            c.insert("ev", [(k, 0) for k in range(KEYS)])
            c.insert("info", [(f"p{i}", f"c{i % 10}") for i in range(40)])
            c.insert("visit", [(f"p{i % 40}", "u", i) for i in range(200)])
            c.execute(f"CREATE VIEW counts AS {COUNTS}")
            c.execute(f"CREATE VIEW mv AS {VISITS}")
        acked, unknown_ins, unknown_del = KEYS, 0, 0
        recovered = []
        for rnd in range(ROUNDS):
            # Fills every key, so checkpoints have work.
            info = _check(srv, acked, (unknown_ins, unknown_del))
            recovered.append(info.get("recovered_from", 0))
            stop = threading.Event()
            writers = [Writer(srv.address, rnd * 10 + i, stop) for i in range(2)]
            for w in writers:
                w.start()
            time.sleep(rng.uniform(0.5, 3.0))
            if rnd == 0:  # the first kill cuts a checkpoint file short, whatever the timing
                _wait_for_checkpoint_write(srv.data_dir)
            srv.kill()
            stop.set()
            for w in writers:
                w.join(30)
                acked += w.acked
                unknown_ins += w.unknown_ins
                unknown_del += w.unknown_del
            if rnd % 2 == 1:
                # Kill again while it starts: Spark coming up, or recovery under way
                # (start() kills it when the time is up).
                try:
                    srv.start(timeout=rng.uniform(4.0, 12.0))
                except TimeoutError:
                    pass
                else:
                    srv.kill()
            srv.start()
        info = _check(srv, acked, (unknown_ins, unknown_del))
        recovered.append(info.get("recovered_from", 0))
        # Checkpoints were really in play: most restarts recovered from one, and some kill
        # cut a checkpoint file short (the restart found it unfinished and removed it).
        assert sum(1 for r in recovered[1:] if r) >= ROUNDS // 2, recovered
        assert "removing unfinished checkpoint file" in srv.log_path.read_text()
    finally:
        os.environ.pop("PARTIALFLOW_TEST_CHECKPOINT_DELAY", None)
        os.environ.pop("PARTIALFLOW_TEST_HOOKS", None)
        srv.stop()
