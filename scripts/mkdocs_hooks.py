"""MkDocs hooks (mkdocs.yml ``hooks:``): the parts of the docs made from the code.

A page marks a generated part with an HTML comment on a line of its own, replaced at
build time (so the site cannot drift from the code; on GitHub the marker is invisible):

- ``<!-- generated: serve-options -->``: every ``partialflow serve`` option, from
  ``SERVE_OPTIONS`` in server/config.py with the defaults of ``Config``;
- ``<!-- generated: cli -->``: the ``--help`` of every ``partialflow`` command, from the
  argument parser;
- ``<!-- generated: benchmarks -->``: the published benchmark run (bench/published/
  results.json) as bench/report.py renders it, with where each section was measured;
- ``<!-- generated: node-guide -->``: the Node.js client's guide, examples/node/README.md.

The plots in bench/published/ are added to the site under ``benchmarks/``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "bench" / "published"
_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def _default(config_fields: dict[str, Any], field: str) -> str:
    f = config_fields.get(field)
    if f is None:
        return "off"
    if f.default is dataclasses.MISSING:
        return "(required)"
    value = f.default
    if value is None:
        return "off"
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if value == ():
        return "none"
    return f"`{value}`"


def serve_options() -> str:
    """A Markdown table of every serve option: flag, variable, default, meaning."""
    from partialflow.server.config import SERVE_OPTIONS, Config

    fields = {f.name: f for f in dataclasses.fields(Config)}
    lines = ["| flag | variable | default | meaning |", "| --- | --- | --- | --- |"]
    for option in SERVE_OPTIONS:
        flag = f"{option.flag} {option.metavar}" if option.metavar else option.flag
        flag = flag.replace("|", "\\|")
        repeat = " (repeatable)" if option.repeat and "repeatable" not in option.help else ""
        lines.append(
            f"| `{flag}` | `{option.env}` | {_default(fields, option.field)} "
            f"| {option.help.replace('|', chr(92) + '|')}{repeat} |"
        )
    return "\n".join(lines)


def cli_reference() -> str:
    """Each command's ``--help``, as the parser prints it, under a heading of its own."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; keep the page stable
    from partialflow.client.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    parts = ["### partialflow", "", "```text", parser.format_help().rstrip(), "```"]
    for name, sub in commands.choices.items():
        parts += ["", f"### partialflow {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(parts)


def _report() -> Any:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmarks() -> str:
    """Where each section was measured, then the table bench/report.py makes of it."""
    report = _report()
    results = json.loads((PUBLISHED / "results.json").read_text())
    return report.page(results)


def node_guide() -> str:
    """examples/node/README.md (its headings start at ##), its shell blocks shown as text
    (the Node client's own test runs them: tests/client/test_node_client.py)."""
    text = (ROOT / "examples" / "node" / "README.md").read_text()
    return text.replace("```sh\n", "```text\n").replace("```js\n", "```javascript\n")


GENERATORS = {
    "serve-options": serve_options,
    "cli": cli_reference,
    "benchmarks": benchmarks,
    "node-guide": node_guide,
}


def render(markdown: str) -> str:
    """``markdown`` with every generated marker replaced (an unknown one is an error)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated part {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return _MARKER.sub(replace, markdown)


# -- MkDocs events ----------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return render(markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for png in sorted(PUBLISHED.glob("*.png")):
        files.append(
            File.generated(config, f"benchmarks/{png.name}", abs_src_path=str(png))
        )
    return files
