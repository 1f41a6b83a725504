"""MkDocs hooks (mkdocs.yml ``hooks:``): the parts of the docs made from the code.

A page marks a generated part with an HTML comment on a line of its own, replaced at
build time (so the site cannot drift from the code; on GitHub the marker is invisible):

- ``<!-- generated: serve-options -->``: every ``partialflow serve`` option, from
  ``SERVE_OPTIONS`` in server/config.py with the defaults of ``Config``;
- ``<!-- generated: cli -->``: the ``--help`` of every ``partialflow`` command, from the
  argument parser;
- ``<!-- generated: benchmarks -->``: the published benchmark run (bench/published/
  results.json) as bench/report.py renders it, with where each section was measured;
- ``<!-- generated: node-guide -->``: the Node.js client's guide, examples/node/README.md;
- ``<!-- generated: layers -->``: the layers of the import contract in pyproject.toml,
  with the modules each holds, and the other import contracts;
- ``<!-- generated: storage-readme -->``: server/storage/README.md, the storage layer's
  own description.

The plots in bench/published/ are added to the site under ``benchmarks/``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
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


#: What each layer of the import contract does (a layer the contract gains shows without
#: one until it is described here).
LAYER_JOBS = {
    "partialflow.testing": "the test and benchmark harness: a server in the test's own "
    "process on its Spark session, with connected clients",
    "partialflow.client": "the Python client, the `partialflow` command, `partialflow stress`",
    "partialflow.server.app": "gRPC server assembly: requests in, typed answers out; health, "
    "reflection, TLS, token, metrics, logs, test hooks",
    "partialflow.server.pgwire": "the PostgreSQL protocol front end: sessions, simple and "
    "extended queries, an emulated pg_catalog, SUBSCRIBE, SCRAM and TLS",
    "partialflow.server.engine": "statements to calls: DDL to storage and dataflow, writes, "
    "loads, snapshot queries",
    "partialflow.server.sqltx": "a transaction block (BEGIN; INSERT/UPDATE/DELETE ...; "
    "COMMIT) sent as one script, turned into the changes of one write",
    "partialflow.server.follow": "following an upstream PostgreSQL: copy in an exported "
    "snapshot, then pgoutput by logical replication, one write per upstream transaction",
    "partialflow.server.bulk": "bulk loads: a file read by Spark, converted, one atomic write",
    "partialflow.server.upquery": "the Spark side: a state's subgraph compiled to one Spark "
    "plan (kept per state and base data, keys bound per fill); fills run on Spark",
    "partialflow.server.statements": "one statement parsed into a typed statement the "
    "engine dispatches on (CREATE TABLE's schema, INSERT's values, EXPLAIN's target)",
    "partialflow.server.dataflow": "the ordered executor and partial state: fills, holds, "
    "evictions, publishing to readers, subscriptions, the view catalog, what a checkpoint "
    "captures and how a start recovers; imports no pyspark",
    "partialflow.server.checkpoint": "checkpoint files: framing, manifests, the writer "
    "thread, chains, compaction, retention",
    "partialflow.server.storage": "WAL, LSNs, Parquet segments, snapshots, compaction, "
    "recovery (server/storage/README.md)",
    "partialflow.server.verifier": "the background sampler: served reads re-checked on Spark",
    "partialflow.server.sql": "SQL text to a plan of operators; errors in the user's terms; "
    "a view's SQL rewritten to answer one key over base tables (the oracle)",
    "partialflow.server.spark_supervisor": "the Spark session behind a supervisor: a dead "
    "driver is replaced with the same settings; what a lost session looks like to callers",
    "partialflow.server.spark": "starting a Spark session (local, standalone or Spark "
    "Connect) with the SQL settings the dataflow's value rules assume",
    "partialflow.operators": "pure computation: deltas in, deltas out; expressions and SQL "
    "value rules",
    "partialflow.proto": "the wire contract and its value codec",
    "partialflow.server.errors": "the errors every layer raises, with their gRPC status",
    "partialflow.server.config": "the server's options and their defaults",
}
_PACKAGE_DIRS = {"partialflow.server": "server", "partialflow.client": "client",
                 "partialflow.operators": "operators", "partialflow.proto": "proto",
                 "partialflow.testing": "testing"}


def _where(module: str) -> tuple[str, list[str]]:
    """The path of a module of the contract, and its modules when it is a package."""
    for prefix, directory in sorted(_PACKAGE_DIRS.items(), key=lambda kv: -len(kv[0])):
        if module == prefix or module.startswith(prefix + "."):
            rel = directory + module[len(prefix):].replace(".", "/")
            path = ROOT / rel
            if path.is_dir():
                names = sorted(p.stem for p in path.glob("*.py")
                               if p.stem != "__init__" and not p.stem.endswith("_pb2"))
                # A subpackage shows as one entry (``stress/``), its modules after it.
                for sub in sorted(p for p in path.iterdir() if (p / "__init__.py").exists()):
                    names += [f"{sub.name}/"] + sorted(
                        f"{sub.name}/{p.stem}" for p in sub.glob("*.py") if p.stem != "__init__")
                return rel + "/", names
            return rel + ".py", []
    return module, []


def layers() -> str:
    """The layers table, from the import-linter contract in pyproject.toml (top first)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the same parser, as a package (pip's own copy)
        from pip._vendor import tomli as tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    lines = ["| layer (top first) | where | modules | job |", "| --- | --- | --- | --- |"]
    for n, layer in enumerate(contract["layers"], 1):
        for module in (m.strip() for m in layer.split("|")):
            where, names = _where(module)
            shown = ", ".join(f"`{name}`" for name in names if not name.endswith("_grpc"))
            job = LAYER_JOBS.get(module, "")
            lines.append(f"| {n} | `{where}` | {shown} | {job} |")
    exceptions = contract.get("ignore_imports", [])
    if exceptions:
        lines += ["", "Allowed exceptions: " + "; ".join(f"`{e}`" for e in exceptions) + "."]
    others = [c for c in config["contracts"] if c is not contract]
    if others:
        lines += ["", f"{len(others)} more contracts hold:", ""]
        lines += [f"- {c['name']}" + _excused(c) for c in others]
    return "\n".join(lines)


def _excused(contract: dict[str, Any]) -> str:
    ignored = contract.get("ignore_imports", [])
    return f" (except {', '.join(f'`{i}`' for i in ignored)})" if ignored else ""


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
    "layers": layers,
    "storage-readme": lambda: re.sub(
        r"^#", "##", (ROOT / "server" / "storage" / "README.md").read_text(), count=1
    ),
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


def on_config(config: Any) -> Any:
    # mkdocstrings reads the package `partialflow` from build/typecheck (mkdocs.yml), the
    # link tree scripts/check.sh makes for mypy: the package's directories are server/,
    # client/, ... (package-dir), which no tool can map by itself.
    tree = ROOT / "build" / "typecheck" / "partialflow"
    tree.mkdir(parents=True, exist_ok=True)
    for name in ("server", "operators", "proto", "client"):
        link = tree / name
        if not link.exists():
            link.symlink_to(Path("..", "..", "..", name))
    # `mkdocs` run from .venv/bin puts that directory first on sys.path, and griffe takes
    # the `partialflow` console script there for a part of the package: drop such entries.
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "partialflow").is_file()]
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return render(markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for png in sorted(PUBLISHED.glob("*.png")):
        files.append(
            File.generated(config, f"benchmarks/{png.name}", abs_src_path=str(png))
        )
    return files
