"""Crash and shutdown through the real binary: SIGKILL during concurrent writes loses no
acknowledged write and applies none twice; SIGTERM exits 0 and a restart sees everything."""

from __future__ import annotations

import collections
import signal
import threading
import time

import pytest
from helpers import ServerProcess, health_status

from partialflow.client import AlreadyExists, Client, InvalidArgument, PartialflowError

pytestmark = pytest.mark.slow

THREADS = 6
WRITE_SECONDS = 3.0


class Writer(threading.Thread):
    """Inserts batches of unique rows and now and then deletes one of its own acknowledged
    rows, recording what was acknowledged and what was in flight when the server died."""

    def __init__(self, address: str, number: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.number, self.stop = address, number, stop
        self.acked_inserts: list[tuple] = []
        self.acked_deletes: list[tuple] = []
        self.unacked_inserts: list[tuple] = []
        self.unacked_deletes: list[tuple] = []
        self.lsns: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        live: list[tuple] = []
        seq = 0
        with Client(self.address, timeout=10) as client:
            while not self.stop.is_set():
                deleting = seq % 4 == 3 and bool(live)
                if deleting:
                    rows, acked, pending = [live.pop(0)], self.acked_deletes, self.unacked_deletes
                    call = client.delete
                else:
                    size = 1 + seq % 5
                    rows = [
                        (
                            self.number * 1_000_000 + seq * 10 + i,
                            self.number,
                            f"w{self.number}-{seq}-{i}",
                        )
                        for i in range(size)
                    ]
                    acked, pending, call = self.acked_inserts, self.unacked_inserts, client.insert
                seq += 1
                try:
                    self.lsns.append(call("events", rows))
                except PartialflowError:
                    pending.extend(rows)  # the server went away mid-call: outcome unknown
                    return
                except BaseException as err:  # noqa: BLE001 - reported by the test
                    self.error = err
                    return
                acked.extend(rows)
                if not deleting:
                    live.extend(rows)


def _table_columns(client: Client, table: str) -> list[str]:
    return client.query(f"SELECT * FROM {table} WHERE 1 = 0").columns


def _check_after_crash(c: Client, writers: list[Writer]) -> None:
    rows = c.query("SELECT id, writer, note FROM events").rows
    count = collections.Counter(rows)
    acked_ins = {r for w in writers for r in w.acked_inserts}
    acked_del = {r for w in writers for r in w.acked_deletes}
    maybe_ins = {r for w in writers for r in w.unacked_inserts}
    maybe_del = {r for w in writers for r in w.unacked_deletes}
    for row in acked_ins - acked_del - maybe_del:
        assert count[row] == 1, f"acknowledged insert {row} present {count[row]} times"
    for row in acked_del:
        assert count[row] == 0, f"acknowledged delete of {row} not applied"
    for row in maybe_ins | maybe_del:
        assert count[row] <= 1, f"unacknowledged write of {row} applied twice"
    stray = set(count) - acked_ins - maybe_ins
    assert not stray, f"rows nobody wrote: {sorted(stray)[:5]}"

    # The catalog survived: both tables with their columns, types and key.
    assert _table_columns(c, "events") == ["id", "writer", "note"]
    assert _table_columns(c, "people") == ["name", "age", "score", "ok"]
    assert c.query("SELECT * FROM people").rows == [("ann", 30, 1.5, True)]
    with pytest.raises(AlreadyExists):
        c.insert("people", [("ann", 31, 2.0, False)])
    with pytest.raises(InvalidArgument):
        c.insert("people", [("bob", "not a number", 2.0, False)])


def test_sigkill_during_writes_then_ctrl_c_sigterm_and_restart(tmp_path):
    """One scenario, to pay for three Spark start-ups instead of six: crash under
    concurrent writes and recover; then a clean Ctrl-C (SIGINT: exit 0, as clean as
    SIGTERM; PySpark installs its own SIGINT handler, which raises KeyboardInterrupt, and
    the server must put its own back) and recover again; then a clean SIGTERM."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        with server.client(timeout=120) as c:
            c.execute("CREATE TABLE events (id BIGINT, writer INT, note TEXT)")
            c.execute(
                "CREATE TABLE people "
                "(name VARCHAR PRIMARY KEY, age BIGINT, score DOUBLE, ok BOOLEAN)"
            )
            c.insert("people", [("ann", 30, 1.5, True)])
        stop = threading.Event()
        writers = [Writer(server.address, n, stop) for n in range(THREADS)]
        for w in writers:
            w.start()
        time.sleep(WRITE_SECONDS)  # long enough for background flushes to happen too
        server.kill()
        stop.set()
        for w in writers:
            w.join(timeout=30)
        assert not [w.error for w in writers if w.error], [w.error for w in writers]
        acked_lsn = max(lsn for w in writers for lsn in w.lsns)
        assert sum(len(w.acked_inserts) for w in writers) > 50, "too few writes to mean anything"

        # Recovery after SIGKILL.
        server.restart()
        with server.client(timeout=120) as c:
            _check_after_crash(c, writers)
            c.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT)")
            # New writes continue the LSN sequence.
            assert c.insert("kv", [(f"k{i}", i) for i in range(100)]) > acked_lsn
            c.flush()
            c.delete("kv", [("k0", 0)])
            last = c.update("kv", [("k1", 1)], [("k1", 1000)])  # stays in the log
        assert health_status(server.address) == 1  # SERVING

        # Ctrl-C: a clean exit, and a restart sees everything.
        assert server.terminate(sig=signal.SIGINT) == 0
        log = server.log_path.read_text(errors="replace").rsplit("\n=== ", 1)[-1]
        assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
        assert "received SIGINT, shutting down" in log and "stopped" in log, log[-3000:]
        server.restart()
        with server.client(timeout=120) as c:
            rows = dict(c.query("SELECT k, v FROM kv").rows)
            assert len(rows) == 99 and "k0" not in rows and rows["k1"] == 1000
            _check_after_crash(c, writers)
            assert c.insert("kv", [("new", 1)]) > last
        # SIGTERM: a clean exit too.
        assert server.terminate() == 0
        log = server.log_path.read_text(errors="replace").rsplit("\n=== ", 1)[-1]
        assert "Traceback" not in log and "received SIGTERM, shutting down" in log, log[-3000:]
    finally:
        server.stop()
