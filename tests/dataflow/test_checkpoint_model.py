"""Checkpoints against the model, with no JVM: a checkpoint is copied a piece per packet
while writes, fills, reads and evictions interleave with it (the stepped executor makes
every interleaving reproducible), then a second dataflow starts from the checkpoint
directory and the same base tables, replays the log after the checkpoint, and every filled
key of every state must equal the model at its LSN, with its bytes accounted as measured.

This is the fuzzy-copy argument of ``checkpointer.py`` under test: a key copied early and
changed later must be copied again at the finish, or the restart serves it stale."""

from __future__ import annotations

import random
import time
from concurrent.futures import Future

import pytest
from stepped import Harness

from partialflow.server.dataflow import checkpointer
from partialflow.server.dataflow.packets import Tick

VISITS = (
    "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
    "ON info.product = visit.product WHERE category = ? GROUP BY category"
)
COUNTS = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
PRODUCTS = [f"p{i}" for i in range(8)]
CATEGORIES = ["a", "b", "c"]


def _setup(h: Harness, rng: random.Random) -> None:
    h.table("info", [("product", "TEXT"), ("category", "TEXT")],
            [(p, rng.choice(CATEGORIES)) for p in PRODUCTS])
    h.table("visit", [("product", "TEXT"), ("user", "TEXT"), ("length", "BIGINT")],
            [(rng.choice(PRODUCTS), "u", rng.randint(1, 50)) for _ in range(12)])
    h.table("ev", [("k", "BIGINT"), ("v", "BIGINT")],
            [(rng.randint(0, 9), rng.randint(1, 5)) for _ in range(20)])
    h.view("mv", VISITS)
    h.view("counts", COUNTS)


def _write(h: Harness, rng: random.Random) -> None:
    m = h.model
    roll = rng.random()
    if roll < 0.3:
        m.write("visit", inserts=[(rng.choice(PRODUCTS), "w", rng.randint(1, 60))])
    elif roll < 0.45 and m.live("visit"):
        m.write("visit", deletes=[rng.choice(m.live("visit"))])
    elif roll < 0.6:
        old = rng.choice(m.live("info"))
        m.write("info", deletes=[old], inserts=[(old[0], rng.choice(CATEGORIES))])
    elif roll < 0.85:
        m.write("ev", inserts=[(rng.randint(0, 9), rng.randint(1, 5))])
    elif m.live("ev"):
        m.write("ev", deletes=[rng.choice(m.live("ev"))])


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("tier", [False, True], ids=["memory", "tier"])
def test_checkpoint_copied_across_packets_restores_exactly(tmp_path, monkeypatch, seed, tier):
    # One piece of copying per packet, tiny pieces: the most interleaving there can be.
    monkeypatch.setattr(checkpointer, "STEP_SECONDS", 0.0)
    monkeypatch.setattr(checkpointer, "SLICE", 2)
    monkeypatch.setattr(checkpointer, "CHUNK_RECORDS", 3)
    rng = random.Random(seed)
    # With a disk tier, keys evicted for memory are shelved there; the checkpoints record
    # where they are and the restart takes them back from the same file.
    tier_file = tmp_path / "tier.db" if tier else None
    h = Harness(checkpoints=tmp_path, memory_limit=rng.choice([None, 6000]),
                tier=tier_file, disk_limit=rng.choice([1 << 30, 3000]))
    _setup(h, rng)
    cp = h.ex.checkpointer
    assert cp is not None
    taken: list[Future] = []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.45:
            for _ in range(rng.randint(1, 4)):
                _write(h, rng)  # queued: they interleave with the copying below
        elif roll < 0.6:
            view, key = rng.choice([("mv", rng.choice(CATEGORIES)), ("counts", rng.randint(0, 9))])
            read = h.begin(view, [key])
            if rng.random() < 0.5:
                h.finish(read)
        elif roll < 0.68:
            view = rng.choice(["mv", "counts"])
            key = rng.choice(CATEGORIES) if view == "mv" else rng.randint(0, 9)
            h.df.evict(view, None if rng.random() < 0.3 else key)
        elif roll < 0.8:
            taken.append(cp.request())
        elif roll < 0.9:
            h.run()
        else:
            h.settle()
    h.settle()
    # A checkpoint starts only once the writer has the one before on disk; the threaded
    # executor ticks every 0.2 s when idle, the stepped one when told.
    deadline = time.monotonic() + 30
    while not all(f.done() for f in taken) and time.monotonic() < deadline:
        h.ex.submit(Tick())
        h.run()
        time.sleep(0.005)
    done = [f.result(0) for f in taken]
    for _ in range(rng.randint(0, 5)):  # writes after the last checkpoint: replayed
        _write(h, rng)
    h.settle()
    assert h.check_states() == [] and h.check_quiet() == []

    h.close()
    restarted = Harness(checkpoints=tmp_path, model=h.model, tier=tier_file,
                        memory_limit=6000 if tier else None)
    restarted.views = dict(h.views)
    restarted.settle()
    info = restarted.df.stats().checkpoint
    if done:
        # The newest checkpoint (or its chain compacted: a new seq, the same LSN).
        assert info["recovered_lsn"] == max(m.lsn for m in done)
        assert info["replayed_writes"] == h.model.lsn - info["recovered_lsn"]
    assert restarted.check_states() == []
    assert restarted.check_quiet() == []

    for view, keys in (("mv", CATEGORIES), ("counts", list(range(10)))):
        for key, (rows, lsn) in zip(keys, restarted.lookup(view, keys), strict=True):
            assert restarted.mismatch(view, (key,), rows, lsn) is None
    restarted.close()
