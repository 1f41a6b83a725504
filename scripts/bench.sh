#!/usr/bin/env bash
# The benchmark harness from a fresh clone: make .venv as docs/getting-started.md's set-up does
# (scripts/bootstrap.sh), add the 'bench' extra (matplotlib, Pathway) if it is missing, then run
# bench/run.py with the given arguments (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if ! .venv/bin/python -c "
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in ('matplotlib', 'pathway')))"; then
    echo "bench: installing the 'bench' extra (matplotlib, Pathway) into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,bench]"
fi
exec .venv/bin/python bench/run.py "$@"
