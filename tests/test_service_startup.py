"""Start-up failures are one line and exit 1, before Spark is started."""

from __future__ import annotations

import socket
import subprocess
import sys
import time


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
