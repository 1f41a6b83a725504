#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. scripts/test.sh -q -k client).
#
# The whole suite (no path under tests/ given) runs in two worker processes (pytest-xdist,
# work stealing): most of its time is spent waiting on JVMs, servers, subprocesses and
# fixed-length runs rather than on a core, so two processes on two cores finish sooner.
# Each worker has its own session Spark and shared server (tests/conftest.py). A run of
# chosen files or directories stays in one process (one Spark). PARTIALFLOW_TEST_WORKERS=N
# sets the number either way (0: one process); -n or -p no:xdist given here wins.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

targeted=0
explicit=0
for arg in "$@"; do
    case "$arg" in
        tests | tests/*) targeted=1 ;;
        -n | -n* | --numprocesses* | --dist* | no:xdist | -pno:xdist) explicit=1 ;;
    esac
done
workers="${PARTIALFLOW_TEST_WORKERS:-}"
if [ -z "$workers" ]; then
    workers=2
    [ "$targeted" = 1 ] && workers=0
fi
if [ "$explicit" = 0 ] && [ "$workers" != 0 ]; then
    set -- -n "$workers" --dist worksteal "$@"
fi
exec .venv/bin/python -m pytest "$@"
