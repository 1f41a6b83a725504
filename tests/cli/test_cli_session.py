"""The ``partialflow`` client commands against a real server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _cli(server, *args: str) -> subprocess.CompletedProcess:
    command, rest = args[0], args[1:]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "partialflow.client.cli",
            command,
            "--server",
            server.address,
            *rest,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_sql_session_prints_tables_and_lsns(server):
    done = _cli(
        server, "sql", "CREATE TABLE cli_fruit (name TEXT PRIMARY KEY, kind TEXT, price DOUBLE)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK (lsn ")
    done = _cli(
        server, "sql", "INSERT INTO cli_fruit VALUES ('Apple', 'Fruit', 1.5), ('Kiwi', NULL, 20)"
    )
    assert done.returncode == 0, done.stderr
    lsn = int(done.stdout.strip().removeprefix("OK (lsn ").rstrip(")"))

    done = _cli(server, "sql", "SELECT name, kind, price FROM cli_fruit ORDER BY name")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["name", "|", "kind", "|", "price"]
    assert lines[2].split() == ["Apple", "|", "Fruit", "|", "1.5"]
    assert lines[3].split() == ["Kiwi", "|", "NULL", "|", "20.0"]
    assert lines[-1].startswith("(2 rows, lsn ")

    done = _cli(server, "sql", "--as-of", str(lsn - 1), "SELECT COUNT(*) AS n FROM cli_fruit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].strip() == "0"


@pytest.mark.parametrize(
    "args, code",
    [
        (("sql", "SELEC nonsense FROM"), "INVALID_ARGUMENT"),
        (("sql", "DROP TABLE cli_nothing"), "NOT_FOUND"),
    ],
)
def test_errors_are_one_line_and_exit_1(server, args, code):
    done = _cli(server, *args)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {code}: ")


def test_stats_prints_json_with_the_lsn(server):
    done = _cli(server, "stats", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert isinstance(stats["lsn"], int) and "views" in stats and "memory_limit" in stats


def test_lookup_and_explain_of_an_unknown_view_fail_cleanly(server):
    for args in (("lookup", "cli_no_view", "1"), ("explain", "cli_no_view")):
        done = _cli(server, *args)
        assert done.returncode == 1
        assert done.stderr.startswith("error: ")
        assert len(done.stderr.strip().splitlines()) == 1


def test_lookup_and_explain_a_view(server):
    assert (
        _cli(server, "sql", "CREATE TABLE cli_visit (product TEXT, length BIGINT)").returncode == 0
    )
    assert (
        _cli(
            server, "sql", "INSERT INTO cli_visit VALUES ('Apple', 10), ('Apple', 30), ('42', 5)"
        ).returncode
        == 0
    )
    done = _cli(
        server,
        "sql",
        "CREATE VIEW cli_longest AS SELECT product, MAX(length) AS longest FROM cli_visit "
        "WHERE product = ? GROUP BY product",
    )
    assert done.returncode == 0, done.stderr

    done = _cli(server, "lookup", "cli_longest", "Apple")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["product", "|", "longest"]
    assert lines[2].split() == ["Apple", "|", "30"]
    assert lines[-1].startswith("(1 row, lsn ")

    done = _cli(server, "lookup", "cli_longest", '"42"')  # quoted: text, not a number
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].split() == ["42", "|", "5"]

    done = _cli(server, "explain", "cli_longest")
    assert done.returncode == 0, done.stderr
    assert "cli_visit" in done.stdout
    done = _cli(server, "explain", "--dot", "cli_longest")
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("digraph")
