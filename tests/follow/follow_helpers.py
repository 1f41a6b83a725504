"""Helpers of tests/follow: PostgreSQL's answers (the oracle), ours, and waiting for the
follower. (A module of its own: ``conftest`` is a name every test directory has.)"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pg"))

def pg_rows(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    """PostgreSQL's answer, rows sorted (the oracle)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        return sorted(tuple(r) for r in con.execute(sql, params).fetchall())


def pg_exec(dsn: str, *stmts: str) -> str:
    """Run ``stmts`` upstream in ONE transaction; returns the WAL position after it (what
    an application hands to min_upstream_lsn). The test server commits asynchronously
    (synchronous_commit=off), so pg_current_wal_lsn(), the position written so far, may
    not have reached the commit yet: the insert position has."""
    import psycopg

    with psycopg.connect(dsn) as con:
        for s in stmts:
            con.execute(s)
        con.commit()
        return str(con.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])


def our_rows(engine: Any, sql: str, as_of: int | None = None) -> list[tuple]:
    """Spark's answer over our base tables (at ``as_of``), rows sorted."""
    return sorted(tuple(r) for r in engine.query(sql, as_of=as_of).rows)


def wait_streaming(follower: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while follower.stats()["state"] != "streaming":
        assert time.monotonic() < deadline, f"follower not streaming: {follower.stats()}"
        time.sleep(0.1)


def catch_up(follower: Any, lsn_text: str, timeout: float = 30.0) -> int:
    """Wait until the upstream position ``lsn_text`` is applied; our LSN to read at."""
    from partialflow.server.follow import parse_lsn

    try:
        return int(follower.wait_for(parse_lsn(lsn_text), timeout))
    except Exception as err:
        import psycopg

        with psycopg.connect(follower.url, autocommit=True) as con:
            rep = con.execute("SELECT application_name, state, sent_lsn, write_lsn, flush_lsn "
                              "FROM pg_stat_replication").fetchall()
            pos = con.execute("SELECT pg_current_wal_lsn(), pg_current_wal_insert_lsn(), "
                              "pg_current_wal_flush_lsn()").fetchone()
        raise AssertionError(f"{err}; walsenders {rep}; positions {pos}; "
                             f"{follower.stats()}") from None
