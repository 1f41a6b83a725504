"""A real server whose data directory sits on an 8 MB tmpfs, filled by writes while readers
read: writes are refused with RESOURCE_EXHAUSTED (naming the directory and its free space)
and nothing of them is written, reads and query() go on exact; once space is freed writes
are accepted again, flush and compaction succeed, and a restart has every acknowledged row.

Mounting needs root (CI runs as root); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter

from helpers import InProcessServer
from tmpfs import grow, small_tmpfs

from partialflow.client import PartialflowError, ResourceExhausted

VIEW = "SELECT k, COUNT(*) AS n, SUM(id) AS s FROM ev WHERE k = ? GROUP BY k"
KEYS = 6
RESERVE = 400 << 10  # --disk-reserve
BATCH = 20


def _rows(first: int, n: int) -> list[tuple]:
    # Random text: Parquet cannot compress it away, so the disk really fills.
    return [(i, i % KEYS, os.urandom(400).hex()) for i in range(first, first + n)]


class Readers:
    """Threads reading every key of the view in a loop, recording (key, lsn, rows)."""

    def __init__(self, address: str, n: int = 2) -> None:
        self.stop = threading.Event()
        self.reads: list[tuple[float, int, int, list]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(address,)) for _ in range(n)]

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _run(self, address: str) -> None:
        from partialflow.client import Client

        with Client(address, timeout=120) as c:
            while not self.stop.is_set():
                for k in range(KEYS):
                    try:
                        r = c.lookup("v", k)
                    except PartialflowError as err:
                        with self._lock:
                            self.errors.append(err)
                        continue
                    with self._lock:
                        self.reads.append((time.monotonic(), k, r.lsn, r.rows))
                time.sleep(0.01)

    def since(self, t: float) -> list[tuple[int, int, list]]:
        with self._lock:
            return [(k, lsn, rows) for at, k, lsn, rows in self.reads if at >= t]


def _expected(c, lsn: int) -> dict[int, list[tuple]]:
    """The view's answer per key, from Spark SQL over the base table at ``lsn``."""
    got = c.query("SELECT k, COUNT(*) AS n, SUM(id) AS s FROM ev GROUP BY k", as_of=lsn)
    return {row[0]: [tuple(row)] for row in got.rows}


def _check_reads(c, reads: list[tuple[int, int, list]], max_lsns: int = 2) -> int:
    """Reads against Spark at their LSN (the newest ``max_lsns`` LSNs seen); returns how
    many were checked."""
    lsns = sorted({lsn for _, lsn, _ in reads})[-max_lsns:]
    checked = 0
    for lsn in lsns:
        want = _expected(c, lsn)
        for k, at, rows in reads:
            if at == lsn:
                assert [tuple(r) for r in rows] == want.get(k, []), (k, lsn)
                checked += 1
    return checked


def _cli_insert(address: str, row_id: int, pad_bytes: int) -> subprocess.CompletedProcess:
    """``partialflow sql`` inserting one row of ``pad_bytes`` (a script on stdin)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")}
    script = f"INSERT INTO ev VALUES ({row_id}, 0, '{os.urandom(pad_bytes // 2).hex()}');\n"
    return subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", "sql", "--server", address],
        input=script, capture_output=True, text=True, timeout=120, env=env, check=False)


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(tmp_path, spark):
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        filler = mnt / "filler"
        filler.write_bytes(os.urandom(2 << 20))  # the room an operator frees later
        data = mnt / "data"
        # Background compaction off: a compaction that finds no room is tested on its own
        # (tests/storage/test_disk_full.py); here the explicit one after the disk is grown.
        srv = InProcessServer(data, spark, flush_interval=0.2, max_segments=10**6,
                              checkpoint_interval=1.0, disk_reserve=RESERVE).start()
        try:
            last_lsn, acked = _scenario(srv, filler)
        finally:
            srv.stop()
        # A restart on the same directory: every acknowledged row, nothing else.
        again = InProcessServer(data, spark, checkpoint_interval=1.0).start()
        try:
            with again.client(timeout=120) as c:
                lsn = c.stats()["lsn"]
                assert lsn == last_lsn
                got = Counter(tuple(r) for r in c.query("SELECT id, k FROM ev").rows)
                assert got == Counter(acked.items())
                want = _expected(c, lsn)
                got_view = c.lookup_many("v", list(range(KEYS)))
                for k in range(KEYS):
                    assert [tuple(r) for r in got_view[k].rows] == want.get(k, [])
        finally:
            again.stop()


def _scenario(srv: InProcessServer, filler) -> tuple[int, dict[int, int]]:
    """Fill, check, free, check; returns the last LSN and the acknowledged rows (id -> k)."""
    acked: dict[int, int] = {}  # id -> k of every acknowledged row
    refused: list[int] = []
    with srv.client(timeout=120) as c:
        c.execute("CREATE TABLE ev (id BIGINT PRIMARY KEY, k BIGINT, pad TEXT)")
        c.execute(f"CREATE VIEW v AS {VIEW}")
        next_id = BATCH
        c.insert("ev", _rows(0, BATCH))
        acked.update((i, i % KEYS) for i in range(BATCH))
        c.lookup_many("v", list(range(KEYS)))  # filled: the readers' lookups are hits
        with Readers(srv.address) as readers:
            # Fill the disk: the server frees what it can by itself (flushed log files), so
            # go on until every write has been refused for a while.
            first_refusal = None
            refusals = 0
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                rows = _rows(next_id, BATCH)
                next_id += BATCH
                try:
                    c.insert("ev", rows)
                except ResourceExhausted as err:
                    refused.extend(r[0] for r in rows)
                    refusals += 1
                    msg = str(err)
                    assert str(srv.data_dir) in msg and " free" in msg, msg
                    first_refusal = first_refusal or time.monotonic()
                    if time.monotonic() - first_refusal > 2.0:
                        break
                    time.sleep(0.05)
                    continue
                first_refusal = None
                acked.update((r[0], r[1]) for r in rows)
            assert refusals and first_refusal is not None, "the disk never filled"
            full_since = time.monotonic()
            stats = c.stats()["storage"]
            assert stats["disk_short"] == 1 and stats["writes_refused_disk_full"] >= refusals
            assert stats["disk_reserve_bytes"] == RESERVE
            assert 0 < stats["disk_free_bytes"] < 8 << 20
            # The command line says so in one line (a write the size of the volume: smaller
            # ones may fit again once the server has deleted log files it flushed).
            done = _cli_insert(srv.address, 10**9, 8 << 20)
            assert done.returncode == 1
            assert done.stderr.startswith("error: RESOURCE_EXHAUSTED: disk full: ")
            assert str(srv.data_dir) in done.stderr
            # Nothing refused was written: the table is exactly the acknowledged rows.
            lsn = c.stats()["lsn"]
            got = Counter(tuple(r) for r in c.query("SELECT id, k FROM ev", as_of=lsn).rows)
            assert got == Counter(acked.items())
            time.sleep(1.0)  # readers keep reading on the full disk
            full_reads = readers.since(full_since)
            assert len(full_reads) >= KEYS, (len(readers.reads), readers.errors[:3])
            assert _check_reads(c, full_reads) >= KEYS

            # The operator makes room (deletes a file, grows the volume: compaction needs
            # as much room again as the table): writes resume by themselves.
            filler.unlink()
            grow(filler.parent, "24m")
            resumed = 0
            for _ in range(5):  # accepted at once: every write measures the disk again
                rows = _rows(next_id, BATCH)
                next_id += BATCH
                resumed = c.insert("ev", rows)
                acked.update((r[0], r[1]) for r in rows)
            _wait(lambda: c.stats()["storage"]["flushed_lsn"] >= resumed, 30, "a flush")
            report = c.compact("ev")
            assert report["segments_after"] == 1
            after = c.lookup("v", 0, min_lsn=resumed)
            assert [tuple(r) for r in after.rows] == _expected(c, after.lsn).get(0, [])
        assert not readers.errors, readers.errors[:3]
        assert _check_reads(c, readers.since(0.0)) > 0
        got = Counter(tuple(r) for r in c.query("SELECT id, k FROM ev").rows)
        assert got == Counter(acked.items())
        assert not set(refused) & {i for i, _ in got}
        return c.stats()["lsn"], acked


def test_out_of_space_anywhere_answers_resource_exhausted_not_internal():
    """A file the free-space check did not foresee (the catalog, a bulk-load registry)
    running out of room is still a full disk to the client."""
    import errno

    import grpc

    from partialflow.server.app.service import _status

    code, message = _status(OSError(errno.ENOSPC, "No space left on device"), "Execute")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "no space left" in message
    code, _ = _status(OSError(errno.EACCES, "Permission denied"), "Execute")
    assert code == grpc.StatusCode.INTERNAL
