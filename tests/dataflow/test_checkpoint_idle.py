"""A due checkpoint is skipped when it would record nothing new (the same LSN, views and
tables, and no state changed), so an idle server does not write and log an empty one every
interval; a fill, an eviction or a write since the last one still gets its checkpoint."""

from __future__ import annotations

import time

from stepped import Harness

from partialflow.server.dataflow.packets import Tick

COUNTS = "SELECT k, COUNT(*) AS n FROM ev WHERE k = ? GROUP BY k"


def _tick(h: Harness, seconds: float) -> tuple[int, int]:
    """Let ``seconds`` pass, then run until the writer has committed what was started;
    returns (taken, skipped)."""
    cp = h.ex.checkpointer
    assert cp is not None
    h.clock.advance(seconds)
    h.ex.submit(Tick())
    h.run()
    deadline = time.monotonic() + 30
    while cp._work is not None or not cp.store.writer.idle():
        assert time.monotonic() < deadline, "checkpoint never committed"
        h.ex.submit(Tick())
        h.run()
        time.sleep(0.005)
    time.sleep(0.05)  # the writer thread counts it after publishing
    return cp.taken, cp.skipped


def test_an_idle_dataflow_skips_checkpoints_until_something_changes(tmp_path):
    h = Harness(checkpoints=tmp_path)
    try:
        h.table("ev", [("k", "BIGINT"), ("v", "BIGINT")], [(1, 1), (2, 2), (2, 3)])
        h.view("counts", COUNTS)
        cp = h.ex.checkpointer
        assert cp is not None
        cp.interval = 10.0
        taken, skipped = _tick(h, 11)
        assert taken == 1  # the first one (full) is always taken
        assert _tick(h, 11) == (1, skipped + 1)
        assert _tick(h, 11) == (1, skipped + 2)

        assert h.lookup("counts", [2])[0][0] == [(2, 2)]  # a fill: same LSN, new state
        h.settle()
        assert _tick(h, 11) == (2, skipped + 2)
        assert _tick(h, 11) == (2, skipped + 3)

        h.model.write("ev", inserts=[(2, 9)])  # a write: a new LSN
        h.settle()
        assert _tick(h, 11) == (3, skipped + 3)

        h.df.evict("counts", 2)  # an eviction: the key becomes a hole
        h.settle()
        assert _tick(h, 11) == (4, skipped + 3)
        assert _tick(h, 5) == (4, skipped + 3)  # not due yet
        asked = cp.request()  # asked for: taken even though nothing changed
        deadline = time.monotonic() + 30
        while not asked.done():
            assert time.monotonic() < deadline, "the requested checkpoint was never taken"
            h.ex.submit(Tick())
            h.run()
            time.sleep(0.005)
        assert asked.result().lsn == h.ex.applied_lsn and cp.skipped == skipped + 3
    finally:
        h.close()
