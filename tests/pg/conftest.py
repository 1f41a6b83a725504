"""tests/pg: the PostgreSQL front end with real clients (psql, pgbench, psycopg 3,
psycopg2) against the shared in-process server's listener (tests/conftest.py ``server``,
started with --port 0, so its PostgreSQL listener is on a free port too)."""

from __future__ import annotations

import os

import pytest

from partialflow.server.app.main import pg_port_of


@pytest.fixture(scope="session")
def pg_port(server) -> int:
    port = pg_port_of(server.server)
    assert port is not None, "the shared server has no PostgreSQL listener"
    return port


@pytest.fixture(scope="session")
def pg_env(pg_port) -> dict[str, str]:
    """An environment for psql and pgbench: PGHOST/PGPORT/PGUSER point at the listener."""
    return dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(pg_port), PGUSER="tester",
                PGDATABASE="partialflow", PGCONNECT_TIMEOUT="10")


@pytest.fixture(scope="session")
def pg_dsn(pg_port) -> str:
    return f"host=127.0.0.1 port={pg_port} user=tester dbname=partialflow connect_timeout=10"

