"""The Spark driver dies under a running server (as the OOM killer would end it) and comes
back (server/spark_supervisor.py, docs/spark-failures.md).

``partialflow serve`` runs as a subprocess with its own local Spark: the test kills that
server's driver JVM (a child ``java`` process of the server), never the tests' shared one.
Readers (hits and misses), a writer, ``query()`` and compactions run throughout. Asserted:

- no client ever gets anything but UNAVAILABLE (no INTERNAL, no leaked
  ConnectionRefusedError), and writes and hits never fail at all;
- while Spark is down, stats() says so (since when, why) and the health service reports
  the Partialflow service NOT_SERVING while the server as a whole stays SERVING;
- within a liveness bound a new driver JVM serves misses, ``query()`` and compaction again,
  stats() counts the restart, and health is SERVING again;
- every read answered at any time is exact: compared with ``query()`` at the read's LSN on
  the new Spark, and the table holds exactly the acknowledged writes.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from helpers import ServerProcess, health_status
from prometheus_client.parser import text_string_to_metric_families

from partialflow.client import PartialflowError

pytestmark = pytest.mark.slow

SERVICE = "partialflow.v1.Partialflow"
KEYS = 400  # keys 0..199 are filled (hits) before the kill, 200..399 are misses
RECOVERY_BOUND = 90.0  # seconds from the kill to a working miss and query (2 shared cores)
VIEW = ("CREATE VIEW totals AS SELECT k, SUM(v) AS total, COUNT(*) AS n FROM t WHERE k = ? "
        "GROUP BY k")


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _java_children(pid: int) -> list[int]:
    """The server's driver JVM(s): ``java`` processes among its descendants."""
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            todo.append(child)
            try:
                comm = Path(f"/proc/{child}/comm").read_text().strip()
            except OSError:
                continue
            if comm == "java":
                found.append(child)
    return found


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("partialflow_spark_")}


class Load:
    """Readers, a writer, a querier and a compactor against one server; every outcome is
    recorded with its time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.reads: list[tuple[float, int, list[tuple], int]] = []  # (t, key, rows, lsn)
        self.errors: list[tuple[float, str, grpc.StatusCode, str]] = []
        self.writes: list[tuple[int, tuple]] = []  # acknowledged rows with their LSN
        self.write_errors: list[str] = []
        self.queries_ok: list[float] = []
        self.compactions_ok: list[float] = []
        self.crashes: list[BaseException] = []  # anything not a PartialflowError
        self.threads = [
            threading.Thread(target=self._guard, args=(fn,), daemon=True)
            for fn in (self._reader, self._reader, self._writer, self._querier, self._compactor)
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def _guard(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.crashes.append(e)

    def _error(self, what: str, e: PartialflowError) -> None:
        with self.lock:
            self.errors.append((time.monotonic(), what, e.code, str(e)))

    def _reader(self) -> None:
        rng = random.Random(threading.get_ident())
        with ServerClient(self.address) as c:
            while not self.stop.is_set():
                k = rng.randrange(KEYS)
                try:
                    r = c.lookup("totals", k)
                except PartialflowError as e:
                    self._error(f"lookup {k}", e)
                    time.sleep(0.05)
                    continue
                with self.lock:
                    self.reads.append((time.monotonic(), k, list(r.rows), r.lsn))

    def _writer(self) -> None:
        seq = 0
        with ServerClient(self.address) as c:
            while not self.stop.is_set():
                rows = [(seq % KEYS, seq), ((seq * 7 + 3) % KEYS, -seq)]
                seq += 1
                try:
                    lsn = c.insert("t", rows)
                except PartialflowError as e:
                    self.write_errors.append(f"{e.code}: {e}")
                    continue
                with self.lock:
                    self.writes.extend((lsn, r) for r in rows)
                time.sleep(0.02)

    def _querier(self) -> None:
        with ServerClient(self.address) as c:
            while not self.stop.is_set():
                try:
                    c.query("SELECT k, SUM(v) FROM t WHERE k < 10 GROUP BY k")
                    self.queries_ok.append(time.monotonic())
                except PartialflowError as e:
                    self._error("query", e)
                time.sleep(0.2)

    def _compactor(self) -> None:
        with ServerClient(self.address) as c:
            while not self.stop.is_set():
                try:
                    c.flush()
                    c.compact("t")
                    self.compactions_ok.append(time.monotonic())
                except PartialflowError as e:
                    self._error("compact", e)
                time.sleep(2.0)


def ServerClient(address: str):  # noqa: N802 - reads like the class it returns
    from partialflow.client import Client

    return Client(address, timeout=60)


def test_spark_driver_killed_then_replaced(tmp_path):
    t0 = time.monotonic()
    phases: dict[str, float] = {}
    server = ServerProcess(
        tmp_path / "data", args=("--max-segments", "8", "--metrics-port", "0")
    ).start(timeout=180)
    metrics = next(line.split()[-1] for line in server._stdout if line.startswith("metrics on"))
    try:
        with server.client(timeout=120) as c:
            c.execute("CREATE TABLE t (k BIGINT, v BIGINT)")
            first = c.insert("t", [(k, k) for k in range(KEYS)])
            c.execute(VIEW)
            c.lookup_many("totals", range(KEYS // 2))  # the hits-to-be
            spark = c.stats()["spark"]
            assert spark["up"] and spark["restarts"] == 0 and not spark["down_since"]
        (jvm,) = _java_children(server.proc.pid)
        phases["started"] = round(time.monotonic() - t0, 1)

        load = Load(server.address)
        load.start()
        time.sleep(2.0)  # every kind of call is under way when the driver dies
        os.kill(jvm, signal.SIGKILL)
        killed = time.monotonic()

        # Down: stats and health say so (the restart takes seconds: a JVM start).
        with server.client(timeout=120) as c:
            while True:
                spark = c.stats()["spark"]
                if not spark["up"]:
                    break
                assert time.monotonic() - killed < 10, f"death not noticed: {spark}"
                time.sleep(0.05)
            assert spark["down_since"] and "JVM exited" in spark["down_reason"], spark
            assert health_status(server.address, SERVICE) in (
                health_pb2.HealthCheckResponse.NOT_SERVING,
                health_pb2.HealthCheckResponse.SERVING,  # already back: checked below
            )
            down_seen = health_status(server.address, SERVICE)
            down_metrics = _scrape(metrics)
            assert health_status(server.address, "") == health_pb2.HealthCheckResponse.SERVING

            # Back within the bound: a new JVM, the restart counted, misses and query() work.
            while True:
                spark = c.stats()["spark"]
                if spark["up"]:
                    break
                assert time.monotonic() - killed < RECOVERY_BOUND, f"not back: {spark}"
                time.sleep(0.2)
            assert spark["restarts"] == 1 and spark["generation"] == 2, spark
            assert spark["last_outage"]["seconds"] > 0, spark
            recovered = time.monotonic() - killed
            phases["back"] = round(time.monotonic() - t0, 1)
            fresh = c.lookup_many("totals", range(KEYS // 2, KEYS))  # misses again
            assert len(fresh) == KEYS // 2
            phases["misses"] = round(time.monotonic() - t0, 1)
            while time.monotonic() - killed < RECOVERY_BOUND:
                if any(t > killed + recovered for t in load.queries_ok) and any(
                    t > killed + recovered for t in load.compactions_ok
                ):
                    break
                time.sleep(0.2)
            phases["query_compact"] = round(time.monotonic() - t0, 1)
        # stats() says up as soon as the new session is in place; the health service is
        # told just after (its listener runs once the restart callbacks have): wait for it.
        while health_status(server.address, SERVICE) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() - killed < RECOVERY_BOUND, "health never SERVING again"
            time.sleep(0.2)
        new_jvms = _java_children(server.proc.pid)
        assert new_jvms and jvm not in new_jvms
        time.sleep(1.0)  # some traffic on the new Spark too
        load.finish()
        phases["load_done"] = round(time.monotonic() - t0, 1)

        assert not load.crashes, load.crashes
        # Writes never need Spark: none failed. Only UNAVAILABLE ever reached a client,
        # always saying why, and only while Spark was down.
        assert load.write_errors == []
        bad = [e for e in load.errors if e[2] != grpc.StatusCode.UNAVAILABLE]
        assert not bad, bad[:5]
        assert all("Spark" in msg for _, _, _, msg in load.errors), load.errors[:5]
        late = [e for e in load.errors if not killed < e[0] < killed + recovered + 10]
        assert not late, late[:5]  # (10 s: requests under way when it came back)
        assert any(t > killed + recovered for t in load.queries_ok), "query() never came back"
        assert any(t > killed + recovered for t in load.compactions_ok), "no compaction after"
        # Hits kept working while Spark was down (keys filled before the kill).
        assert any(
            killed < t < killed + recovered and k < KEYS // 2 for t, k, _, _ in load.reads
        ), "no hit answered while Spark was down"
        assert down_seen == health_pb2.HealthCheckResponse.NOT_SERVING or recovered < 1
        assert down_metrics["partialflow_spark_up"] == 0 or recovered < 1
        up_metrics = _scrape(metrics)
        assert up_metrics["partialflow_spark_up"] == 1
        assert up_metrics["partialflow_spark_restarts_total"] == 1

        # Every read is exact, whenever it was answered. The oracle is the acknowledged
        # writes (a single writer: every write up to a read's LSN is known), itself checked
        # against Spark: the whole table now, and a sample of reads (some answered while
        # Spark was down) with query() at their own LSN on the new Spark.
        history = [(first, (k, k)) for k in range(KEYS)] + load.writes
        by_key = collections.defaultdict(list)
        for w, r in history:
            by_key[r[0]].append((w, r[1]))
        for _, k, rows, lsn in load.reads:
            vs = [v for w, v in by_key[k] if w <= lsn]
            assert rows == ([(k, sum(vs), len(vs))] if vs else []), (k, lsn, rows)
        with server.client(timeout=120) as c:
            got = collections.Counter(c.query("SELECT k, v FROM t").rows)
            assert got == collections.Counter(r for _, r in history)
            during = [r for r in load.reads if killed < r[0] < killed + recovered]
            for _, k, rows, lsn in during[:: max(1, len(during) // 4)][:4] + load.reads[-4:]:
                want = c.query(
                    f"SELECT k, SUM(v), COUNT(*) FROM t WHERE k = {k} GROUP BY k", as_of=lsn
                ).rows
                assert sorted(rows) == sorted(want), (k, lsn, rows, want)
            assert c.stats()["spark"]["restarts"] == 1
        phases["checked"] = round(time.monotonic() - t0, 1)
        print(f"spark back {recovered:.1f} s after the kill; phases {phases}; "
              f"{len(load.errors)} UNAVAILABLE, {len(load.reads)} reads, "
              f"{len(load.writes)} rows written")
    finally:
        server.stop()
