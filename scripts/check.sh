#!/usr/bin/env bash
# Lint, types, layering and the docs: ruff check, mypy (server/, operators/, client/, testing/,
# proto/values.py), lint-imports (the import-linter contracts) and mkdocs build --strict
# (a broken link or a missing page in docs/ fails). Configuration: pyproject.toml, mkdocs.yml.
# Each step runs even if an earlier one failed; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || exit 1

# The package is partialflow.* but its directories are server/, operators/, ... (package-dir);
# mypy and import-linter read it through this link tree (build/ is git-ignored).
TREE=build/typecheck/partialflow
mkdir -p "$TREE"
for d in server operators proto client testing; do
    ln -sfn "../../../$d" "$TREE/$d"
done

status=0
echo "== ruff check" >&2
.venv/bin/ruff check . || status=1
echo "== mypy" >&2
.venv/bin/mypy || status=1
echo "== lint-imports" >&2
PYTHONPATH=build/typecheck .venv/bin/lint-imports || status=1
echo "== mkdocs build --strict" >&2
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir build/site || status=1
exit $status
