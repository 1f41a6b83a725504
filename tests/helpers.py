"""Shared helpers for tests that need a real server.

- ``ServerProcess``: ``partialflow serve`` in a subprocess (its own Spark), which can be
  killed (SIGKILL) or terminated (SIGTERM) and restarted on the same data directory.
- ``InProcessServer``: ``create_server`` in this process on the session's Spark; cheap
  to start (no JVM start-up), so tests can afford one per configuration.
- ``wait_serving``: poll the standard health service until it reports SERVING.
- ``java_home_that_fails``: a JAVA_HOME whose ``java`` fails its first calls (a Java
  gateway that cannot start).

Import as ``from helpers import ServerProcess`` (``tests/`` is on sys.path via conftest).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from partialflow.client import Client
from partialflow.testing.inprocess import InProcessServer

__all__ = ["InProcessServer", "ServerProcess", "health_status", "java_home_that_fails",
           "stored_changes", "wait_serving"]

START_TIMEOUT = 180.0

#: JVM options for the tests' local Spark drivers (the session's, and those of servers run
#: as subprocesses): the client compiler only. A test run is thousands of small, different
#: Spark jobs in JVMs that live seconds to minutes, which the optimizing compiler's work
#: rarely pays back on 2 cores: the same 16 small jobs took 25 s of JVM CPU instead of 43.
#: The same Spark runs either way. PARTIALFLOW_TEST_JVM_OPTIONS="" for the JVM's default.
JVM_OPTIONS = os.environ.get("PARTIALFLOW_TEST_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")


def local_spark_conf() -> list[tuple[str, str]]:
    """``--spark-conf`` pairs for a local Spark driver with JVM_OPTIONS."""
    return [("spark.driver.extraJavaOptions", JVM_OPTIONS)] if JVM_OPTIONS.strip() else []


def wait_serving(address: str, timeout: float = 60.0, service: str = "") -> None:
    """Block until the health service at ``address`` reports SERVING (or raise TimeoutError)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = reply.status
            except grpc.RpcError as err:
                last = err.code()
            time.sleep(0.1)
    raise TimeoutError(f"{address} not SERVING after {timeout}s (last: {last})")


def java_home_that_fails(directory: Path, times: int) -> Path:
    """A JAVA_HOME (made under ``directory``) whose ``java`` exits at once the first
    ``times`` calls, as a JVM that could not start does, then runs the real one."""
    real = shutil.which("java")
    assert real, "java is not on PATH"
    home = directory / "java_home"
    (home / "bin").mkdir(parents=True)
    count = directory / "java_calls"
    java = home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}" 2>/dev/null || echo 0); echo $((n + 1)) > "{count}"\n'
        f'if [ "$n" -lt {times} ]; then echo "fake java: cannot start" >&2; exit 1; fi\n'
        f'exec "{os.path.realpath(real)}" "$@"\n'
    )
    java.chmod(0o755)
    return home


def health_status(address: str, service: str = "") -> int:
    """The health service's current status for ``service`` (raises grpc.RpcError if down)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


class ServerProcess:
    """``python -m partialflow.client.cli serve`` as a subprocess in its own session.

    stderr goes to ``log_path`` (default: ``<data_dir>.log``) so a failing test can show it.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        args: tuple[str, ...] = (),
        log_path: str | os.PathLike | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.args = args
        self.log_path = (
            Path(log_path) if log_path else self.data_dir.with_name(self.data_dir.name + ".log")
        )
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self._stdout: list[str] = []

    # -- lifecycle --------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Start the server and wait until it prints its address and reports SERVING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        cmd = [
            sys.executable,
            "-m",
            "partialflow.client.cli",
            "serve",
            "--data",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        master = env.get("PARTIALFLOW_SPARK_MASTER", "local")
        if ("--spark-master" not in self.args and master.startswith("local")
                and "PARTIALFLOW_SPARK_CONF" not in env and " " not in JVM_OPTIONS.strip()):
            # Not for a cluster or Spark Connect, whose drivers are not this machine's
            # local JVM (Connect refuses driver settings); one option only (the variable
            # splits on spaces).
            env.update(("PARTIALFLOW_SPARK_CONF", f"{k}={v}") for k, v in local_spark_conf())
        log = open(self.log_path, "ab")  # noqa: SIM115 (closed once the server has it)
        log.write(f"\n=== {' '.join(cmd)}\n".encode())
        log.flush()
        # A new session makes the server (and its Spark JVM) a process group we can kill.
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True, text=True
        )
        log.close()
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc, lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise TimeoutError(
                    f"server did not start in {timeout}s:\n{self.log_tail()}"
                ) from None
            if line is None:
                raise RuntimeError(f"server exited with {self.proc.wait()}:\n{self.log_tail()}")
            if line.startswith("listening on "):
                self.address = line.split("listening on ", 1)[1].strip()
                break
        wait_serving(self.address, timeout=max(5.0, deadline - time.monotonic()))
        return self

    def _pump(self, proc: subprocess.Popen, lines: queue.Queue) -> None:
        # Keep draining stdout so the server never blocks on a full pipe.
        for line in proc.stdout:
            self._stdout.append(line)
            lines.put(line)
        lines.put(None)

    def kill(self) -> None:
        """SIGKILL the server and its Spark JVM at once (a crash), and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def terminate(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> int:
        """SIGTERM (or ``sig``) the server, not its JVM: shutting that down is the server's
        job; returns its exit status. Anything of the group still alive afterwards is
        killed."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"server ignored {signal.Signals(sig).name} for {timeout}s:\n{self.log_tail()}"
            ) from None
        self._reap_group()
        return code

    def _reap_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def restart(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Start again on the same data directory (a new port if ``port`` is 0)."""
        return self.start(timeout)

    def stop(self) -> None:
        """Terminate if running (kill if that fails); safe to call repeatedly."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate(timeout=30)
            except TimeoutError:
                pass
        elif self.proc is not None:
            self._reap_group()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, **kwargs: Any) -> Client:
        """A new client connected to this server."""
        assert self.address, "not started"
        return Client(self.address, **kwargs)

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the server's stderr log (for failure messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stored_changes(storage: Any, table: str) -> tuple[int, list[tuple[tuple, int, int, str]]]:
    """What storage holds of ``table``, read without Spark: the snapshot's LSN and every
    stored change (row, LSN, diff, where: a segment file or "memtable LSN n") of its
    segments (pyarrow) and unflushed rows. For checks that must not trust Spark's read."""
    import pyarrow.parquet as pq

    from partialflow.server.storage.segments import entries_to_table

    out = []
    with storage.snapshot() as snap:
        tv = snap.table_view(table)
        parts = [(s.file, pq.read_table(tv.table_dir / s.file)) for s in tv.segments]
        parts += [(f"memtable LSN {e.lsn}", entries_to_table(tv.schema, [e])) for e in tv.mem]
        for where, t in parts:
            rows = zip(*[t[n].to_pylist() for n in tv.schema.column_names], strict=True)
            out += [(row, lsn, diff, where) for row, lsn, diff in
                    zip(rows, t["_lsn"].to_pylist(), t["_diff"].to_pylist(), strict=True)]
        return snap.lsn, out
