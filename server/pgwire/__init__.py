"""The PostgreSQL wire-protocol front end: psql, drivers and pgbench over the same engine as
gRPC (see docs/postgres.md). ``PgListener`` is what the server starts."""

from partialflow.server.pgwire.listener import PgListener

__all__ = ["PgListener"]
