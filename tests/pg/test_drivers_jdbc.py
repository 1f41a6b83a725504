"""pgjdbc (the Debian package's driver, 42.5) on the machine's Java, against partialflow's
PostgreSQL listener: DatabaseMetaData (getTables, getColumns, getPrimaryKeys, getTypeInfo,
getSchemas) answers what a real PostgreSQL 15 answers for the same schema; PreparedStatement
lookups of a view (server-side prepared after five runs) answer what Spark answers at the LSN
the session reports; Metabase's connection check (SELECT 1) passes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import upstream

JAR = Path("/usr/share/java/postgresql.jar")
PROBE = Path(__file__).parent / "jdbc" / "Probe.java"

pytestmark = pytest.mark.skipif(
    upstream.skip_reason() is not None or not JAR.exists() or shutil.which("java") is None,
    reason=upstream.skip_reason() or "no JDBC driver (libpostgresql-jdbc-java) or no java")


def probe(url: str, prefix: str, *extra: str) -> list[list[str]]:
    env = {**os.environ, "JAVA_TOOL_OPTIONS": "-Xss4m"}
    r = subprocess.run(["java", "-cp", str(JAR), str(PROBE), url, prefix, *extra],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return [line.split("\t") for line in r.stdout.splitlines()]


@pytest.fixture(scope="module")
def answers(server):
    u = "jdbccat_"
    ours, theirs = upstream.visit_schema(u)
    with server.client() as c:
        for stmt in ours:
            c.execute(stmt)
        c.insert(f"{u}visit", upstream.VISITS)
    up = upstream.upstream()
    up.database("drv_jdbc", theirs)
    try:
        mine = probe(f"jdbc:postgresql://127.0.0.1:{upstream.pg_port(server)}/partialflow", u)
        theirs_out = probe(f"jdbc:postgresql://{up.host}:{up.port}/drv_jdbc", u, "--postgres")
        yield u, mine, theirs_out
    finally:
        with server.client() as c:
            for stmt in (f"DROP VIEW {u}per_user", f"DROP VIEW {u}by_user",
                         f"DROP TABLE {u}visit"):
                c.execute(stmt)


@pytest.mark.parametrize("kind", ["version", "table", "column", "pk", "typeinfo", "schema",
                                  "select1", "rsmeta"])
def test_metadata_like_postgres(answers, kind):
    _, mine, theirs = answers
    got = [line for line in mine if line[0] == kind]
    assert got == [line for line in theirs if line[0] == kind]
    assert got, kind


def test_prepared_lookups_match_spark(server, answers):
    u, mine, _ = answers
    lsn = int(next(line[1] for line in mine if line[0] == "lsn"))
    rows = sorted(tuple(line[1:]) for line in mine if line[0] == "row")
    with server.client() as c:
        expected = []
        for who in ("ann", "bob", "nobody"):
            res = c.query(f"SELECT id, user, dur, ok FROM {u}visit WHERE user = '{who}'",
                          as_of=lsn)
            expected += [(who, str(i), name, "NULL" if d is None else str(d),
                          "NULL" if ok is None else str(ok).lower())
                         for i, name, d, ok in res.rows]
    assert rows == sorted(expected) and len(rows) == 3
