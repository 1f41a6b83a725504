#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. scripts/test.sh -q -k client).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
