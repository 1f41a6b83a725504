"""Command-line pieces that need no server: sizes, key parsing, table output, usage."""

from __future__ import annotations

import subprocess
import sys

import pytest

from partialflow.client.cli import build_parser, format_table, parse_key_value
from partialflow.server.config import Config, parse_size


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12345", 12345),
        ("64MB", 64 * 1024**2),
        ("1GB", 1024**3),
        ("1gb", 1024**3),
        ("512k", 512 * 1024),
        ("1.5GiB", int(1.5 * 1024**3)),
        (" 10 B ", 10),
        (2048, 2048),
    ],
)
def test_parse_size_accepts(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "12XB", "-5MB", "1e3", "ten", "1.2.3GB"])
def test_parse_size_refuses_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="64MB, 1GB, 12345"):
        parse_size(text)


def test_config_checks_its_fields():
    assert Config(data_dir="d").port == 50051
    with pytest.raises(ValueError, match="port"):
        Config(data_dir="d", port=70000)
    with pytest.raises(ValueError, match="memory limit"):
        Config(data_dir="d", memory_limit=0)


@pytest.mark.parametrize(
    "text, value",
    [
        ("Fruit", "Fruit"),
        ("42", 42),
        ("1.5", 1.5),
        ("true", True),
        ("null", None),
        ('"42"', "42"),
        ("[1]", "[1]"),
        ("", ""),
    ],
)
def test_key_values_are_json_scalars_or_text(text, value):
    assert parse_key_value(text) == value
    assert type(parse_key_value(text)) is type(value)


def test_table_is_aligned_with_numbers_right():
    text = format_table(["name", "n"], [("Apple", 10), ("Fig", None), ("Kiwi", 200)])
    assert text.splitlines() == [
        "name  |    n",
        "------+-----",
        "Apple |   10",
        "Fig   | NULL",
        "Kiwi  |  200",
    ]


def test_serve_parses_its_options():
    args = build_parser().parse_args(
        [
            "serve",
            "--data",
            "d",
            "--port",
            "0",
            "--memory-limit",
            "64MB",
            "--spark-master",
            "local[1]",
        ]
    )
    assert (args.data_dir, args.port, args.memory_limit, args.spark_master) == (
        "d",
        0,
        64 * 1024**2,
        "local[1]",
    )
    assert args.host is None  # not given: the environment, then the Config default, decide


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_memory_limit_is_a_usage_error():
    done = _cli("serve", "--data", "d", "--memory-limit", "lots")
    assert done.returncode == 2
    assert "invalid size 'lots'" in done.stderr


def test_unreachable_server_is_one_line_and_exit_1():
    done = _cli("sql", "--server", "127.0.0.1:1", "--timeout", "3", "SELECT 1")
    assert done.returncode == 1
    assert done.stderr.startswith("error: UNAVAILABLE:")
    assert len(done.stderr.strip().splitlines()) == 1


def test_client_commands_do_not_import_pyspark():
    code = "import sys, partialflow.client.cli, partialflow.client; print('pyspark' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        == "False"
    )
