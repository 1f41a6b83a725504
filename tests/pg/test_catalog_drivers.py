"""The catalog against the metadata queries of pgjdbc 42.5, asyncpg and psycopg 3, and the
catalog functions drivers and BI tools call, compared with a real PostgreSQL 15.

pgjdbc's texts are the ones a PostgreSQL 15 with ``log_statement=all`` logged for
DatabaseMetaData.getTables/getColumns/getPrimaryKeys/getTypeInfo/getSchemas and for a
PreparedStatement's result metadata (the Debian package's driver, 42.5.5); asyncpg's and
psycopg's come from the installed libraries themselves, which is what they send.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import upstream
from test_catalog_psql import DBNAME, SETTINGS, UPSTREAM_DDL, serve_ours

from partialflow.server.pgwire.catalog import Catalog

pytestmark = pytest.mark.skipif(upstream.skip_reason() is not None,
                                reason=upstream.skip_reason() or "")

JDBC_GET_TABLES = """SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, c.relname AS TABLE_NAME,  CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema'  WHEN true THEN CASE  WHEN n.nspname = 'pg_catalog' OR n.nspname = 'information_schema' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TABLE'   WHEN 'v' THEN 'SYSTEM VIEW'   WHEN 'i' THEN 'SYSTEM INDEX'   ELSE NULL   END  WHEN n.nspname = 'pg_toast' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TOAST TABLE'   WHEN 'i' THEN 'SYSTEM TOAST INDEX'   ELSE NULL   END  ELSE CASE c.relkind   WHEN 'r' THEN 'TEMPORARY TABLE'   WHEN 'p' THEN 'TEMPORARY TABLE'   WHEN 'i' THEN 'TEMPORARY INDEX'   WHEN 'S' THEN 'TEMPORARY SEQUENCE'   WHEN 'v' THEN 'TEMPORARY VIEW'   ELSE NULL   END  END  WHEN false THEN CASE c.relkind  WHEN 'r' THEN 'TABLE'  WHEN 'p' THEN 'PARTITIONED TABLE'  WHEN 'i' THEN 'INDEX'  WHEN 'P' then 'PARTITIONED INDEX'  WHEN 'S' THEN 'SEQUENCE'  WHEN 'v' THEN 'VIEW'  WHEN 'c' THEN 'TYPE'  WHEN 'f' THEN 'FOREIGN TABLE'  WHEN 'm' THEN 'MATERIALIZED VIEW'  ELSE NULL  END  ELSE NULL  END  AS TABLE_TYPE, d.description AS REMARKS,  '' as TYPE_CAT, '' as TYPE_SCHEM, '' as TYPE_NAME, '' AS SELF_REFERENCING_COL_NAME, '' AS REF_GENERATION  FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c  LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND d.objsubid = 0  and d.classoid = 'pg_class'::regclass)  WHERE c.relnamespace = n.oid  AND c.relname LIKE '%' AND (false  OR ( c.relkind = 'r' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' )  OR ( c.relkind = 'v' AND n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema' ) )  ORDER BY TABLE_TYPE,TABLE_SCHEM,TABLE_NAME"""  # noqa: E501
JDBC_GET_COLUMNS = """SELECT * FROM (SELECT n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, nullif(a.attidentity, '') as attidentity,nullif(a.attgenerated, '') as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND c.relname LIKE '{table}') c WHERE true  AND attname LIKE '%' ORDER BY nspname,c.relname,attnum"""  # noqa: E501
JDBC_GET_PRIMARY_KEYS = """SELECT        result.TABLE_CAT,        result.TABLE_SCHEM,        result.TABLE_NAME,        result.COLUMN_NAME,        result.KEY_SEQ,        result.PK_NAME FROM      (SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME,   information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid)   JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true  AND ct.relname = '{table}' AND i.indisprimary  ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq"""  # noqa: E501
JDBC_TYPE_INFO = """SELECT t.typname,t.oid FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON (t.typnamespace = n.oid)  WHERE n.nspname  != 'pg_toast' AND  (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))"""  # noqa: E501
JDBC_TYPE_ARRAYS = """SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid   FROM pg_catalog.pg_type   LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  ORDER BY sp.r, pg_type.oid DESC"""  # noqa: E501
JDBC_GET_SCHEMAS = """SELECT nspname AS TABLE_SCHEM, NULL AS TABLE_CATALOG FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY TABLE_SCHEM"""  # noqa: E501
# ResultSetMetaData of a PreparedStatement (nullability, which table a column comes from).
JDBC_RESULT_METADATA = """SELECT c.oid, a.attnum, a.attname, c.relname, n.nspname, a.attnotnull OR (t.typtype = 'd' AND t.typnotnull), a.attidentity != '' OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE '%nextval(%' FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON (c.relnamespace = n.oid) JOIN pg_catalog.pg_attribute a ON (c.oid = a.attrelid) JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid) LEFT JOIN pg_catalog.pg_attrdef d ON (d.adrelid = a.attrelid AND d.adnum = a.attnum) JOIN (SELECT {oid} AS oid , 1 AS attnum UNION ALL SELECT {oid}, 2 UNION ALL SELECT {oid}, 3 UNION ALL SELECT {oid}, 4) vals ON (c.oid = vals.oid AND a.attnum = vals.attnum)"""  # noqa: E501
# asyncpg, around its type introspection.
ASYNCPG_JIT = """SELECT
    current_setting('jit') AS cur,
    set_config('jit', 'off', false) AS new"""
# The functions drivers, psql and BI tools call (deterministic ones: compared as they are).
FUNCTIONS = """SELECT format_type(20, NULL) AS a, format_type(1016, NULL) AS b,
  format_type(701, -1) AS c, format_type(16, NULL) AS d, format_type(25, NULL) AS e,
  current_schema(), current_schemas(true), current_schemas(false),
  has_table_privilege('visit', 'SELECT'), has_schema_privilege('public', 'USAGE'),
  has_database_privilege(current_database(), 'CONNECT'),
  pg_table_is_visible('visit'::regclass), pg_get_userbyid(10),
  obj_description('visit'::regclass, 'pg_class'), current_database(), current_user,
  session_user, current_setting('max_identifier_length'),
  current_setting('standard_conforming_strings'), current_setting('nosuch', true),
  'visit'::regclass::text, 'int8'::regtype::text, to_regtype('text')::oid,
  to_regtype('nosuch'), 20::regtype, pg_catalog.pg_encoding_to_char(6)"""


@pytest.fixture(scope="module")
def ours(spark, tmp_path_factory):
    yield from serve_ours(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def pg():
    import psycopg

    dsn = upstream.upstream().database(DBNAME + "_drv", UPSTREAM_DDL)
    with psycopg.connect(dsn, autocommit=True) as con:
        yield con


def _settings() -> dict[str, str]:
    return {**SETTINGS, "database": DBNAME + "_drv"}


def run_both(ours: Catalog, pg: Any, sql: str, params: list | None = None) -> tuple[list, list]:
    """``sql`` with ``$n`` parameters, as drivers send it, on both servers."""
    mine = ours.run(sql, list(params or []), _settings()).rows
    if params:  # psycopg binds %s on the client side: the same query in its placeholders
        order = [int(n) - 1 for n in re.findall(r"\$(\d+)", sql)]
        text = re.sub(r"\$\d+", "%s", sql.replace("%", "%%"))
        theirs = pg.execute(text, [params[i] for i in order]).fetchall()
    else:
        theirs = pg.execute(sql).fetchall()
    return [_plain(r) for r in mine], [_plain(r) for r in theirs]


def _plain(row: tuple) -> tuple:
    return tuple(v if v is None or isinstance(v, (bool, int, float, list)) else str(v)
                 for v in row)


def test_jdbc_get_tables(ours, pg):
    mine, theirs = run_both(ours, pg, JDBC_GET_TABLES)
    assert mine == theirs
    assert [(r[2], r[3]) for r in mine] == [
        ("notes", "TABLE"), ("pair", "TABLE"), ("visit", "TABLE"),
        ("by_user", "VIEW"), ("per_user", "VIEW")]


@pytest.mark.parametrize("table", ["visit", "pair", "per_user", "by_user", "nosuch"])
def test_jdbc_get_columns(ours, pg, table):
    mine, theirs = run_both(ours, pg, JDBC_GET_COLUMNS.format(table=table))
    assert mine == theirs


@pytest.mark.parametrize("table", ["visit", "pair", "notes"])
def test_jdbc_get_primary_keys(ours, pg, table):
    mine, theirs = run_both(ours, pg, JDBC_GET_PRIMARY_KEYS.format(table=table))
    assert mine == theirs
    assert len(mine) == {"visit": 1, "pair": 2, "notes": 0}[table]


def test_jdbc_get_schemas(ours, pg):
    mine, theirs = run_both(ours, pg, JDBC_GET_SCHEMAS)
    assert mine == theirs == [("information_schema", None), ("pg_catalog", None),
                              ("public", None)]


def test_jdbc_type_info_has_postgres_builtin_oids(ours, pg):
    mine, theirs = run_both(ours, pg, JDBC_TYPE_INFO)
    theirs_by_name = dict(theirs)
    builtin = {name: oid for name, oid in mine if oid < 16384}
    assert builtin and all(theirs_by_name.get(n) == o for n, o in builtin.items())
    for name in ("int8", "float8", "text", "bool", "_int8", "_text"):
        assert name in builtin
    mine, theirs = run_both(ours, pg, JDBC_TYPE_ARRAYS)
    flags = {r[2]: r[0] for r in theirs}
    assert all(flags.get(r[2], r[0]) == r[0] for r in mine if r[3] < 16384)
    assert {r[2]: r[0] for r in mine}["_int8"] is True


def test_jdbc_result_metadata(ours, pg):
    mine_oid = ours.run("SELECT 'visit'::regclass::oid", [], _settings()).rows[0][0]
    their_oid = pg.execute("SELECT 'visit'::regclass::oid").fetchone()[0]
    mine = ours.run(JDBC_RESULT_METADATA.format(oid=mine_oid), [], _settings()).rows
    theirs = pg.execute(JDBC_RESULT_METADATA.format(oid=their_oid)).fetchall()
    assert sorted(r[1:] for r in mine) == sorted(r[1:] for r in theirs)  # (no ORDER BY)
    assert sorted(r[2] for r in mine) == ["dur", "id", "ok", "user"]


@pytest.mark.parametrize("oids", [[1016], [1009, 1022, 1000], [20, 25, 701, 16]])
def test_asyncpg_type_introspection(ours, pg, oids):
    from asyncpg import introspection

    mine, theirs = run_both(ours, pg, introspection.INTRO_LOOKUP_TYPES, [oids])
    assert sorted(mine, key=repr) == sorted(theirs, key=repr)  # (ordered by depth only)
    assert {r[0] for r in mine} >= set(oids)


def test_asyncpg_type_by_name(ours, pg):
    from asyncpg import introspection

    mine, theirs = run_both(ours, pg, introspection.TYPE_BY_NAME, ["int8", "pg_catalog"])
    assert mine == theirs and mine


def test_asyncpg_jit_probe(ours):
    # Our JIT is "off": asyncpg then leaves it alone.
    assert ours.run(ASYNCPG_JIT, [], _settings()).rows == [("off", "off")]


@pytest.mark.parametrize("name", ["int8", "text", "float8", "bool", "bigint",
                                  "double precision", "boolean", "int8[]", "nosuch"])
def test_psycopg_type_info(ours, pg, name):
    from psycopg.types import TypeInfo

    # psycopg's own query; it reaches a server with its %(name)s as $1.
    sql = TypeInfo._get_info_query(pg).as_string(pg).replace("%(name)s", "$1")
    mine, theirs = run_both(ours, pg, sql, [name])
    assert mine == theirs
    assert len(mine) == (0 if name == "nosuch" else 1)


def test_catalog_functions_like_postgres(ours, pg):
    mine, theirs = run_both(ours, pg, FUNCTIONS)
    assert mine == theirs
    # Drivers read columns by name: PostgreSQL's names for unaliased ones.
    names = [c for c, _ in ours.run(FUNCTIONS, [], _settings()).columns]
    assert names == [d.name for d in pg.execute(FUNCTIONS).description]


def test_version_and_backend_pid(ours):
    rows = ours.run("SELECT version(), pg_backend_pid(), current_setting('server_version')",
                    [], {**_settings(), "backend_pid": "4242"}).rows
    assert rows[0][0].startswith("PostgreSQL 15.") and rows[0][1] == 4242
    assert rows[0][2].startswith("15.")


def test_information_schema_like_postgres(ours, pg):
    for sql in [
        "SELECT table_schema, table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'public' ORDER BY table_name",
        "SELECT table_name, column_name, ordinal_position, is_nullable, data_type, udt_name "
        "FROM information_schema.columns WHERE table_schema = 'public' "
        "ORDER BY table_name, ordinal_position",
        "SELECT tc.table_name, tc.constraint_name, tc.constraint_type, kcu.column_name, "
        "kcu.ordinal_position FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu ON tc.constraint_name = "
        "kcu.constraint_name WHERE tc.table_schema = 'public' ORDER BY 1, 5",
        "SELECT table_name FROM information_schema.views WHERE table_schema = 'public' "
        "ORDER BY 1",
    ]:
        mine, theirs = run_both(ours, pg, sql)
        assert mine == theirs, sql


def test_unknown_catalog_relation_is_named(ours):
    from partialflow.server.errors import NotFound

    with pytest.raises(NotFound, match="pg_nosuch"):
        ours.run("SELECT * FROM pg_catalog.pg_nosuch", [], _settings())


def test_handles_catalog_reads_only(ours):
    assert ours.handles("select * from pg_catalog.pg_class")
    assert ours.handles("SELECT version()")
    assert ours.handles("select t.oid from information_schema.tables t")
    assert ours.handles("select 'x'::regclass")
    assert not ours.handles("SELECT id, user FROM visit WHERE id = $1")
    assert not ours.handles("SELECT 1")
    assert not ours.handles("INSERT INTO visit VALUES (1, 'a', 1.0, true)")


# Grafana's PostgreSQL data source (its Go source; tabs made spaces): its configuration
# page's version probe, and the table
# and column lists of its query editor (the search_path constraint as Grafana builds it).
_GRAFANA_SCHEMA = """
     quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )
    """
GRAFANA = [
    """SELECT
                current_setting('server_version_num')::int / 100 AS version,
                extversion AS timescaledb_version
            FROM pg_extension
            WHERE extname = 'timescaledb'""",
    "SELECT current_setting('server_version_num')::int/100 as version",
    f"""SELECT
        CASE WHEN {_GRAFANA_SCHEMA}
        THEN quote_ident(table_name)
        ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
        END AS "table"
        FROM information_schema.tables
        WHERE quote_ident(table_schema) NOT IN ('information_schema',
                                'pg_catalog',
                                '_timescaledb_cache',
                                '_timescaledb_catalog',
                                '_timescaledb_internal',
                                '_timescaledb_config',
                                'timescaledb_information',
                                'timescaledb_experimental')
        ORDER BY CASE WHEN {_GRAFANA_SCHEMA} THEN 0 ELSE 1 END, 1""",
    *[f"""
        SELECT quote_ident(column_name) AS "column", data_type AS "type"
            FROM information_schema.columns
            WHERE
            CASE WHEN array_length(parse_ident('{t}'), 1) = 2
                THEN quote_ident(table_schema) = (parse_ident('{t}'))[1]
                AND quote_ident(table_name) = (parse_ident('{t}'))[2]
                ELSE quote_ident(table_name) = (parse_ident('{t}'))[1]
                AND {_GRAFANA_SCHEMA}
            END
        """ for t in ("visit", "public.per_user")],
]


@pytest.mark.parametrize("sql", GRAFANA)
def test_grafana_editor_queries_like_postgres(ours, pg, sql):
    mine, theirs = run_both(ours, pg, sql)
    if "information_schema.columns" in sql:  # (no ORDER BY)
        mine, theirs = sorted(mine), sorted(theirs)
    assert mine == theirs
    assert mine or "timescaledb" in sql
