"""The catalog against the queries psql 15 sends for \\d, \\dt, \\dv, \\d NAME, \\l and \\dn,
compared row for row with what a real PostgreSQL 15 answers for the same schema.

The query texts are psql 15's, as a PostgreSQL 15 started with ``log_statement=all`` logged
them (psql -c '\\d visit' and so on); ``{pattern}`` and ``{oid}`` are where psql puts the
name typed and the OID its first query found. OIDs differ between the two servers by
design, so the comparison leaves the OID columns out and feeds each server its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import upstream

from partialflow.server.pgwire.catalog import Catalog

pytestmark = pytest.mark.skipif(upstream.skip_reason() is not None,
                                reason=upstream.skip_reason() or "")

OURS_DDL = [
    "CREATE TABLE visit (id BIGINT PRIMARY KEY, user TEXT, dur DOUBLE, ok BOOLEAN)",
    "CREATE TABLE notes (a BIGINT, b TEXT)",
    "CREATE TABLE pair (x BIGINT PRIMARY KEY, y BIGINT PRIMARY KEY, label TEXT)",
    "CREATE VIEW per_user AS SELECT user, COUNT(*) AS n, SUM(dur) AS total, AVG(dur) AS a "
    "FROM visit GROUP BY user",
    "CREATE VIEW by_user AS SELECT id, user, dur FROM visit WHERE user = ?",
]
# The same schema in PostgreSQL (a view parameter is a plain column there).
UPSTREAM_DDL = [
    'CREATE TABLE visit (id bigint PRIMARY KEY, "user" text, dur double precision, ok boolean)',
    "CREATE TABLE notes (a bigint, b text)",
    "CREATE TABLE pair (x bigint, y bigint, label text, PRIMARY KEY (x, y))",
    'CREATE VIEW per_user AS SELECT "user", count(*) AS n, sum(dur) AS total, avg(dur) AS a '
    'FROM visit GROUP BY "user"',
    'CREATE VIEW by_user AS SELECT id, "user", dur FROM visit',
]
DBNAME = "pfcat"

LIST_RELATIONS = """SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ({kinds})
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""  # noqa: E501
# \dv has no pg_am join.
LIST_VIEWS = """SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('v','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""  # noqa: E501
DESCRIBE_FIND = """SELECT c.oid,
  n.nspname,
  c.relname
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.~) '^({pattern})$' COLLATE pg_catalog.default
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 2, 3;"""
DESCRIBE_CLASS = """SELECT c.relchecks, c.relkind, c.relhasindex, c.relhasrules, c.relhastriggers, c.relrowsecurity, c.relforcerowsecurity, false AS relhasoids, c.relispartition, '', c.reltablespace, CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END, c.relpersistence, c.relreplident, am.amname
FROM pg_catalog.pg_class c
 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
LEFT JOIN pg_catalog.pg_am am ON (c.relam = am.oid)
WHERE c.oid = '{oid}';"""  # noqa: E501
DESCRIBE_COLUMNS = """SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull,
  (SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
   WHERE c.oid = a.attcollation AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
  a.attidentity,
  a.attgenerated
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '{oid}' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;"""  # noqa: E501
DESCRIBE_INDEXES = """SELECT c2.relname, i.indisprimary, i.indisunique, i.indisclustered, i.indisvalid, pg_catalog.pg_get_indexdef(i.indexrelid, 0, true),
  pg_catalog.pg_get_constraintdef(con.oid, true), contype, condeferrable, condeferred, i.indisreplident, c2.reltablespace
FROM pg_catalog.pg_class c, pg_catalog.pg_class c2, pg_catalog.pg_index i
  LEFT JOIN pg_catalog.pg_constraint con ON (conrelid = i.indrelid AND conindid = i.indexrelid AND contype IN ('p','u','x'))
WHERE c.oid = '{oid}' AND c.oid = i.indrelid AND i.indexrelid = c2.oid
ORDER BY i.indisprimary DESC, c2.relname;"""  # noqa: E501
DESCRIBE_POLICIES = """SELECT pol.polname, pol.polpermissive,
  CASE WHEN pol.polroles = '{{0}}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,
  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),
  CASE pol.polcmd
    WHEN 'r' THEN 'SELECT'
    WHEN 'a' THEN 'INSERT'
    WHEN 'w' THEN 'UPDATE'
    WHEN 'd' THEN 'DELETE'
    END AS cmd
FROM pg_catalog.pg_policy pol
WHERE pol.polrelid = '{oid}' ORDER BY 1;"""  # noqa: E501
DESCRIBE_STATISTICS = """SELECT oid, stxrelid::pg_catalog.regclass, stxnamespace::pg_catalog.regnamespace::pg_catalog.text AS nsp, stxname,
pg_catalog.pg_get_statisticsobjdef_columns(oid) AS columns,
  'd' = any(stxkind) AS ndist_enabled,
  'f' = any(stxkind) AS deps_enabled,
  'm' = any(stxkind) AS mcv_enabled,
stxstattarget
FROM pg_catalog.pg_statistic_ext
WHERE stxrelid = '{oid}'
ORDER BY nsp, stxname;"""  # noqa: E501
DESCRIBE_PUBLICATIONS = """SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
     JOIN pg_catalog.pg_publication_namespace pn ON p.oid = pn.pnpubid
     JOIN pg_catalog.pg_class pc ON pc.relnamespace = pn.pnnspid
WHERE pc.oid ='{oid}' and pg_catalog.pg_relation_is_publishable('{oid}')
UNION
SELECT pubname
     , pg_get_expr(pr.prqual, c.oid)
     , (CASE WHEN pr.prattrs IS NOT NULL THEN
         (SELECT string_agg(attname, ', ')
           FROM pg_catalog.generate_series(0, pg_catalog.array_upper(pr.prattrs::pg_catalog.int2[], 1)) s,
                pg_catalog.pg_attribute
          WHERE attrelid = pr.prrelid AND attnum = prattrs[s])
        ELSE NULL END) FROM pg_catalog.pg_publication p
     JOIN pg_catalog.pg_publication_rel pr ON p.oid = pr.prpubid
     JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid
WHERE pr.prrelid = '{oid}'
UNION
SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
WHERE p.puballtables AND pg_catalog.pg_relation_is_publishable('{oid}')
ORDER BY 1;"""  # noqa: E501
DESCRIBE_INHERITS = """SELECT c.oid::pg_catalog.regclass
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhparent AND i.inhrelid = '{oid}'
  AND c.relkind != 'p' AND c.relkind != 'I'
ORDER BY inhseqno;"""
DESCRIBE_PARTITIONS = """SELECT c.oid::pg_catalog.regclass, c.relkind, inhdetachpending, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhrelid AND i.inhparent = '{oid}'
ORDER BY pg_catalog.pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.oid::pg_catalog.regclass::pg_catalog.text;"""  # noqa: E501
LIST_DATABASES = """SELECT d.datname as "Name",
       pg_catalog.pg_get_userbyid(d.datdba) as "Owner",
       pg_catalog.pg_encoding_to_char(d.encoding) as "Encoding",
       d.datcollate as "Collate",
       d.datctype as "Ctype",
       d.daticulocale as "ICU Locale",
       CASE d.datlocprovider WHEN 'c' THEN 'libc' WHEN 'i' THEN 'icu' END AS "Locale Provider",
       pg_catalog.array_to_string(d.datacl, E'\\n') AS "Access privileges"
FROM pg_catalog.pg_database d
ORDER BY 1;"""
LIST_SCHEMAS = """SELECT n.nspname AS "Name",
  pg_catalog.pg_get_userbyid(n.nspowner) AS "Owner"
FROM pg_catalog.pg_namespace n
WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY 1;"""
# What \d NAME runs once it has the OID, for a table (a view stops after the columns).
DESCRIBE_TABLE = [DESCRIBE_CLASS, DESCRIBE_COLUMNS, DESCRIBE_INDEXES, DESCRIBE_POLICIES,
                  DESCRIBE_STATISTICS, DESCRIBE_PUBLICATIONS, DESCRIBE_INHERITS,
                  DESCRIBE_PARTITIONS]


def serve_ours(spark: Any, tmp_path_factory: Any) -> Iterator[Catalog]:
    """A server of our own (so \\d lists exactly our schema) and its catalog."""
    from helpers import InProcessServer

    srv = InProcessServer(tmp_path_factory.mktemp("catalog") / "data", spark).start()
    assert srv.engine is not None
    try:
        for stmt in OURS_DDL:
            srv.engine.execute(stmt)
        yield Catalog(srv.engine)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def ours(spark, tmp_path_factory):
    yield from serve_ours(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def pg():
    import psycopg

    dsn = upstream.upstream().database(DBNAME, UPSTREAM_DDL)
    with psycopg.connect(dsn, autocommit=True) as con:
        yield con


SETTINGS = {"user": "postgres", "database": DBNAME}


def both(ours: Catalog, pg: Any, sql: str, skip: tuple[int, ...] = ()) -> tuple[list, list]:
    """The rows each server answers, without the columns at positions ``skip``."""
    mine = ours.run(sql, [], SETTINGS).rows
    theirs = pg.execute(sql).fetchall()

    def cut(rows: list) -> list:
        return [tuple(v for i, v in enumerate(r) if i not in skip) for r in rows]

    return cut(mine), cut(theirs)


@pytest.mark.parametrize("kinds,what", [("'r','p','v','m','S','f',''", r"\d"),
                                        ("'r','p',''", r"\dt")])
def test_list_relations_like_postgres(ours, pg, kinds, what):
    mine, theirs = both(ours, pg, LIST_RELATIONS.format(kinds=kinds))
    assert mine == theirs, what
    assert {r[1] for r in mine} >= {"visit", "notes"}


def test_list_views_like_postgres(ours, pg):
    mine, theirs = both(ours, pg, LIST_VIEWS)
    assert mine == theirs
    assert [r[1] for r in mine] == ["by_user", "per_user"]


def _oid(catalog_or_pg: Any, name: str) -> int:
    sql = DESCRIBE_FIND.format(pattern=name)
    if isinstance(catalog_or_pg, Catalog):
        rows = catalog_or_pg.run(sql, [], SETTINGS).rows
    else:
        rows = catalog_or_pg.execute(sql).fetchall()
    assert len(rows) == 1, rows
    return int(rows[0][0])


@pytest.mark.parametrize("name", ["visit", "notes", "pair", "per_user", "by_user"])
def test_describe_relation_like_postgres(ours, pg, name):
    mine_oid, their_oid = _oid(ours, name), _oid(pg, name)
    for template in DESCRIBE_TABLE:
        mine = ours.run(template.format(oid=mine_oid), [], SETTINGS).rows
        theirs = pg.execute(template.format(oid=their_oid)).fetchall()
        if template is DESCRIBE_STATISTICS:
            assert mine == theirs == []
            continue
        assert [_plain(r) for r in mine] == [_plain(r) for r in theirs], template[:60]


def test_describe_columns_name_our_types(ours):
    oid = _oid(ours, "per_user")
    rows = ours.run(DESCRIBE_COLUMNS.format(oid=oid), [], SETTINGS).rows
    assert [(r[0], r[1]) for r in rows] == [
        ("user", "text"), ("n", "bigint"), ("total", "double precision"),
        ("a", "double precision")]


def test_describe_unknown_relation_finds_nothing(ours, pg):
    mine, theirs = both(ours, pg, DESCRIBE_FIND.format(pattern="nosuch"))
    assert mine == theirs == []


def test_list_databases_and_schemas_like_postgres(ours, pg):
    mine = ours.run(LIST_DATABASES, [], SETTINGS).rows
    theirs = [r for r in pg.execute(LIST_DATABASES).fetchall() if r[0] == DBNAME]
    assert [r[:7] for r in mine] == [r[:7] for r in theirs]
    mine, theirs = both(ours, pg, LIST_SCHEMAS)
    assert mine == theirs == [("public", "pg_database_owner")]


def _plain(row: tuple) -> tuple:
    """psycopg gives int2vector/regclass as their own types; compare the text forms."""
    return tuple(v if v is None or isinstance(v, (bool, int, float)) else str(v) for v in row)


def test_catalog_follows_ddl(ours):
    engine = ours.engine
    assert engine is not None
    engine.execute("CREATE TABLE later (k BIGINT PRIMARY KEY, v TEXT)")
    try:
        names = [r[1] for r in ours.run(LIST_RELATIONS.format(kinds="'r'"), [], SETTINGS).rows]
        assert "later" in names
    finally:
        engine.execute("DROP TABLE later")
    names = [r[1] for r in ours.run(LIST_RELATIONS.format(kinds="'r'"), [], SETTINGS).rows]
    assert "later" not in names
