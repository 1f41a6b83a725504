"""Run the examples of a Markdown page (README.md, docs/*.md) with Sybil.

The convention every page follows (a reader meets the blocks in this order, and so does
the test):

- ```python blocks run in order, in one namespace per page;
- ```pycon blocks are doctests: ``>>> `` lines with their expected output beneath;
- ```console blocks: a line starting with ``$ `` is a shell command (a line ending in
  ``\\``, or an open quote, continues it on the next line), the lines after it up to the
  next command are what it prints (stdout and stderr together); ``...`` alone on a line
  matches any lines, none included, and ``...`` within a line any text on that line
  (a timing, a byte count);
- ```text blocks (and every other kind of block) are not run.

Why Sybil: it already parses Markdown fences and doctests, keeps one namespace per
document and reports the failing block's line; the console transcripts are the only part
it lacks, and it takes a custom parser for them (``ConsoleParser``, below). The
alternatives were weaker here: pytest-markdown-docs runs python blocks but has no doctest
or console support, and pytest-codeblocks compares a block's output only with the block
after it.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.parsers.abstract.doctest import DocTestStringParser
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser

RUN_LANGUAGES = ("python", "pycon", "console")
#: Fences a page may use for a block that is not run (and nothing else: a block in
#: an unknown fence would silently not be run).
QUIET_LANGUAGES = ("text",)
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# A console command may run Spark (a bulk load, a snapshot query): generous, never tight.
COMMAND_TIMEOUT = 300.0


class PyconParser:
    """```pycon blocks: every ``>>>`` example of the block, as a doctest."""

    def __init__(self) -> None:
        self.blocks = CodeBlockParser("pycon")
        self.doctests = DocTestStringParser(DocTestEvaluator(DOCTEST_FLAGS))

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.blocks(document):
            source = region.parsed
            for example in self.doctests(source, document.path):
                example.adjust(region, source)
                yield example


def split_transcript(text: str) -> list[tuple[str, list[str]]]:
    """A console block as ``(command, expected lines)`` pairs."""
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if steps:
                steps[-1][1].append(line.rstrip())
            elif line.strip():
                raise ValueError(f"console block: output before any '$ ' command: {line!r}")
            i += 1
            continue
        command = line[2:]
        while (command.endswith("\\") or _open_quote(command)) and i + 1 < len(lines):
            i += 1
            command = command + "\n" + lines[i]
        steps.append((command, []))
        i += 1
    for _, expected in steps:  # a blank line closing the block is not output
        while expected and not expected[-1]:
            expected.pop()
    return steps


def _open_quote(command: str) -> bool:
    """True while a quote is still open (the command goes on on the next line)."""
    try:
        shlex.split(command)
    except ValueError:
        return True
    return False


def _line_matches(expected: str, actual: str) -> bool:
    if "..." not in expected:
        return expected == actual
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """Line by line (trailing spaces ignored); ``...`` alone matches any lines, none too,
    and within a line any text."""
    actual = [a.rstrip() for a in actual]
    while actual and not actual[-1]:
        actual.pop()

    def match(e: int, a: int) -> bool:
        if e == len(expected):
            return a == len(actual)
        if expected[e].strip() == "...":
            return any(match(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and _line_matches(expected[e], actual[a]) and match(e + 1, a + 1)

    return match(0, 0)


class Shell:
    """Commands run one at a time by bash, each in the environment and directory the one
    before left (``export``, ``cd`` and ``unset`` carry over, as in a terminal)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = dict(env)
        self._state = cwd / ".shell-state"

    def run(self, command: str) -> str:
        state = shlex.quote(str(self._state))
        script = (
            f"{command}\n__status=$?\n"
            f"{{ pwd; env -0; }} > {state}.tmp 2>/dev/null && mv {state}.tmp {state}\n"
            "exit $__status\n"
        )
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        if self._state.exists():
            head, _, rest = self._state.read_text().partition("\n")
            self.cwd = Path(head)
            self.env = dict(
                item.split("=", 1) for item in rest.split("\0") if "=" in item
            )
            self._state.unlink()
        return done.stdout


class ConsoleParser:
    """```console blocks: each ``$`` command run, its output compared with the lines below."""

    def __init__(self) -> None:
        self.blocks = CodeBlockParser("console", evaluator=self.evaluate)

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.blocks(document):
            region.parsed = split_transcript(str(region.parsed))
            yield region

    @staticmethod
    def evaluate(example: Example) -> str | None:
        shell: Shell = example.namespace["__shell__"]
        for command, expected in example.parsed:
            got = shell.run(command).splitlines()
            if not lines_match(expected, got):
                return (
                    f"$ {command}\nexpected:\n"
                    + textwrap.indent("\n".join(expected) or "(nothing)", "    ")
                    + "\ngot:\n"
                    + textwrap.indent("\n".join(got) or "(nothing)", "    ")
                )
        return None


SYBIL = Sybil(parsers=[PythonCodeBlockParser(doctest_optionflags=DOCTEST_FLAGS),
                       PyconParser(), ConsoleParser()])

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$", re.M)


def fences(text: str) -> list[tuple[int, str]]:
    """Every fenced block's (line number, language), in order (the lexer's own rules:
    a fence closes on the same fence or a longer one)."""
    found = []
    open_fence = None
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if open_fence is None:
            open_fence = match.group("fence")
            found.append((line, match.group("info").strip().split(" ")[0]))
        elif match.group("fence").startswith(open_fence) and not match.group("info").strip():
            open_fence = None
    return found


def page_environment(address: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment a page's commands run in: this venv first on PATH, the server's
    address in PARTIALFLOW_SERVER, and no leftovers of the tester's own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARTIALFLOW_", "PG"))}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["PARTIALFLOW_SERVER"] = address
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env
