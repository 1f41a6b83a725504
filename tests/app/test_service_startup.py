"""Start-up: failures are one line and exit 1 (a taken port before Spark starts; a Java
gateway that never starts after retries). Two start-ups that succeed are shown on servers
other tests start anyway (a Spark start-up fewer each): Ctrl-C is as clean a stop as
SIGTERM in tests/app/test_crash.py, and a gateway that fails once is retried in
tests/app/test_config.py (the server configured by environment)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from helpers import java_home_that_fails


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
    home = java_home_that_fails(tmp_path, times)
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
