"""The README's promises about itself: short, and its test command is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"^(scripts/test\.sh[^#\n]*?)\s*#", readme, re.M)
    assert f"exec {command}" in (ROOT / ".ci" / "run").read_text()


def test_no_page_points_outside_the_repository() -> None:
    """No link to a document the repository does not hold (the old README pointed to a
    DESIGN.md kept elsewhere), and no internal ticket numbers."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "DESIGN.md" not in text, page
        assert not re.search(r"\b[Ii]ssue \d+", text), page
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if re.match(r"[a-z]+://", target):
                continue
            # The plots are added to the site from bench/published/ (scripts/mkdocs_hooks.py).
            plot = ROOT / "bench" / "published" / target.removeprefix("benchmarks/")
            exists = (page.parent / target).exists() or plot.exists()
            assert exists, f"{page.name}: link to {target}"
