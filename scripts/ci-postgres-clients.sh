#!/usr/bin/env bash
# tests/pg drive the real PostgreSQL clients: psql (Debian's postgresql-client-15) and
# pgbench (shipped in postgresql-15 on Debian, not in the client package). Installed only
# when missing, so a machine that has them (or no apt) skips this.
set -euo pipefail
if command -v psql >/dev/null && command -v pgbench >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "ci-postgres-clients: psql/pgbench missing and no apt-get; tests/pg will fail" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "ci-postgres-clients: installing postgresql-client-15 and postgresql-15 (pgbench)" >&2
$SUDO apt-get update -qq
# No cluster is created or started: only the client tools are used.
$SUDO mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/partialflow-ci.conf >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    postgresql-client-15 postgresql-15
