"""Start-up: failures are one line and exit 1 (a taken port before Spark starts; a Java
gateway that never starts after retries), and a gateway that fails once is retried. That
Ctrl-C is as clean a stop as SIGTERM is shown in tests/app/test_crash.py, on the server it
restarts anyway (a Spark start-up fewer)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from helpers import wait_serving

from partialflow.client import Client


def test_a_taken_port_fails_fast_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        began = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "partialflow.client.cli",
                "serve",
                "--data",
                str(tmp_path / "data"),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "listening on" not in done.stdout
    assert time.monotonic() - began < 30  # no Spark start-up before the bind
    assert not (tmp_path / "data").exists()


def _java_that_fails(tmp_path, times: int) -> dict:
    """An environment whose JAVA_HOME runs a `java` that exits at once the first ``times``
    calls (as a JVM that could not start does), then runs the real one."""
    real = shutil.which("java")
    assert real, "java is not on PATH"
    home = tmp_path / "java_home"
    (home / "bin").mkdir(parents=True)
    count = tmp_path / "java_calls"
    java = home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}" 2>/dev/null || echo 0); echo $((n + 1)) > "{count}"\n'
        f'if [ "$n" -lt {times} ]; then echo "fake java: cannot start" >&2; exit 1; fi\n'
        f'exec "{os.path.realpath(real)}" "$@"\n'
    )
    java.chmod(0o755)
    return dict(os.environ, JAVA_HOME=str(home), PYTHONUNBUFFERED="1")


def _serve(tmp_path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", "serve", "--data",
         str(tmp_path / "data"), "--port", "0"],
        capture_output=True, text=True, timeout=240, env=env,
    )


def test_a_java_gateway_that_never_starts_is_one_line_not_a_traceback(tmp_path):
    done = _serve(tmp_path, _java_that_fails(tmp_path, times=1000))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert "JAVA_GATEWAY_EXITED" in errors[0] and "java -version" in errors[0]
    assert "Traceback" not in done.stderr, done.stderr
    assert "listening on" not in done.stdout


def test_a_java_gateway_that_fails_once_is_retried(tmp_path):
    env = _java_that_fails(tmp_path, times=1)
    server = subprocess.Popen(
        [sys.executable, "-m", "partialflow.client.cli", "serve", "--data",
         str(tmp_path / "data"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )
    try:
        # 'listening on' comes last, after the postgres (and metrics) lines: the ready signal.
        line = server.stdout.readline()
        while line.startswith(("postgres listening on ", "metrics on ")):
            line = server.stdout.readline()
        assert line.startswith("listening on "), server.stderr.read() if server.poll() else line
        address = line.split("listening on ", 1)[1].strip()
        wait_serving(address)
        with Client(address) as db:
            assert db.stats()["lsn"] == 0
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        err = server.stderr.read()
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert "Java gateway exited during start-up (attempt 1 of 3)" in err, err
