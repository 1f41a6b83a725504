"""psql 15 against partialflow's PostgreSQL listener: what \\d, \\dt, \\dv and \\d VIEW print
is what a real PostgreSQL 15 prints for the same schema, character for character; a view
read through psql answers what Spark answers at the LSN the session reports."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import upstream

pytestmark = pytest.mark.skipif(
    upstream.skip_reason() is not None or shutil.which("psql") is None,
    reason=upstream.skip_reason() or "psql is not installed")


@pytest.fixture(scope="module")
def schema(server):
    u = "psqlcat_"
    ours, theirs = upstream.visit_schema(u)
    with server.client() as c:
        for stmt in ours:
            c.execute(stmt)
        c.insert(f"{u}visit", upstream.VISITS)
    dsn = upstream.upstream().database("drv_psql", theirs)
    yield u, dsn
    with server.client() as c:
        for stmt in (f"DROP VIEW {u}per_user", f"DROP VIEW {u}by_user", f"DROP TABLE {u}visit"):
            c.execute(stmt)


def psql(args: list[str], *command: str) -> str:
    cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", *args]
    for c in command:
        cmd += ["-c", c]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "10"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def ours_args(server) -> list[str]:
    return ["-h", "127.0.0.1", "-p", str(upstream.pg_port(server)), "-U", "postgres",
            "-d", "partialflow"]


@pytest.mark.parametrize("command", [r"\d {u}visit", r"\d {u}by_user", r"\d {u}per_user",
                                     r"\dt {u}*", r"\dv {u}*", r"\d {u}*", r"\d {u}visit_pkey",
                                     r"\dn"])
def test_psql_describe_prints_what_postgres_prints(server, schema, command):
    u, dsn = schema
    mine = psql(ours_args(server), command.format(u=u))
    theirs = psql([dsn], command.format(u=u))
    assert mine == theirs
    assert u in mine or command == r"\dn"


def test_psql_reads_a_view_as_spark_answers_at_its_lsn(server, schema):
    u, _ = schema
    out = psql([*ours_args(server), "-A", "-t", "-F", "|"],
               f"SELECT id, user, dur, ok FROM {u}by_user WHERE user = 'ann'",
               "SHOW partialflow.lsn")
    *rows, lsn = out.strip().splitlines()
    with server.client() as c:
        spark = c.query(f"SELECT id, user, dur, ok FROM {u}visit WHERE user = 'ann'",
                        as_of=int(lsn))
    expected = sorted("|".join(_text(v) for v in r) for r in spark.rows)
    assert sorted(rows) == expected and len(rows) == 2


def _text(v: object) -> str:
    """A value as psql prints it (PostgreSQL's text output: 4, not 4.0)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "t" if v else "f"
    s = repr(v)
    return s[:-2] if isinstance(v, float) and s.endswith(".0") else s if not isinstance(
        v, str) else v


def test_grafana_and_metabase_connection_checks(server):
    # Grafana's PostgreSQL data source pings with pgx (an empty statement); Metabase's
    # can-connect? runs SELECT 1 over JDBC (tests/pg/test_drivers_jdbc.py runs it there).
    assert psql([*ours_args(server), "-A", "-t"], "-- ping", "SELECT 1").strip() == "1"
