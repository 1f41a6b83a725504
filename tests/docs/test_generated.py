"""The generated parts of the site (scripts/mkdocs_hooks.py) say what the code says."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import mkdocs_hooks as hooks  # noqa: E402

from partialflow.client.cli import build_parser  # noqa: E402
from partialflow.server.config import SERVE_OPTIONS  # noqa: E402


def test_every_marker_in_the_pages_is_known_and_replaced() -> None:
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rendered = hooks.render(page.read_text())
        assert not re.search(r"^<!-- generated:", rendered, re.M), page.name
    with pytest.raises(ValueError, match="unknown generated part"):
        hooks.render("<!-- generated: nothing-such -->")


def test_the_option_table_has_every_serve_option() -> None:
    table = hooks.serve_options()
    for option in SERVE_OPTIONS:
        assert f"| `{option.flag}" in table and f"`{option.env}`" in table, option.flag


def test_the_cli_reference_has_every_command() -> None:
    reference = hooks.cli_reference()
    (commands,) = [a for a in build_parser()._actions if hasattr(a, "choices") and a.choices]
    for name in commands.choices:
        assert f"### partialflow {name}\n" in reference


def test_the_layers_are_the_import_contracts() -> None:
    table = hooks.layers()
    for path in ("`server/app/`", "`server/dataflow/`", "`server/verifier.py`", "`operators/`"):
        assert path in table
    # bounds, inbox and prefetch were missing from the hand-kept table
    for module in ("`bounds`", "`inbox`", "`prefetch`", "`subscriptions`"):
        assert module in table


def test_the_benchmark_page_names_where_each_section_was_measured() -> None:
    results = json.loads((ROOT / "bench" / "published" / "results.json").read_text())
    page = hooks.benchmarks()
    for source in results["meta"]["sections_from"].values():
        assert f"| {source['commit']} |" in page
    assert f"{results['meta']['cores']} cores" in page
    for name, _ in hooks._report().PLOTS:
        assert (ROOT / "bench" / "published" / name).exists(), name
