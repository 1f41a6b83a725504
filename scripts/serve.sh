#!/usr/bin/env bash
# Run a server with the embedded defaults (local Spark, data in ./data). Extra arguments
# go to `partialflow serve`, e.g. scripts/serve.sh --port 0 --memory-limit 1GB.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/partialflow serve --data ./data "$@"
