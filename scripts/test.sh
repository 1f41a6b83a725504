#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. scripts/test.sh -q -k client).
#
# One process by default: on 2 cores the suite is CPU-bound, and in a clean-clone CI run
# two pytest-xdist workers took 1,317 s against ~1,600 s for one process but put two heavy
# tests (a Spark cluster and the stress test) on the same cores, and a read deadline in the
# stress test ran out. PARTIALFLOW_TEST_WORKERS=N runs N workers (work stealing; each has
# its own session Spark and shared server, see tests/conftest.py); -n given here wins.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

explicit=0
for arg in "$@"; do
    case "$arg" in
        -n | -n* | --numprocesses* | --dist* | no:xdist | -pno:xdist) explicit=1 ;;
    esac
done
workers="${PARTIALFLOW_TEST_WORKERS:-0}"
if [ "$explicit" = 0 ] && [ "$workers" != 0 ]; then
    set -- -n "$workers" --dist worksteal "$@"
fi
exec .venv/bin/python -m pytest "$@"
