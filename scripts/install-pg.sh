#!/usr/bin/env bash
# PostgreSQL 15 server and client (the upstream oracle of tests/pg/test_catalog_*.py, psql and
# pgbench for the driver tests and bench/pgwire.py) and the Debian PostgreSQL JDBC driver
# (tests/pg/test_drivers_jdbc.py runs it on the machine's Java). Skipped when already there;
# a machine without apt (or not root) leaves them out and those tests skip saying why.
set -euo pipefail
need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
command -v psql >/dev/null 2>&1 && command -v pgbench >/dev/null 2>&1 || need+=(postgresql-client-15)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-pg.sh: cannot install ${need[*]} (needs root and apt-get); those tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# The tests start their own PostgreSQL (tests/pg/upstream.py): no default cluster on 5432.
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/partialflow-ci.conf
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
