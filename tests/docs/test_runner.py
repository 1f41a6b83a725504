"""The example runner itself: a broken or missing example must fail (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner import SYBIL, Shell, fences, lines_match, page_environment, split_transcript


def test_transcripts_split_into_commands_and_their_output() -> None:
    steps = split_transcript("$ echo a \\\n  b\na b\n$ true\n\n$ echo 'x\ny'\nx\ny\n")
    assert steps == [("echo a \\\n  b", ["a b"]), ("true", []), ("echo 'x\ny'", ["x", "y"])]
    with pytest.raises(ValueError, match="output before any"):
        split_transcript("stray\n$ true\n")


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["a", "b"], ["a", "b  ", ""], True),
        (["a"], ["a", "b"], False),
        (["a", "...", "z"], ["a", "z"], True),
        (["a", "...", "z"], ["a", "b", "c", "z"], True),
        (["...", "z"], ["a", "y"], False),
        (["..."], [], True),
        (["a ... z"], ["a b c z"], True),  # within a line: any text on that line
        (["a ... z"], ["a b", "z"], False),
        (["took ... s"], ["took 0.25 s"], True),
    ],
)
def test_lines_match(expected: list[str], actual: list[str], ok: bool) -> None:
    assert lines_match(expected, actual) is ok


def _run_page(tmp_path: Path, text: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    document = SYBIL.parse(page)
    document.namespace["__shell__"] = Shell(tmp_path, page_environment("127.0.0.1:1", {}))
    for example in document.examples():
        example.evaluate()


GOOD = """
```python
x = 6 * 7
```

```pycon
>>> print(x)
42
```

```console
$ export GREETING=hello
$ cd /tmp && echo "$GREETING from $(pwd)"
hello from /tmp
$ echo again; echo "$GREETING" >&2; exit 3
again
...
```

```text
$ this is not run
```
"""


def test_a_good_page_passes(tmp_path: Path) -> None:
    _run_page(tmp_path, GOOD)


@pytest.mark.parametrize(
    "broken",
    [
        GOOD.replace("\n42\n", "\n43\n"),  # a doctest's output
        GOOD.replace("hello from /tmp", "hello from /"),  # a command's output
        GOOD.replace("x = 6 * 7", "x = 6 * 7\nraise RuntimeError('boom')"),  # a python block
        GOOD.replace("$ export GREETING=hello\n", ""),  # an example others depend on, removed
    ],
)
def test_a_broken_example_fails(tmp_path: Path, broken: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - any failure of the block will do
        _run_page(tmp_path, broken)


def test_fences_are_listed_with_their_language() -> None:
    text = "a\n```python\nx\n```\n\n````text\n```sh\n````\n```\nplain\n```\n"
    assert fences(text) == [(2, "python"), (6, "text"), (9, "")]
