"""asyncpg against partialflow's PostgreSQL listener: connect, fetch with parameters,
prepared statements, binary results of every column type, type introspection; each read
compared with Spark SQL over the base table at the LSN the session reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import upstream

asyncpg = pytest.importorskip("asyncpg")


@pytest.fixture(scope="module")
def schema(server):
    u = "apgcat_"
    ours, _ = upstream.visit_schema(u)
    with server.client() as c:
        for stmt in ours:
            c.execute(stmt)
        c.insert(f"{u}visit", upstream.VISITS)
    yield u
    with server.client() as c:
        for stmt in (f"DROP VIEW {u}per_user", f"DROP VIEW {u}by_user", f"DROP TABLE {u}visit"):
            c.execute(stmt)


def run(server: Any, fn: Any) -> Any:
    async def go() -> Any:
        con = await asyncpg.connect(host="127.0.0.1", port=upstream.pg_port(server),
                                    user="postgres", database="partialflow", timeout=30)
        try:
            return await fn(con)
        finally:
            await con.close()

    return asyncio.run(asyncio.wait_for(go(), 120))


def spark_rows(server: Any, sql: str, lsn: int) -> list[tuple]:
    with server.client() as c:
        return sorted(c.query(sql, as_of=lsn).rows, key=repr)


def test_fetch_with_parameter_matches_spark(server, schema):
    u = schema

    async def fn(con):
        rows = await con.fetch(f"SELECT id, user, dur, ok FROM {u}by_user WHERE user = $1",
                               "ann")
        return [tuple(r) for r in rows], int(await con.fetchval("SHOW partialflow.lsn"))

    rows, lsn = run(server, fn)
    assert sorted(rows, key=repr) == spark_rows(
        server, f"SELECT id, user, dur, ok FROM {u}visit WHERE user = 'ann'", lsn)
    assert len(rows) == 2
    # Binary results decode to the Python types of each column type.
    assert {type(v) for r in rows for v in r[:3]} == {int, str, float}


def test_prepared_statement_reused_with_typed_parameters(server, schema):
    u = schema

    async def fn(con):
        st = await con.prepare(f"SELECT id, user, dur, ok FROM {u}by_user WHERE user = $1")
        params = [p.name for p in st.get_parameters()]
        cols = [(a.name, a.type.name) for a in st.get_attributes()]
        out = {}
        for who in ("ann", "bob", "cy", "nobody", "ann"):
            out[who] = sorted((tuple(r) for r in await st.fetch(who)), key=repr)
        return params, cols, out, int(await con.fetchval("SHOW partialflow.lsn"))

    params, cols, out, lsn = run(server, fn)
    assert params == ["text"]  # the key column's type, as PostgreSQL infers it
    assert cols == [("id", "int8"), ("user", "text"), ("dur", "float8"), ("ok", "bool")]
    for who, rows in out.items():
        assert rows == spark_rows(
            server, f"SELECT id, user, dur, ok FROM {u}visit WHERE user = '{who}'", lsn)


def test_aggregate_view_types(server, schema):
    u = schema

    async def fn(con):
        st = await con.prepare(f"SELECT user, n, total FROM {u}per_user")
        rows = [tuple(r) for r in await st.fetch()]
        return [a.type.name for a in st.get_attributes()], rows, int(
            await con.fetchval("SHOW partialflow.lsn"))

    types, rows, lsn = run(server, fn)
    assert types == ["text", "int8", "float8"]
    assert sorted(rows, key=repr) == spark_rows(
        server, f"SELECT user, COUNT(*), SUM(dur) FROM {u}visit GROUP BY user", lsn)


def test_type_introspection_through_the_listener(server, schema):
    async def fn(con):
        # set_type_codec looks the type up by name and introspects it: asyncpg's catalog
        # queries (TYPE_BY_NAME, then its recursive pg_type/pg_range CTE) answered here.
        await con.set_type_codec("int8", schema="pg_catalog", encoder=str,
                                 decoder=lambda s: f"int8:{s}", format="text")
        v = await con.fetchval(f"SELECT id FROM {schema}by_user WHERE user = $1", "bob")
        typ = await con.fetchrow("SELECT typname, typarray FROM pg_catalog.pg_type "
                                 "WHERE oid = $1", 20)
        return v, tuple(typ)

    v, typ = run(server, fn)
    assert v == "int8:2"
    assert typ == ("int8", 1016)
