"""``partialflow serve`` announces its PostgreSQL listener on a line of its own and serves
psql there; ``--pg-port off`` and PARTIALFLOW_PG_PORT parse as documented."""

from __future__ import annotations

import subprocess

import pytest
from helpers import ServerProcess
from pg_helpers import need

from partialflow.server.config import DEFAULT_PG_PORT, Config, resolve_config


def test_serve_announces_and_serves_postgres(tmp_path):
    server = ServerProcess(tmp_path / "data", args=("--checkpoint-interval", "0")).start()
    try:
        lines = [line for line in server._stdout if line.startswith("postgres listening on ")]
        assert len(lines) == 1, server._stdout
        host, port = lines[0].split("postgres listening on ", 1)[1].strip().rsplit(":", 1)
        done = subprocess.run(
            [need("psql"), "-X", "-A", "-t", "-h", host, "-p", port, "-U", "me", "-c",
             "SHOW server_version"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip().startswith("15"), done.stderr
    finally:
        server.stop()


def test_pg_port_option():
    assert resolve_config({"data_dir": "d"}, {}).effective_pg_port() == DEFAULT_PG_PORT
    assert resolve_config({"data_dir": "d", "port": 0}, {}).effective_pg_port() == 0
    assert resolve_config({"data_dir": "d", "pg_port": -1}, {}).pg_port is None
    env = {"PARTIALFLOW_PG_PORT": "off"}
    assert resolve_config({"data_dir": "d"}, env).effective_pg_port() is None
    assert resolve_config({"data_dir": "d"}, {"PARTIALFLOW_PG_PORT": "6000"}).pg_port == 6000
    with pytest.raises(ValueError, match="PARTIALFLOW_PG_PORT"):
        resolve_config({"data_dir": "d"}, {"PARTIALFLOW_PG_PORT": "70000"})
    with pytest.raises(ValueError):
        Config(data_dir="d", pg_port=70000)
