"""A disk tier that starts failing while the dataflow runs, without a JVM: the stepped
harness and a real SQLite tier whose connection then fails.

* A full disk (writes refused, reads still work): bringing a shelved key back only reads
  the store, so writes and reads of shelved keys go on; the failure comes when the store
  is next written, between packets, and then the tier breaks (tier.py: every shelved key a
  hole at once) and every answer stays exact, with no packet failing on the way.
* A store that can't be read (a damaged disk): the key's contents are gone in the middle
  of a packet, so the process stops (exit status 72, as a failed fsync stops storage) and a
  restart recovers from the last checkpoint.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from stepped import Harness

from partialflow.server.dataflow.packets import Tick

COUNTS = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"
KEYS = [(k,) for k in range(40)]


class FullDisk:
    """A sqlite3 connection on a full disk: every write fails (SQLITE_FULL), reads work."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().upper().startswith("SELECT"):
            return self._db.execute(sql, *args)
        raise sqlite3.OperationalError("database or disk is full")

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        raise sqlite3.OperationalError("database or disk is full")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _shelved_then_full(tmp_path) -> Harness:
    """Every key of ``counts`` read under a memory limit that shelves nearly all of them,
    then the tier's disk is full."""
    h = Harness(memory_limit=2000, tier=tmp_path / "tier.db")
    h.table("ev", [("k", "BIGINT"), ("v", "BIGINT")], [(i % 40, i) for i in range(120)])
    h.view("counts", COUNTS)
    h.lookup("counts", KEYS)
    h.ex.submit(Tick())  # the end of a packet: what the read brought back is shelved again
    h.settle()
    assert h.tier is not None and sum(
        st.keys_shelved for st in h.ex.evictor.states.values()) > 30
    assert h.check_quiet() == [] and h.check_states() == []
    h.tier._db = FullDisk(h.tier._db)  # type: ignore[assignment]
    return h


def _all_exact(h: Harness) -> None:
    # Twice: a read of shelved keys reads the store (it still can); read from it a second
    # time, the keys come back into memory after the read, between packets (settle), where
    # shelving others fails and breaks the tier.
    for _ in range(2):
        for key, (rows, lsn) in zip(KEYS, h.lookup("counts", KEYS), strict=True):
            assert h.mismatch("counts", key, rows, lsn) is None
            assert lsn == h.model.lsn
        h.settle()
    assert h.check_quiet() == [] and h.check_states() == []
    assert h.tier is not None and h.tier.broken and h.tier.keys == 0


def test_a_write_to_shelved_keys_on_a_full_disk(tmp_path):
    h = _shelved_then_full(tmp_path)
    try:
        lsn = h.model.write("ev", inserts=[(k, 1000 + k) for k in range(40)])
        h.settle()
        assert h.check_quiet() == [], "a packet failed"
        assert h.ex.applied_lsn == lsn
        _all_exact(h)
    finally:
        h.close()


def test_a_read_of_shelved_keys_on_a_full_disk(tmp_path):
    h = _shelved_then_full(tmp_path)
    try:
        _all_exact(h)
    finally:
        h.close()


_UNREADABLE = """
import sys, sqlite3
sys.path[:0] = [{here!r}]
from test_tier_failures import _shelved_then_full
class Unreadable:
    def __init__(self, db):
        self._db = db
    def execute(self, *args):
        raise sqlite3.OperationalError("disk I/O error")
    def __getattr__(self, name):
        return getattr(self._db, name)
import pathlib
h = _shelved_then_full(pathlib.Path({tmp!r}))
h.tier._db = Unreadable(h.tier._db._db)
h.lookup("counts", [(k,) for k in range(40)])
print("NOT STOPPED")
"""


def test_a_store_that_cant_be_read_stops_the_process(tmp_path):
    here = str(Path(__file__).parent)
    code = _UNREADABLE.format(here=here, tmp=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=here)
    assert out.returncode == 72, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "NOT STOPPED" not in out.stdout
    assert "can't give back a key it holds" in out.stderr
