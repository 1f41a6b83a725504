"""Configuration: flags, PARTIALFLOW_* variables (the flag wins), the docs' table, logs."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ServerProcess, java_home_that_fails

from partialflow.client.cli import build_parser
from partialflow.server.app.logs import setup_logging
from partialflow.server.config import SERVE_OPTIONS, Config, resolve_config

CONFIG_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _flags(argv: list[str]) -> dict:
    args = build_parser().parse_args(["serve", *argv])
    return {o.field: getattr(args, o.field) for o in SERVE_OPTIONS}


def test_the_environment_fills_in_and_flags_win():
    env = {
        "PARTIALFLOW_DATA": "/env/data",
        "PARTIALFLOW_PORT": "7000",
        "PARTIALFLOW_MEMORY_LIMIT": "64MB",
        "PARTIALFLOW_LOG_LEVEL": "debug",
        "PARTIALFLOW_METRICS_PORT": "9100",
        "PARTIALFLOW_UPQUERY_TIMEOUT": "2.5",
    }
    config = resolve_config(_flags(["--port", "0", "--log-level", "WARNING"]), env)
    assert config.data_dir == "/env/data"
    assert config.port == 0 and config.log_level == "WARNING"  # flags
    assert config.memory_limit == 64 * 1024**2 and config.metrics_port == 9100
    assert config.upquery_timeout == 2.5
    assert config.host == "127.0.0.1" and config.tls_cert is None  # defaults
    assert resolve_config(_flags(["--data", "d"]), {}) == Config(data_dir="d")


def test_token_from_a_file_and_precedence_between_token_sources(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    env = {"PARTIALFLOW_DATA": "d", "PARTIALFLOW_AUTH_TOKEN": "from-env"}
    assert resolve_config(_flags([]), env).auth_token == "from-env"
    flags = _flags(["--auth-token-file", str(token_file)])
    assert resolve_config(flags, env).auth_token == "from-file"  # a flag beats a variable
    assert resolve_config(_flags(["--auth-token", "x"]), env).auth_token == "x"
    with pytest.raises(ValueError, match="not both"):
        resolve_config(_flags(["--auth-token", "x", "--auth-token-file", str(token_file)]), env)
    with pytest.raises(ValueError, match="cannot read the auth token file"):
        resolve_config(_flags(["--auth-token-file", str(tmp_path / "nope")]), env)
    assert "from-env" not in repr(resolve_config(_flags([]), env))  # never logged


def test_spark_settings_pass_through_repeated_or_from_the_environment():
    flags = _flags(
        [
            "--data", "d",
            "--spark-conf", "spark.hadoop.fs.s3a.endpoint=http://minio:9000",
            "--spark-conf", "spark.executor.memory=1g",
        ]
    )  # fmt: skip
    assert resolve_config(flags, {}).spark_conf == (
        ("spark.hadoop.fs.s3a.endpoint", "http://minio:9000"),
        ("spark.executor.memory", "1g"),
    )
    env = {"PARTIALFLOW_DATA": "d", "PARTIALFLOW_SPARK_CONF": "spark.a=1 spark.b=x=y"}
    assert resolve_config(_flags([]), env).spark_conf == (("spark.a", "1"), ("spark.b", "x=y"))
    assert resolve_config(_flags([]), {"PARTIALFLOW_DATA": "d"}).spark_conf == ()
    with pytest.raises(SystemExit):  # argparse's usage error, naming the key
        _flags(["--spark-conf", "fs.s3a.endpoint=x"])


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PARTIALFLOW_PORT": "http"}, "PARTIALFLOW_PORT='http': expected a whole number"),
        ({"PARTIALFLOW_MEMORY_LIMIT": "lots"}, "PARTIALFLOW_MEMORY_LIMIT='lots': invalid size"),
        ({"PARTIALFLOW_LOG_LEVEL": "chatty"}, "invalid log level"),
        ({"PARTIALFLOW_TLS_CERT": "c.pem"}, "both a certificate"),
        ({"PARTIALFLOW_METRICS_PORT": "70000"}, "invalid metrics_port"),
        ({"PARTIALFLOW_SPARK_CONF": "spark.a"}, "invalid Spark setting 'spark.a': expected KEY"),
        ({"PARTIALFLOW_SPARK_CONF": "a.b=1"}, "keys start with 'spark.'"),
        ({"PARTIALFLOW_INDEX_PREFETCH": "yes"}, "PARTIALFLOW_INDEX_PREFETCH='yes': invalid"),
    ],
)
def test_bad_settings_name_their_variable(env, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(_flags([]), {"PARTIALFLOW_DATA": "d", **env})


def test_serve_without_a_data_directory_or_with_a_bad_variable_is_a_usage_error(tmp_path):
    def serve(env: dict) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")}
        return subprocess.run(
            [sys.executable, "-m", "partialflow.client.cli", "serve"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**clean, **env},
            check=False,
        )

    done = serve({})
    assert done.returncode == 2 and "--data DIR or PARTIALFLOW_DATA" in done.stderr
    done = serve({"PARTIALFLOW_DATA": str(tmp_path), "PARTIALFLOW_PORT": "x"})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "PARTIALFLOW_PORT" in done.stderr


def test_the_docs_document_every_serve_option():
    # docs/configuration.md's table is generated from SERVE_OPTIONS at build time.
    assert "<!-- generated: serve-options -->" in CONFIG_PAGE.read_text()
    sys.path.insert(0, str(CONFIG_PAGE.parents[1] / "scripts"))
    try:
        from mkdocs_hooks import serve_options
    finally:
        sys.path.pop(0)
    table = serve_options()
    for option in SERVE_OPTIONS:
        assert f"| `{option.flag}" in table and f"`{option.env}`" in table, option.flag


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_structured_logs(fmt):
    stream = io.StringIO()
    setup_logging("INFO", fmt, stream)
    try:
        log = logging.getLogger("partialflow.test")
        log.info("loaded file", extra={"rows": 3, "path": "/a b"})
        log.debug("hidden")
    finally:
        setup_logging("WARNING", "logfmt", sys.stderr)
    line = stream.getvalue().strip()
    assert "\n" not in line
    if fmt == "json":
        record = json.loads(line)
        assert (record["level"], record["msg"], record["rows"], record["path"]) == (
            "info",
            "loaded file",
            3,
            "/a b",
        )
    else:
        assert 'level=info logger=partialflow.test msg="loaded file" rows=3 path="/a b"' in line
        assert line.startswith("ts=")


def test_a_server_configured_only_by_environment(tmp_path, monkeypatch):
    """``partialflow serve`` with everything but host/port from PARTIALFLOW_* variables.

    Its Java fails the first time (JAVA_HOME): a gateway that exits during start-up is
    retried, and the server serves (shown here rather than on a server of its own, to
    spare a Spark start-up)."""
    token_file = tmp_path / "token"
    token_file.write_text("env-secret\n")
    for name, value in {
        "PARTIALFLOW_PORT": "1",  # the flag (--port 0, from ServerProcess) must win
        "PARTIALFLOW_MEMORY_LIMIT": "64MB",
        "PARTIALFLOW_AUTH_TOKEN_FILE": str(token_file),
        "PARTIALFLOW_METRICS_PORT": "0",
        "PARTIALFLOW_LOG_FORMAT": "json",
        "PARTIALFLOW_SPARK_MASTER": "local[1]",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JAVA_HOME", str(java_home_that_fails(tmp_path, times=1)))
    srv = ServerProcess(tmp_path / "data").start()
    try:
        from partialflow.client import Unauthenticated

        with srv.client() as db, pytest.raises(Unauthenticated):
            db.stats()
        with srv.client(token="env-secret") as db:
            assert db.stats()["memory_limit"] == 64 * 1024**2
        assert any(line.startswith("metrics on http://127.0.0.1:") for line in srv._stdout)
        assert srv.terminate() == 0
    finally:
        srv.stop()
    records = []
    for line in srv.log_path.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    serving = next(r for r in records if r["msg"] == "serving")
    assert serving["auth"] is True and serving["metrics_port"] > 0
    assert "env-secret" not in srv.log_path.read_text()
    retried = [r for r in records if "exited during start-up (attempt 1 of 3)" in r["msg"]]
    assert len(retried) == 1 and retried[0]["level"] == "warning", records[:5]


def test_index_prefetch_is_on_unless_turned_off():
    env = {"PARTIALFLOW_DATA": "d"}
    assert resolve_config(_flags([]), env).index_prefetch is True
    assert resolve_config(_flags(["--index-prefetch", "off"]), env).index_prefetch is False
    off = {**env, "PARTIALFLOW_INDEX_PREFETCH": "off"}
    assert resolve_config(_flags([]), off).index_prefetch is False
    assert resolve_config(_flags(["--index-prefetch", "on"]), off).index_prefetch is True
