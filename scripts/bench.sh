#!/usr/bin/env bash
# The benchmark harness from a fresh clone: make .venv as docs/getting-started.md's set-up does
# (scripts/bootstrap.sh), add the 'bench' extra (matplotlib) if it is missing, then run
# bench/run.py with the given arguments (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if ! .venv/bin/python -c "import matplotlib" 2>/dev/null; then
    echo "bench: installing the 'bench' extra (matplotlib) into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,bench]"
fi
exec .venv/bin/python bench/run.py "$@"
