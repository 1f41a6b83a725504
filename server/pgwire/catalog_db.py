"""The emulated catalog as tables of an in-memory DuckDB database.

DuckDB runs the clients' catalog queries: its parser is PostgreSQL's own grammar (arrays,
``= ANY``, recursive CTEs, window functions, regular-expression operators, ``E''`` strings)
so the big introspection queries of asyncpg and JDBC run as written, after a rewrite that
only renames (catalog_rewrite.py). DuckDB keeps a read-only pg_catalog of its own that
cannot be replaced, so ours live in ``main`` under prefixed names: ``pg_catalog.pg_class``
is ``pc_pg_class`` and ``information_schema.tables`` is ``is_tables``; our functions are
``pf_<name>`` (Python UDFs or SQL macros).

Each table lists only the columns clients were seen to read (psql 15, pgjdbc 42.5,
asyncpg, psycopg 3) plus their neighbours; a column missing here is an error naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import duckdb
from duckdb.func import FunctionNullHandling

from partialflow.server.pgwire.catalog_model import (
    DATABASE_OID,
    NS_INFORMATION_SCHEMA,
    NS_PG_CATALOG,
    NS_PUBLIC,
    NS_TOAST,
    ROLE_DATABASE_OWNER,
    ROLE_OWNER,
    Model,
)

# Every BIGINT-ish column of the pg_catalog tables is an OID: DuckDB's UINTEGER (PostgreSQL's
# oid is unsigned 32-bit), reported to clients as type oid.
_B, _I8, _I4, _I2, _T, _F4 = "BOOLEAN", "UINTEGER", "INTEGER", "SMALLINT", "VARCHAR", "REAL"

# table -> ((column, DuckDB type), ...). pg_catalog tables are prefixed pc_, information
# schema ones is_ (catalog_rewrite maps the names).
TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "pc_pg_namespace": (("oid", _I8), ("nspname", _T), ("nspowner", _I8), ("nspacl", "VARCHAR[]")),
    "pc_pg_class": tuple((c, t) for c, t in (
        ("oid", _I8), ("relname", _T), ("relnamespace", _I8), ("reltype", _I8),
        ("reloftype", _I8), ("relowner", _I8), ("relam", _I8), ("relfilenode", _I8),
        ("reltablespace", _I8), ("relpages", _I4), ("reltuples", _F4), ("relallvisible", _I4),
        ("reltoastrelid", _I8), ("relhasindex", _B), ("relisshared", _B),
        ("relpersistence", _T), ("relkind", _T), ("relnatts", _I2), ("relchecks", _I2),
        ("relhasrules", _B), ("relhastriggers", _B), ("relhassubclass", _B),
        ("relrowsecurity", _B), ("relforcerowsecurity", _B), ("relispopulated", _B),
        ("relreplident", _T), ("relispartition", _B), ("relrewrite", _I8),
        ("relacl", "VARCHAR[]"), ("reloptions", "VARCHAR[]"), ("relpartbound", _T))),
    "pc_pg_attribute": (
        ("attrelid", _I8), ("attname", _T), ("atttypid", _I8), ("attstattarget", _I4),
        ("attlen", _I2), ("attnum", _I2), ("attndims", _I4), ("attcacheoff", _I4),
        ("atttypmod", _I4), ("attbyval", _B), ("attalign", _T), ("attstorage", _T),
        ("attcompression", _T), ("attnotnull", _B), ("atthasdef", _B), ("atthasmissing", _B),
        ("attidentity", _T), ("attgenerated", _T), ("attisdropped", _B), ("attislocal", _B),
        ("attinhcount", _I4), ("attcollation", _I8), ("attacl", "VARCHAR[]"),
        ("attoptions", "VARCHAR[]")),
    "pc_pg_type": (
        ("oid", _I8), ("typname", _T), ("typnamespace", _I8), ("typowner", _I8),
        ("typlen", _I2), ("typbyval", _B), ("typtype", _T), ("typcategory", _T),
        ("typispreferred", _B), ("typisdefined", _B), ("typdelim", _T), ("typrelid", _I8),
        ("typelem", _I8), ("typarray", _I8), ("typinput", _T), ("typoutput", _T),
        ("typreceive", _T), ("typsend", _T), ("typalign", _T), ("typstorage", _T),
        ("typnotnull", _B), ("typbasetype", _I8), ("typtypmod", _I4), ("typndims", _I4),
        ("typcollation", _I8), ("typdefault", _T), ("typacl", "VARCHAR[]")),
    "pc_pg_index": (
        ("indexrelid", _I8), ("indrelid", _I8), ("indnatts", _I2), ("indnkeyatts", _I2),
        ("indisunique", _B), ("indnullsnotdistinct", _B), ("indisprimary", _B),
        ("indisexclusion", _B), ("indimmediate", _B), ("indisclustered", _B),
        ("indisvalid", _B), ("indcheckxmin", _B), ("indisready", _B), ("indislive", _B),
        ("indisreplident", _B), ("indkey", "SMALLINT[]"), ("indexprs", _T), ("indpred", _T)),
    "pc_pg_constraint": (
        ("oid", _I8), ("conname", _T), ("connamespace", _I8), ("contype", _T),
        ("condeferrable", _B), ("condeferred", _B), ("convalidated", _B), ("conrelid", _I8),
        ("contypid", _I8), ("conindid", _I8), ("conparentid", _I8), ("confrelid", _I8),
        ("conislocal", _B), ("coninhcount", _I4), ("connoinherit", _B),
        ("conkey", "SMALLINT[]"), ("confkey", "SMALLINT[]")),
    "pc_pg_am": (("oid", _I8), ("amname", _T), ("amtype", _T)),
    "pc_pg_database": (
        ("oid", _I8), ("datname", _T), ("datdba", _I8), ("encoding", _I4),
        ("datlocprovider", _T), ("datistemplate", _B), ("datallowconn", _B),
        ("datconnlimit", _I4), ("datcollate", _T), ("datctype", _T), ("daticulocale", _T),
        ("datcollversion", _T), ("dattablespace", _I8), ("datacl", "VARCHAR[]")),
    "pc_pg_roles": (
        ("oid", _I8), ("rolname", _T), ("rolsuper", _B), ("rolinherit", _B),
        ("rolcreaterole", _B), ("rolcreatedb", _B), ("rolcanlogin", _B),
        ("rolreplication", _B), ("rolconnlimit", _I4), ("rolbypassrls", _B)),
    "pc_pg_description": (("objoid", _I8), ("classoid", _I8), ("objsubid", _I4),
                          ("description", _T)),
    "pc_pg_attrdef": (("oid", _I8), ("adrelid", _I8), ("adnum", _I2), ("adbin", _T)),
    "pc_pg_collation": (("oid", _I8), ("collname", _T), ("collnamespace", _I8)),
    "pc_pg_range": (("rngtypid", _I8), ("rngsubtype", _I8), ("rngmultitypid", _I8)),
    "pc_pg_policy": (("oid", _I8), ("polname", _T), ("polrelid", _I8), ("polcmd", _T),
                     ("polpermissive", _B), ("polroles", "UINTEGER[]"), ("polqual", _T),
                     ("polwithcheck", _T)),
    "pc_pg_statistic_ext": (("oid", _I8), ("stxrelid", _I8), ("stxname", _T),
                            ("stxnamespace", _I8), ("stxstattarget", _I4),
                            ("stxkind", "VARCHAR[]")),
    "pc_pg_publication": (("oid", _I8), ("pubname", _T), ("puballtables", _B)),
    "pc_pg_publication_namespace": (("oid", _I8), ("pnpubid", _I8), ("pnnspid", _I8)),
    "pc_pg_publication_rel": (("oid", _I8), ("prpubid", _I8), ("prrelid", _I8),
                              ("prqual", _T), ("prattrs", "SMALLINT[]")),
    "pc_pg_inherits": (("inhrelid", _I8), ("inhparent", _I8), ("inhseqno", _I4),
                       ("inhdetachpending", _B)),
    "pc_pg_trigger": (("oid", _I8), ("tgrelid", _I8), ("tgname", _T)),
    "pc_pg_rewrite": (("oid", _I8), ("rulename", _T), ("ev_class", _I8)),
    "pc_pg_enum": (("oid", _I8), ("enumtypid", _I8), ("enumsortorder", _F4),
                   ("enumlabel", _T)),
    "pc_pg_proc": (("oid", _I8), ("proname", _T), ("pronamespace", _I8)),
    "pc_pg_tablespace": (("oid", _I8), ("spcname", _T), ("spcowner", _I8)),
    "pc_pg_extension": (("oid", _I8), ("extname", _T), ("extversion", _T)),
    "pc_pg_settings": (("name", _T), ("setting", _T), ("unit", _T), ("category", _T),
                       ("short_desc", _T), ("context", _T), ("vartype", _T)),
    "is_schemata": (("catalog_name", _T), ("schema_name", _T), ("schema_owner", _T)),
    "is_tables": (("table_catalog", _T), ("table_schema", _T), ("table_name", _T),
                  ("table_type", _T), ("is_insertable_into", _T), ("is_typed", _T)),
    "is_views": (("table_catalog", _T), ("table_schema", _T), ("table_name", _T),
                 ("view_definition", _T), ("check_option", _T), ("is_updatable", _T),
                 ("is_insertable_into", _T)),
    "is_columns": (("table_catalog", _T), ("table_schema", _T), ("table_name", _T),
                   ("column_name", _T), ("ordinal_position", _I4), ("column_default", _T),
                   ("is_nullable", _T), ("data_type", _T), ("character_maximum_length", _I4),
                   ("numeric_precision", _I4), ("numeric_precision_radix", _I4),
                   ("numeric_scale", _I4), ("udt_catalog", _T), ("udt_schema", _T),
                   ("udt_name", _T), ("is_identity", _T), ("is_generated", _T),
                   ("is_updatable", _T)),
    "is_table_constraints": (("constraint_catalog", _T), ("constraint_schema", _T),
                             ("constraint_name", _T), ("table_catalog", _T),
                             ("table_schema", _T), ("table_name", _T),
                             ("constraint_type", _T), ("is_deferrable", _T),
                             ("initially_deferred", _T)),
    "is_key_column_usage": (("constraint_catalog", _T), ("constraint_schema", _T),
                            ("constraint_name", _T), ("table_catalog", _T),
                            ("table_schema", _T), ("table_name", _T), ("column_name", _T),
                            ("ordinal_position", _I4), ("position_in_unique_constraint", _I4)),
}

# Views PostgreSQL defines over its catalogs, defined here the same way over ours.
VIEWS: dict[str, str] = {
    "pc_pg_tables": """SELECT n.nspname AS schemaname, c.relname AS tablename,
        pf_pg_get_userbyid(c.relowner) AS tableowner, NULL::VARCHAR AS tablespace,
        c.relhasindex AS hasindexes, c.relhasrules AS hasrules, c.relhastriggers AS hastriggers,
        c.relrowsecurity AS rowsecurity
        FROM pc_pg_class c JOIN pc_pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p')""",
    "pc_pg_views": """SELECT n.nspname AS schemaname, c.relname AS viewname,
        pf_pg_get_userbyid(c.relowner) AS viewowner, pf_pg_get_viewdef(c.oid) AS definition
        FROM pc_pg_class c JOIN pc_pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'v'""",
    "pc_pg_indexes": """SELECT n.nspname AS schemaname, c.relname AS tablename,
        i.relname AS indexname, NULL::VARCHAR AS tablespace,
        pf_pg_get_indexdef(i.oid, 0, false) AS indexdef
        FROM pc_pg_index x JOIN pc_pg_class c ON c.oid = x.indrelid
        JOIN pc_pg_class i ON i.oid = x.indexrelid
        JOIN pc_pg_namespace n ON n.oid = c.relnamespace""",
    "pc_pg_user": """SELECT rolname AS usename, oid AS usesysid, rolcreatedb AS usecreatedb,
        rolsuper AS usesuper FROM pc_pg_roles WHERE rolcanlogin""",
    "pc_pg_authid": "SELECT * FROM pc_pg_roles",
    "pc_pg_matviews": """SELECT NULL::VARCHAR AS schemaname, NULL::VARCHAR AS matviewname
        WHERE false""",
}

# SQL macros: the functions whose answer needs nothing from Python.
MACROS: tuple[str, ...] = (
    "pf_pg_table_is_visible(x) AS true",
    "pf_pg_type_is_visible(x) AS true",
    "pf_pg_function_is_visible(x) AS true",
    "pf_has_table_privilege(a, b, c := NULL) AS true",
    "pf_has_schema_privilege(a, b, c := NULL) AS true",
    "pf_has_database_privilege(a, b, c := NULL) AS true",
    "pf_has_column_privilege(a, b, c := NULL, d := NULL) AS true",
    "pf_has_any_column_privilege(a, b, c := NULL) AS true",
    "pf_pg_get_expr(e, r, p := NULL) AS CAST(NULL AS VARCHAR)",
    "pf_obj_description(o, c := NULL) AS CAST(NULL AS VARCHAR)",
    "pf_col_description(o, n) AS CAST(NULL AS VARCHAR)",
    "pf_shobj_description(o, c) AS CAST(NULL AS VARCHAR)",
    "pf_pg_encoding_to_char(e) AS CASE WHEN e = 6 THEN 'UTF8' ELSE 'SQL_ASCII' END",
    "pf_array_upper(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE len(a) END",
    "pf_array_lower(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE 1 END",
    "pf_array_length(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE len(a) END",
    "pf_array_to_string(a, s, n := NULL) AS array_to_string(a, s)",
    "pf_expandarray(a) AS unnest(list_transform(generate_series(1, len(a)),"
    " lambda i: {'x': a[i], 'n': i}))",
    "pf_pg_relation_is_publishable(x) AS false",
    "pf_pg_get_statisticsobjdef_columns(x) AS CAST(NULL AS VARCHAR)",
    "pf_pg_is_in_recovery() AS false",
    "pf_pg_get_indexdef(o, c := 0, p := false) AS pf_pg_get_indexdef_py(o, c, p)",
    "pf_pg_get_constraintdef(o, p := false) AS pf_pg_get_constraintdef_py(o, p)",
    "pf_pg_get_viewdef(o, p := false) AS pf_pg_get_viewdef_py(o, p)",
    "pf_current_setting(n, m := false) AS pf_current_setting_py(n, m)",
    "pf_txid_current() AS 1",
    "pf_pg_postmaster_start_time() AS now()",
)


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET lambda_syntax = 'DISABLE_SINGLE_ARROW'")
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")


def create_functions(con: duckdb.DuckDBPyConnection,
                     udfs: Mapping[str, tuple[Callable[..., Any], list[str], str]]) -> None:
    """Python UDFs (name -> (function, argument types, return type)), macros, views."""
    for name, (fn, args, ret) in udfs.items():
        con.create_function(name, fn, list(args), ret, null_handling=FunctionNullHandling.SPECIAL,
                            side_effects=True)
    for m in MACROS:
        con.execute(f"CREATE MACRO {m}")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    con.execute(f"DELETE FROM {table}")
    if not rows:
        return
    cols = [c for c, _ in TABLES[table]]
    unknown = set().union(*rows) - set(cols)
    assert not unknown, f"{table} has no columns {unknown}"
    marks = ", ".join("?" for _ in cols)
    con.executemany(f"INSERT INTO {table} VALUES ({marks})",
                    [[r.get(c) for c in cols] for r in rows])


def load_static(con: duckdb.DuckDBPyConnection, model: Model) -> None:
    """The rows that do not change while the server runs."""
    _insert(con, "pc_pg_type", [
        dict(oid=t[0], typname=t[1], typnamespace=NS_PG_CATALOG, typowner=ROLE_OWNER,
             typlen=t[2], typbyval=t[3], typtype=t[4], typcategory=t[5], typispreferred=t[6],
             typisdefined=True, typdelim=t[7], typrelid=0, typelem=t[8], typarray=t[9],
             typinput=t[10], typoutput=t[11], typreceive=t[12], typsend=t[13], typalign=t[14],
             typstorage=t[15], typnotnull=False, typbasetype=0, typtypmod=-1, typndims=0,
             typcollation=t[16])
        for t in model.types.values()])
    _insert(con, "pc_pg_namespace", [
        dict(oid=NS_TOAST, nspname="pg_toast", nspowner=ROLE_OWNER),
        dict(oid=NS_PG_CATALOG, nspname="pg_catalog", nspowner=ROLE_OWNER),
        dict(oid=NS_PUBLIC, nspname="public", nspowner=ROLE_DATABASE_OWNER),
        dict(oid=NS_INFORMATION_SCHEMA, nspname="information_schema", nspowner=ROLE_OWNER)])
    _insert(con, "pc_pg_am", [dict(oid=2, amname="heap", amtype="t"),
                              dict(oid=403, amname="btree", amtype="i")])
    _insert(con, "pc_pg_collation", [
        dict(oid=100, collname="default", collnamespace=NS_PG_CATALOG),
        dict(oid=950, collname="C", collnamespace=NS_PG_CATALOG),
        dict(oid=951, collname="POSIX", collnamespace=NS_PG_CATALOG)])
    _insert(con, "pc_pg_tablespace", [
        dict(oid=1663, spcname="pg_default", spcowner=ROLE_OWNER),
        dict(oid=1664, spcname="pg_global", spcowner=ROLE_OWNER)])


def load_session(con: duckdb.DuckDBPyConnection, user: str, database: str,
                 settings: Mapping[str, str]) -> None:
    """The rows that name the connected user and database."""
    _insert(con, "pc_pg_roles", [
        dict(oid=ROLE_OWNER, rolname=user, rolsuper=True, rolinherit=True, rolcreaterole=True,
             rolcreatedb=True, rolcanlogin=True, rolreplication=True, rolconnlimit=-1,
             rolbypassrls=True),
        dict(oid=ROLE_DATABASE_OWNER, rolname="pg_database_owner", rolsuper=False,
             rolinherit=True, rolcreaterole=False, rolcreatedb=False, rolcanlogin=False,
             rolreplication=False, rolconnlimit=-1, rolbypassrls=False)])
    _insert(con, "pc_pg_database", [
        dict(oid=DATABASE_OID, datname=database, datdba=ROLE_OWNER, encoding=6,
             datlocprovider="c", datistemplate=False, datallowconn=True, datconnlimit=-1,
             datcollate="C.UTF-8", datctype="C.UTF-8", dattablespace=1663)])
    _insert(con, "pc_pg_settings", [dict(name=k, setting=v) for k, v in settings.items()])
    _insert(con, "is_schemata", [
        dict(catalog_name=database, schema_name=n, schema_owner=o)
        for n, o in (("information_schema", user), ("pg_catalog", user),
                     ("pg_toast", user), ("public", "pg_database_owner"))])


def load_relations(con: duckdb.DuckDBPyConnection, model: Model, database: str) -> None:
    """pg_class, pg_attribute, row types, indexes and constraints, information_schema."""
    classes, attrs, types, indexes, cons = [], [], [], [], []
    tables, views, columns, tcons, keys = [], [], [], [], []
    for r in model.relations:
        table = r.kind == "r"
        has_pk = bool(r.primary_key)
        classes.append(dict(
            oid=r.oid, relname=r.name, relnamespace=NS_PUBLIC, reltype=r.oid + 1, reloftype=0,
            relowner=ROLE_OWNER, relam=2 if table else 0, relfilenode=r.oid if table else 0,
            reltablespace=0, relpages=0, reltuples=-1.0, relallvisible=0, reltoastrelid=0,
            relhasindex=has_pk, relisshared=False, relpersistence="p", relkind=r.kind,
            relnatts=len(r.columns), relchecks=0, relhasrules=not table, relhastriggers=False,
            relhassubclass=False, relrowsecurity=False, relforcerowsecurity=False,
            relispopulated=True, relreplident="d" if table else "n", relispartition=False,
            relrewrite=0))
        types.append(dict(
            oid=r.oid + 1, typname=r.name, typnamespace=NS_PUBLIC, typowner=ROLE_OWNER,
            typlen=-1, typbyval=False, typtype="c", typcategory="C", typispreferred=False,
            typisdefined=True, typdelim=",", typrelid=r.oid, typelem=0, typarray=r.oid + 2,
            typinput="record_in", typoutput="record_out", typreceive="record_recv",
            typsend="record_send", typalign="d", typstorage="x", typnotnull=False,
            typbasetype=0, typtypmod=-1, typndims=0, typcollation=0))
        types.append(dict(
            oid=r.oid + 2, typname="_" + r.name, typnamespace=NS_PUBLIC, typowner=ROLE_OWNER,
            typlen=-1, typbyval=False, typtype="b", typcategory="A", typispreferred=False,
            typisdefined=True, typdelim=",", typrelid=0, typelem=r.oid + 1, typarray=0,
            typinput="array_in", typoutput="array_out", typreceive="array_recv",
            typsend="array_send", typalign="d", typstorage="x", typnotnull=False,
            typbasetype=0, typtypmod=-1, typndims=0, typcollation=0))
        kind = "BASE TABLE" if table else "VIEW"
        tables.append(dict(table_catalog=database, table_schema="public", table_name=r.name,
                           table_type=kind, is_insertable_into="YES" if table else "NO",
                           is_typed="NO"))
        if not table:
            views.append(dict(table_catalog=database, table_schema="public", table_name=r.name,
                              view_definition=r.definition, check_option="NONE",
                              is_updatable="NO", is_insertable_into="NO"))
        for i, (col, toid) in enumerate(r.columns, start=1):
            t = model.types[toid]
            notnull = i in r.primary_key
            attrs.append(dict(
                attrelid=r.oid, attname=col, atttypid=toid, attstattarget=-1, attlen=t[2],
                attnum=i, attndims=0, attcacheoff=-1, atttypmod=-1, attbyval=t[3],
                attalign=t[14], attstorage=t[15], attcompression="", attnotnull=notnull,
                atthasdef=False, atthasmissing=False, attidentity="", attgenerated="",
                attisdropped=False, attislocal=True, attinhcount=0, attcollation=t[16]))
            columns.append(dict(
                table_catalog=database, table_schema="public", table_name=r.name,
                column_name=col, ordinal_position=i, is_nullable="NO" if notnull else "YES",
                data_type=model.format_type(toid), udt_catalog=database,
                udt_schema="pg_catalog", udt_name=t[1], is_identity="NO", is_generated="NEVER",
                is_updatable="YES" if table else "NO",
                numeric_precision={20: 64, 701: 53}.get(toid),
                numeric_precision_radix={20: 2, 701: 2}.get(toid),
                numeric_scale=0 if toid == 20 else None))
        if has_pk:
            pkname = f"{r.name}_pkey"
            classes.append(dict(
                oid=r.pkey_oid, relname=pkname, relnamespace=NS_PUBLIC, reltype=0, reloftype=0,
                relowner=ROLE_OWNER, relam=403, relfilenode=r.pkey_oid, reltablespace=0,
                relpages=1, reltuples=0.0, relallvisible=0, reltoastrelid=0, relhasindex=False,
                relisshared=False, relpersistence="p", relkind="i",
                relnatts=len(r.primary_key), relchecks=0, relhasrules=False,
                relhastriggers=False, relhassubclass=False, relrowsecurity=False,
                relforcerowsecurity=False, relispopulated=True, relreplident="n",
                relispartition=False, relrewrite=0))
            for pos, num in enumerate(r.primary_key, start=1):  # the index's own columns
                col, toid = r.columns[num - 1]
                t = model.types[toid]
                attrs.append(dict(
                    attrelid=r.pkey_oid, attname=col, atttypid=toid, attstattarget=-1,
                    attlen=t[2], attnum=pos, attndims=0, attcacheoff=-1, atttypmod=-1,
                    attbyval=t[3], attalign=t[14], attstorage=t[15], attcompression="",
                    attnotnull=False, atthasdef=False, atthasmissing=False, attidentity="",
                    attgenerated="", attisdropped=False, attislocal=True, attinhcount=0,
                    attcollation=t[16]))
            indexes.append(dict(
                indexrelid=r.pkey_oid, indrelid=r.oid, indnatts=len(r.primary_key),
                indnkeyatts=len(r.primary_key), indisunique=True, indnullsnotdistinct=False,
                indisprimary=True, indisexclusion=False, indimmediate=True,
                indisclustered=False, indisvalid=True, indcheckxmin=False, indisready=True,
                indislive=True, indisreplident=False, indkey=list(r.primary_key)))
            cons.append(dict(
                oid=r.pkey_oid, conname=pkname, connamespace=NS_PUBLIC, contype="p",
                condeferrable=False, condeferred=False, convalidated=True, conrelid=r.oid,
                contypid=0, conindid=r.pkey_oid, conparentid=0, confrelid=0, conislocal=True,
                coninhcount=0, connoinherit=True, conkey=list(r.primary_key)))
            tcons.append(dict(constraint_catalog=database, constraint_schema="public",
                              constraint_name=pkname, table_catalog=database,
                              table_schema="public", table_name=r.name,
                              constraint_type="PRIMARY KEY", is_deferrable="NO",
                              initially_deferred="NO"))
            for pos, num in enumerate(r.primary_key, start=1):
                keys.append(dict(constraint_catalog=database, constraint_schema="public",
                                 constraint_name=pkname, table_catalog=database,
                                 table_schema="public", table_name=r.name,
                                 column_name=r.columns[num - 1][0], ordinal_position=pos))
    con.execute("DELETE FROM pc_pg_type WHERE typnamespace = ?", [NS_PUBLIC])
    _insert(con, "pc_pg_class", classes)
    _insert(con, "pc_pg_attribute", attrs)
    if types:
        cols = [c for c, _ in TABLES["pc_pg_type"]]
        con.executemany(f"INSERT INTO pc_pg_type VALUES ({', '.join('?' for _ in cols)})",
                        [[t.get(c) for c in cols] for t in types])
    _insert(con, "pc_pg_index", indexes)
    _insert(con, "pc_pg_constraint", cons)
    _insert(con, "is_tables", tables)
    _insert(con, "is_views", views)
    _insert(con, "is_columns", columns)
    _insert(con, "is_table_constraints", tcons)
    _insert(con, "is_key_column_usage", keys)
