#!/usr/bin/env bash
# Make .venv (python3 -m venv) if it is missing and install partialflow editable with its
# test extras. The install is skipped when neither pyproject.toml nor the checkout's path
# changed since the last one (a hash stored in .venv), so repeated runs cost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.partialflow-install"

if [ ! -x "$VENV/bin/python" ]; then
    echo "bootstrap: creating $VENV" >&2
    python3 -m venv "$VENV"
fi

# The path is part of the hash: an editable install points at one checkout.
want="$( (cat pyproject.toml; pwd) | sha256sum | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "bootstrap: installing partialflow[test,docs] into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,docs]"
    echo "$want" > "$STAMP"
fi
