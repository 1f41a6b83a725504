"""The catalog without a server: what Parse/Describe report for catalog statements (the
parameter and result types PostgreSQL 15 reports for the same statements), errors, and
which statements are routed to it. The answers themselves are compared with a real
PostgreSQL in test_catalog_psql.py and test_catalog_drivers.py."""

from __future__ import annotations

import pytest

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.pgwire.catalog import SERVER_VERSION, Catalog


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(None)


@pytest.mark.parametrize("sql,params", [
    # asyncpg's introspection: $1::oid[] is an oid[] (1028), sent in binary as such.
    ("SELECT t.oid FROM pg_catalog.pg_type t WHERE t.oid = any($1::oid[])", [1028]),
    # psycopg's TypeInfo: to_regtype($1) takes text.
    ("SELECT typname FROM pg_type t WHERE t.oid = to_regtype($1)", [25]),
    # compared with an OID column: an oid (26), as PostgreSQL infers it.
    ("SELECT typname FROM pg_catalog.pg_type WHERE oid = $1", [26]),
    ("SELECT set_config('jit', $1, false)", [25]),
])
def test_parameter_types_as_postgres_infers_them(catalog, sql, params):
    assert catalog.describe(sql, [0] * len(params))[0] == params


def test_a_type_the_client_gave_wins(catalog):
    assert catalog.describe("SELECT typname FROM pg_type WHERE oid = $1", [20])[0] == [20]


def test_result_columns_named_and_typed_as_postgres_does(catalog):
    _, cols = catalog.describe(
        "SELECT c.oid, c.relname, c.relkind, c.relhasindex, a.attnum, "
        "pg_catalog.format_type(a.atttypid, a.atttypmod), count(*), 1, "
        "c.oid::pg_catalog.regclass, 'x'::text, current_schemas(true) "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
        "GROUP BY 1, 2, 3, 4, 5, 6", [])
    assert cols == [("oid", 26), ("relname", 25), ("relkind", 25), ("relhasindex", 16),
                    ("attnum", 21), ("format_type", 25), ("count", 20), ("?column?", 23),
                    ("oid", 25), ("text", 25), ("current_schemas", 1009)]


def test_version_is_postgres_15(catalog):
    (row,) = catalog.run("SELECT version(), current_setting('server_version_num')", [], {}).rows
    assert row[0].startswith(f"PostgreSQL {SERVER_VERSION} ") and row[1].startswith("15")
    assert SERVER_VERSION.startswith("15.")


def test_session_settings_are_read(catalog):
    rows = catalog.run("SELECT current_user, current_database(), current_setting('TimeZone'), "
                       "pg_backend_pid()", [],
                       {"user": "alice", "database": "shop", "TimeZone": "Europe/Paris",
                        "backend_pid": "77"}).rows
    assert rows == [("alice", "shop", "Europe/Paris", 77)]


@pytest.mark.parametrize("sql,error,match", [
    ("SELECT * FROM pg_catalog.pg_nosuch", NotFound, "pg_nosuch"),
    ("SELECT nosuch FROM pg_catalog.pg_class", InvalidArgument, "nosuch"),
    ("SELECT 'nosuch'::regclass", NotFound, "nosuch"),
    ("SELECT current_setting('nosuch')", NotFound, "nosuch"),
    ("SELECT * FROM pg_class WHERE", InvalidArgument, "parse"),
    ("SELECT 1 FROM pg_class; SELECT 2 FROM pg_class", InvalidArgument, "one statement"),
])
def test_bad_catalog_queries_are_refused_naming_the_problem(catalog, sql, error, match):
    with pytest.raises(error, match=match):
        catalog.run(sql, [], {})


def test_missing_parameters_are_refused(catalog):
    with pytest.raises(InvalidArgument, match="parameter"):
        catalog.run("SELECT typname FROM pg_type WHERE oid = $1", [], {})


@pytest.mark.parametrize("sql,handled", [
    ("SELECT * FROM pg_catalog.pg_class", True),
    ("select typname from pg_type where oid = $1", True),
    ("SELECT version()", True),
    ("SELECT current_setting('jit')", True),
    ("SELECT table_name FROM information_schema.tables", True),
    ("SELECT 'visit'::regclass", True),
    ("SELECT current_user", True),
    ("SELECT id, user FROM visit WHERE id = $1", False),
    ("SELECT 1", False),
    ("INSERT INTO visit VALUES (1, 'a')", False),
    ("SHOW partialflow.lsn", False),
])
def test_only_catalog_statements_are_routed_here(catalog, sql, handled):
    assert catalog.handles(sql) is handled
