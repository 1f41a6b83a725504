"""Helpers of the tests/pg tests: client tools, and the independent answer (Spark SQL over
the base tables at the LSN the PostgreSQL answer reported)."""

from __future__ import annotations

import math
import shutil
from typing import Any

import pytest


def need(tool: str) -> str:
    """The path of a PostgreSQL client tool; CI installs postgresql-client (.ci/run)."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed (apt-get install postgresql-client-15)")
    return path


def canon(rows: Any) -> list[tuple]:
    """Rows sorted, floats rounded (Spark and the dataflow may sum in another order)."""
    def one(v: Any) -> Any:
        if isinstance(v, float) and math.isfinite(v):
            return round(v, 9)
        return v
    return sorted((tuple(one(v) for v in r) for r in rows), key=repr)


def spark_rows(server: Any, sql: str, lsn: int) -> list[tuple]:
    """Spark's answer to ``sql`` over the base tables at ``lsn`` (gRPC query as_of)."""
    with server.client() as client:
        return canon(client.query(sql, as_of=lsn).rows)


def lsn_of(conn: Any) -> int:
    """The LSN of the session's last answer (SHOW partialflow.lsn), on a DB-API connection."""
    cur = conn.cursor()
    cur.execute("SHOW partialflow.lsn")
    return int(cur.fetchone()[0])
