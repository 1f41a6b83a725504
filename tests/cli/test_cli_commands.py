"""Every ``partialflow`` client command as a subprocess against the shared server,
including the interactive shell (on a pseudo-terminal) and the error exits."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")}
    return {**env, **extra}


def cli(server, *args: str, stdin: str | None = None, env: dict | None = None):
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
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env or _env(),
        check=False,
    )


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess, code: str = "") -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {code}"), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def fruit(server):
    """A table and a view the read-only commands below share."""
    script = """
        CREATE TABLE cmd_fruit (name TEXT PRIMARY KEY, kind TEXT, price BIGINT);
        INSERT INTO cmd_fruit VALUES ('apple', 'pome', 3), ('pear', 'pome', 4),
                                     ('plum', 'drupe', 2);  -- a comment; with a semicolon
        CREATE VIEW cmd_by_kind AS SELECT kind, COUNT(*) AS n, SUM(price) AS total
            FROM cmd_fruit WHERE kind = ? GROUP BY kind
    """
    out = ok(cli(server, "sql", stdin=script))  # a script on stdin; the last ';' optional
    assert out.count("OK (lsn") == 3, out
    return server


def test_a_script_stops_at_its_first_error(fruit):
    done = cli(fruit, "sql", stdin="SELECT 1 AS one; SELEC oops; SELECT 2 AS two;")
    assert done.returncode == 1
    assert "one" in done.stdout and "two" not in done.stdout
    assert done.stderr.startswith("error: INVALID_ARGUMENT: ")


def test_lookup_prints_a_table_and_refuses_a_wrong_key(fruit):
    out = ok(cli(fruit, "lookup", "cmd_by_kind", "pome"))
    assert out.splitlines()[2].split() == ["pome", "|", "2", "|", "7"]
    one_line_error(cli(fruit, "lookup", "cmd_by_kind", "pome", "extra"), "INVALID_ARGUMENT")


def test_stats_is_a_table_per_view_and_of_figures(fruit):
    ok(cli(fruit, "lookup", "cmd_by_kind", "drupe"))
    out = ok(cli(fruit, "stats"))
    header = out.splitlines()[0].split(" | ")
    assert [h.strip() for h in header] == [
        "view",
        "keys_filled",
        "hits",
        "misses",
        "upqueries",
        "evictions",
        "memory_bytes",
    ]
    row = next(line for line in out.splitlines() if line.startswith("cmd_by_kind "))
    assert int(row.split("|")[1]) >= 1  # keys_filled
    figures = {
        parts[0].strip(): parts[1].strip()
        for parts in (line.split("|") for line in out.split("\n\n")[1].splitlines()[2:])
    }
    assert int(figures["lsn"]) >= 1 and "storage.flushes" in figures
    assert "writes.rows_inserted" in figures


def test_explain_create_view_is_a_dry_run(fruit):
    sql = (
        "EXPLAIN CREATE VIEW cmd_dry AS SELECT kind, MAX(price) AS top FROM cmd_fruit "
        "WHERE kind = ? GROUP BY kind"
    )
    out = ok(cli(fruit, "sql", sql))
    lines = out.splitlines()
    assert lines[0].strip() == "plan"
    assert any("partial" in line for line in lines) and any("why:" in line for line in lines)
    assert "cmd_fruit" in out
    one_line_error(cli(fruit, "lookup", "cmd_dry", "pome"), "NOT_FOUND")  # nothing created
    one_line_error(
        cli(fruit, "sql", "EXPLAIN CREATE VIEW cmd_bad AS SELECT * FROM cmd_nothing"),
        "",
    )
    out = ok(cli(fruit, "sql", "EXPLAIN cmd_by_kind"))
    assert "reader cmd_by_kind" in out


def test_graph_prints_dot_and_renders_png(fruit, tmp_path):
    out = ok(cli(fruit, "graph", "cmd_by_kind"))
    assert out.lstrip().startswith("digraph") and "cmd_fruit" in out
    png = tmp_path / "g.png"
    if shutil.which("dot"):
        assert ok(cli(fruit, "graph", "cmd_by_kind", "--png", str(png))).startswith("wrote ")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without Graphviz on PATH: a clear one-line error
    no_dot = _env(PATH=str(Path(sys.executable).parent))
    line = one_line_error(cli(fruit, "graph", "cmd_by_kind", "--png", str(png), env=no_dot))
    assert "Graphviz" in line and "not installed" in line
    one_line_error(cli(fruit, "graph", "cmd_nothing"), "NOT_FOUND")


def test_load_a_csv_then_refuse_it_again(fruit, tmp_path):
    path = tmp_path / "more.csv"
    path.write_text("name,kind,price\nquince,pome,5\ncherry,drupe,1\n")
    ok(cli(fruit, "sql", "CREATE TABLE cmd_load (name TEXT, kind TEXT, price BIGINT)"))
    out = ok(cli(fruit, "load", "cmd_load", str(path), "--header"))  # csv by its suffix
    assert re.fullmatch(r"loaded 2 rows into cmd_load \(lsn \d+\)\n", out)
    line = one_line_error(cli(fruit, "load", "cmd_load", str(path), "--header"), "ALREADY_EXISTS")
    assert "--force" in line
    assert ok(cli(fruit, "load", "cmd_load", str(path), "--header", "--force")).startswith(
        "loaded 2 rows"
    )
    copy = tmp_path / "copy.csv"
    copy.write_text(path.read_text())
    # without --header the header line is data, and 'price' is no BIGINT
    one_line_error(cli(fruit, "load", "cmd_load", str(copy)), "INVALID_ARGUMENT")
    one_line_error(cli(fruit, "load", "cmd_load", str(tmp_path / "none.csv")), "NOT_FOUND")
    one_line_error(cli(fruit, "load", "cmd_load", str(path), "--option", "nokey"), "--option")


def test_compact_one_table_or_all(fruit):
    out = ok(cli(fruit, "compact", "cmd_fruit"))
    assert out.splitlines()[0].split()[:3] == ["table", "|", "segments_before"]
    assert "cmd_fruit" in out and "(total)" in out
    one_line_error(cli(fruit, "compact", "cmd_nothing"), "NOT_FOUND")


@pytest.mark.parametrize(
    "command", ["sql", "lookup", "stats", "explain", "graph", "load", "compact"]
)
def test_every_command_fails_cleanly_without_a_server(command):
    args = {
        "sql": ["SELECT 1"],
        "lookup": ["v", "1"],
        "explain": ["v"],
        "graph": ["v"],
        "load": ["t", "/x.parquet"],
        "compact": [],
    }.get(command, [])
    done = subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", command, *args, "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(PARTIALFLOW_SERVER="127.0.0.1:1"),  # the default comes from the environment
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: UNAVAILABLE: ")
    assert len(done.stderr.strip().splitlines()) == 1


# -- the interactive shell ------------------------------------------------------------------


class Terminal:
    """A child process on a pseudo-terminal, driven like a person at a keyboard."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
        )
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} on the terminal; it shows:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    break
        before, _, self.seen = self.seen.partition(text)
        return before

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.master)


def test_interactive_shell_multiline_errors_and_history(fruit, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    term = Terminal(
        [sys.executable, "-m", "partialflow.client.cli", "sql", "--server", fruit.address],
        _env(HOME=str(home), TERM="dumb"),
    )
    term.expect("partialflow> ")
    term.type("SELECT name, price FROM cmd_fruit")
    term.expect("...> ")
    term.type("WHERE kind = 'drupe';")
    out = term.expect("partialflow> ")
    assert re.search(r"plum\s+\|\s+2", out), out
    assert "(1 row, lsn" in out
    term.type("SELEC nonsense;")
    assert "error: INVALID_ARGUMENT" in term.expect("partialflow> ")
    term.type("help")
    assert "end with ';'" in term.expect("partialflow> ")
    term.type("\\q")
    assert term.close() == 0
    history = (home / ".partialflow_history").read_text()
    assert "SELECT name, price FROM cmd_fruit WHERE kind = 'drupe';" in history
