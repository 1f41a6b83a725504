"""The interactive SQL shell of ``partialflow sql`` and its statement splitter.

Statements end with ``;`` and may span lines; the prompt changes to ``...>`` while one is
open. History (stdlib readline) lives in ``~/.partialflow_history``, one entry per
statement. An error prints one line and the shell goes on; ``\\q``, ``quit``, ``exit`` or
Ctrl-D leave it, Ctrl-C drops the statement being typed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from partialflow.client.errors import PartialflowError
from partialflow.client.output import print_result

PROMPT = "partialflow> "
MORE = "        ...> "
HISTORY_FILE = "~/.partialflow_history"
HISTORY_LENGTH = 1000
HELP = """\
Statements end with ';' and may span several lines.
  CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT);   INSERT INTO t VALUES ('a', 1);
  CREATE VIEW v AS SELECT ... WHERE k = ?;         SELECT * FROM t;
  EXPLAIN CREATE VIEW v AS SELECT ...;             EXPLAIN v;
\\q, quit or exit (or Ctrl-D) leaves; Ctrl-C drops the statement being typed."""


def split_statements(text: str) -> tuple[list[str], str]:
    """Complete ``;``-terminated statements in ``text`` and the unterminated rest.

    Semicolons inside '...' strings, "..." or `...` identifiers and -- or /* */ comments do
    not end a statement. Empty statements are dropped; statements come back without ``;``.
    """
    statements: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            end = text.find(c, i + 1)
            while end != -1 and end + 1 < n and text[end + 1] == c:  # '' escapes a quote
                end = text.find(c, end + 2)
            if end == -1:
                break  # an open string: the statement is not complete yet
            i = end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end == -1 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                break
            i = end + 2
        elif c == ";":
            statement = text[start:i].strip()
            if statement:
                statements.append(statement)
            start = i = i + 1
        else:
            i += 1
    return statements, text[start:]


def _is_blank(text: str) -> bool:
    """Nothing but whitespace and comments."""
    statements, rest = split_statements(text + ";")
    return not statements and not rest.strip()


def run_statement(client: Any, sql: str, out: TextIO, err: TextIO) -> bool:
    """Execute one statement and print its result or a one-line error; True if it worked."""
    try:
        print_result(client.execute(sql), out)
        return True
    except PartialflowError as error:
        print(error_line(error), file=err)
        return False


def error_line(error: PartialflowError) -> str:
    """``error: CODE: message`` on one line (server messages can carry Spark's traces)."""
    message = str(error).strip().splitlines()
    return f"error: {error.code.name}: {message[0] if message else error.code.name.lower()}"


def run_script(client: Any, text: str, out: TextIO, err: TextIO) -> int:
    """Run every statement of ``text`` in order, stopping at the first error (exit 1)."""
    statements, rest = split_statements(text)
    if rest.strip() and not _is_blank(rest):
        statements.append(rest.strip())  # the last statement may omit its ';'
    for sql in group_transactions(statements):
        if not run_statement(client, sql, out, err):
            return 1
    return 0


_BEGIN = ("BEGIN", "START TRANSACTION", "BEGIN TRANSACTION", "BEGIN WORK")
_END = ("COMMIT", "END", "ROLLBACK", "ABORT", "COMMIT WORK", "ROLLBACK WORK")


def group_transactions(statements: list[str]) -> list[str]:
    """Statements with each ``BEGIN`` ... ``COMMIT``/``ROLLBACK`` block joined into one
    script: the server runs a block as one write (a block left open runs as it is, and
    the server says it lacks its COMMIT)."""
    out: list[str] = []
    block: list[str] | None = None
    for sql in statements:
        word = " ".join(sql.rstrip(";").upper().split())
        if block is None:
            if word in _BEGIN:
                block = [sql.rstrip(";")]
            else:
                out.append(sql)
            continue
        block.append(sql.rstrip(";"))
        if word in _END:
            out.append("; ".join(block))
            block = None
    if block is not None:
        out.append("; ".join(block))
    return out


class _History:
    """readline history in a file; a multi-line statement becomes one entry."""

    def __init__(self, path: str) -> None:
        self.path = os.path.expanduser(path)
        try:
            import readline
        except ImportError:  # no readline (e.g. some Windows builds): plain input()
            self.readline: Any = None
            return
        self.readline = readline
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(self.path)
        except (FileNotFoundError, OSError):
            pass

    def length(self) -> int:
        return self.readline.get_current_history_length() if self.readline else 0

    def replace_since(self, mark: int, entry: str) -> None:
        """Drop the line entries added since ``mark`` and add the statement as one."""
        if self.readline is None:
            return
        while self.readline.get_current_history_length() > mark:
            self.readline.remove_history_item(self.readline.get_current_history_length() - 1)
        self.readline.add_history(entry)

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.readline.write_history_file(self.path)
        except OSError:
            pass  # a read-only home must not break the shell


def run_shell(
    client: Any,
    *,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    history_file: str = HISTORY_FILE,
) -> int:
    """The interactive loop; returns 0 when the user leaves."""
    history = _History(history_file)
    print(
        f"partialflow shell on {client.target}; end statements with ';', \\q to quit, "
        "help for help",
        file=out,
    )
    buffer, mark = "", history.length()
    block: list[str] | None = None  # an open BEGIN ... block's statements
    try:
        while True:
            try:
                line = read(MORE if buffer.strip() else PROMPT)
            except KeyboardInterrupt:
                print(file=out)
                buffer, mark = "", history.length()
                continue
            except EOFError:
                print(file=out)
                break
            if not buffer.strip():
                command = line.strip().rstrip(";").strip().lower()
                if command in ("\\q", "quit", "exit"):
                    break
                if command in ("help", "\\?", "\\h"):
                    print(HELP, file=out)
                    mark = history.length()
                    continue
            buffer += line + "\n"
            statements, buffer = split_statements(buffer)
            if statements:
                history.replace_since(
                    mark, " ".join(s + ";" for s in statements).replace("\n", " ")
                )
                mark = history.length()
            for sql in statements:
                word = " ".join(sql.rstrip(";").upper().split())
                if block is None and word in _BEGIN:
                    block = [sql]  # held until COMMIT/ROLLBACK: the block is one write
                    print("BEGIN (sent as one write at COMMIT)", file=out)
                elif block is not None:
                    block.append(sql)
                    if word in _END:
                        run_statement(client, "; ".join(block), out, err)
                        block = None
                else:
                    run_statement(client, sql, out, err)
                out.flush()
            if _is_blank(buffer):
                buffer = ""
    finally:
        history.save()
    return 0
