"""psycopg2 (the simple query protocol, parameters interpolated on the client) against
partialflow's PostgreSQL listener: the metadata an application or ORM reads (information
schema, pg_catalog, server version, cursor.description) is what a real PostgreSQL 15 gives for
the same schema; a view read answers what Spark answers at the LSN the session reports."""

from __future__ import annotations

import pytest
import upstream

psycopg2 = pytest.importorskip("psycopg2")

pytestmark = pytest.mark.skipif(upstream.skip_reason() is not None,
                                reason=upstream.skip_reason() or "")

METADATA = [
    ("SELECT table_name, table_type FROM information_schema.tables "
     "WHERE table_schema = 'public' AND table_name LIKE %s ORDER BY table_name", ("pg2cat_%",)),
    ("SELECT column_name, data_type, is_nullable, ordinal_position "
     "FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
     ("pg2cat_visit",)),
    ("SELECT kcu.column_name FROM information_schema.table_constraints tc "
     "JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name "
     "WHERE tc.table_name = %s AND tc.constraint_type = 'PRIMARY KEY'", ("pg2cat_visit",)),
    ("SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
     "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
     "WHERE c.relname = %s AND a.attnum > 0 ORDER BY a.attnum", ("pg2cat_per_user",)),
    ("SELECT c.relname, c.relkind FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
     "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE %s ORDER BY 1",
     ("pg2cat_%",)),
    ("SELECT current_schema(), current_setting('server_version_num')::int >= 150000", None),
]


@pytest.fixture(scope="module")
def connections(server):
    u = "pg2cat_"
    ours, theirs = upstream.visit_schema(u)
    with server.client() as c:
        for stmt in ours:
            c.execute(stmt)
        c.insert(f"{u}visit", upstream.VISITS)
    dsn = upstream.upstream().database("drv_psycopg2", theirs)
    mine = psycopg2.connect(host="127.0.0.1", port=upstream.pg_port(server), user="postgres",
                            dbname="partialflow")
    mine.autocommit = True
    up = psycopg2.connect(dsn)
    up.autocommit = True
    yield u, mine, up
    mine.close()
    up.close()
    with server.client() as c:
        for stmt in (f"DROP VIEW {u}per_user", f"DROP VIEW {u}by_user", f"DROP TABLE {u}visit"):
            c.execute(stmt)


@pytest.mark.parametrize("sql,params", METADATA)
def test_metadata_queries_like_postgres(connections, sql, params):
    _, mine, up = connections
    results = []
    for con in (mine, up):
        with con.cursor() as cur:
            cur.execute(sql, params)
            results.append((cur.fetchall(), [d.name for d in cur.description]))
    assert results[0] == results[1]
    assert results[0][0]


def test_server_version_and_description(server, connections):
    u, mine, _ = connections
    assert 150000 <= mine.server_version < 160000
    with mine.cursor() as cur:
        cur.execute(f"SELECT id, user, dur, ok FROM {u}by_user WHERE user = %s", ("ann",))
        rows = sorted(cur.fetchall())
        # psycopg2 converts by the type OIDs in the row description: int8, text, float8, bool.
        assert [d.type_code for d in cur.description] == [20, 25, 701, 16]
        cur.execute("SHOW partialflow.lsn")
        lsn = int(cur.fetchone()[0])
    with server.client() as c:
        expected = sorted(c.query(f"SELECT id, user, dur, ok FROM {u}visit WHERE user = 'ann'",
                                  as_of=lsn).rows)
    assert rows == expected and len(rows) == 2

