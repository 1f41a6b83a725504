"""PostgreSQL's catalog, emulated from ours: what psql, drivers and BI tools read.

pgcore's routing asks ``handles(sql)`` before anything else; the statements that read
pg_catalog, information_schema or the catalog functions (``version()``,
``current_setting()``, ``format_type()``, ``'t'::regclass`` ...) are answered here.

How: our tables and views (storage's schemas, the dataflow's view columns) become rows of
pg_catalog and information_schema tables in an in-memory DuckDB (catalog_db.py); the
client's query is parsed by sqlglot as PostgreSQL, its names mapped onto those tables and
our functions (catalog_rewrite.py), and DuckDB runs it. Nothing is matched by pattern: a
client query we never saw works when it reads the columns we keep.
"""

from __future__ import annotations

import decimal
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.pgwire import catalog_db
from partialflow.server.pgwire.catalog_model import (
    OID_BOOL,
    OID_FLOAT8,
    OID_INT8,
    OID_TEXT,
    SYSTEM_RELATIONS,
    build_model,
)
from partialflow.server.pgwire.catalog_rewrite import Rewritten, cached, rewrite

if TYPE_CHECKING:
    from partialflow.server.engine import Engine

__all__ = [
    "DEFAULT_SETTINGS",
    "OID_BOOL",
    "OID_FLOAT8",
    "OID_INT8",
    "OID_TEXT",
    "SERVER_VERSION",
    "SERVER_VERSION_NUM",
    "VERSION",
    "Catalog",
    "CatalogAnswer",
]

# What partialflow reports as PostgreSQL: psql, pgjdbc and asyncpg pick their catalog
# queries by this version, and the emulated catalog has PostgreSQL 15's shape.
SERVER_VERSION = "15.8"
SERVER_VERSION_NUM = "150008"
VERSION = (f"PostgreSQL {SERVER_VERSION} (partialflow) on x86_64-pc-linux-gnu, "
           "compiled by partialflow, 64-bit")

# current_setting()'s answers when the session has not set a value.
DEFAULT_SETTINGS: dict[str, str] = {
    "server_version": SERVER_VERSION, "server_version_num": SERVER_VERSION_NUM,
    "server_encoding": "UTF8", "client_encoding": "UTF8", "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres", "TimeZone": "UTC", "integer_datetimes": "on",
    "standard_conforming_strings": "on", "search_path": '"$user", public',
    "max_identifier_length": "63", "max_index_keys": "32", "jit": "off",
    "transaction_isolation": "read committed", "default_transaction_read_only": "off",
    "transaction_read_only": "off", "application_name": "", "is_superuser": "on",
    "extra_float_digits": "1", "lc_collate": "C.UTF-8", "lc_ctype": "C.UTF-8",
    "block_size": "8192", "max_connections": "100", "statement_timeout": "0",
}

# DuckDB result types -> PostgreSQL type OIDs.
_RESULT_OIDS = {
    "BOOLEAN": 16, "SMALLINT": 21, "INTEGER": 23, "BIGINT": 20, "HUGEINT": 1700,
    "REAL": 700, "FLOAT": 700, "DOUBLE": 701, "VARCHAR": 25, "DATE": 1082,
    "TIMESTAMP": 1114, "TIMESTAMP WITH TIME ZONE": 1184, "UBIGINT": 1700, "UINTEGER": 26,
    "UINTEGER[]": 1028,
    "BOOLEAN[]": 1000, "SMALLINT[]": 1005, "INTEGER[]": 1007, "BIGINT[]": 1016,
    "VARCHAR[]": 1009, "DOUBLE[]": 1022, "REAL[]": 1021,
}
# A catalog column's DuckDB type by name, for parameters compared with it (oid = $1).
_COLUMN_TYPES = {c: t for cols in catalog_db.TABLES.values() for c, t in cols}
_ARRAY_PARAM_TYPES = {"_oid", "_int8", "_int4", "_int2", "_text", "_name", "_varchar",
                      "_bool", "_float8", "oidvector", "int2vector"}

_HANDLED = (
    r"\bpg_catalog\b|\binformation_schema\b|\bpg_[a-z_]+\b"
    r"|\b(?:version|current_setting|set_config|current_database|current_schemas?|"
    r"pg_backend_pid|has_\w+_privilege|format_type|obj_description|col_description|"
    r"to_regtype|to_regclass|array_to_string)\s*\("
    r"|\bcurrent_(?:user|schema|catalog)\b|\bsession_user\b|::\s*(?:pg_catalog\.)?reg\w+"
)


@dataclass
class CatalogAnswer:
    columns: list[tuple[str, int]]  # (name, PostgreSQL type OID) in order
    rows: list[tuple[Any, ...]]  # Python values; pgcore encodes them per OID
    tag: str  # command tag, e.g. "SELECT 3"


def _result_oid(duck_type: Any) -> int:
    name = str(duck_type).upper()
    if name.startswith("DECIMAL"):
        return 1700
    return _RESULT_OIDS.get(name, OID_TEXT)


def _python(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, dict):  # a composite (pgjdbc reads _pg_expandarray's rows): its text form
        return "(" + ",".join("" if x is None else str(x) for x in v.values()) + ")"
    return v


def _pg_array_text(v: Any) -> Any:
    """A parameter sent as PostgreSQL array text ('{1,2}') for an array cast: a list."""
    if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
        body = v[1:-1].strip()
        items = [x.strip().strip('"') for x in body.split(",")] if body else []
        return [int(x) if x.lstrip("-").isdigit() else x for x in items]
    return v


class Catalog:
    """One per server; safe to call from every session's thread (one lock: catalog
    queries are rare and small)."""

    def __init__(self, engine: Engine | None) -> None:
        self.engine = engine
        self._handled = re.compile(_HANDLED, re.IGNORECASE)
        self._lock = threading.Lock()
        self._con = duckdb.connect(":memory:")
        catalog_db.create_schema(self._con)
        self._model = build_model([], [])
        self._fingerprint: Any = None
        self._session: Any = None
        self._settings: dict[str, str] = dict(DEFAULT_SETTINGS)
        udfs = self._udfs()
        catalog_db.create_functions(self._con, udfs)
        catalog_db.load_static(self._con, self._model)
        names = [r[0] for r in self._con.execute(
            "SELECT table_name FROM duckdb_tables() UNION ALL "
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
        funcs = [r[0] for r in self._con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_name LIKE 'pf_%'").fetchall()]
        self._rewrite = cached(lambda sql: rewrite(sql, names, funcs))
        with self._lock:
            self._refresh({})  # a default session until a client's arrives

    # -- the interface pgcore calls ------------------------------------------------------

    def handles(self, sql: str) -> bool:
        """Does this statement read pg_catalog / information_schema / catalog functions?"""
        return bool(self._handled.search(sql))

    def describe(self, sql: str, param_oids: list[int],
                 settings: Mapping[str, str] | None = None
                 ) -> tuple[list[int], list[tuple[str, int]]]:
        """For Parse/Describe: the parameters' OIDs (0 ones inferred) and the result columns."""
        rw = self._rewrite(sql)
        oids = []
        for n in range(1, rw.n_params + 1):
            given = param_oids[n - 1] if n - 1 < len(param_oids) else 0
            typed = rw.param_types.get(n)
            column = _COLUMN_TYPES.get(rw.param_columns.get(n, ""))
            oids.append(given or (self._model.type_oid(typed) if typed else None)
                        or (_RESULT_OIDS.get(column) if column else None) or OID_TEXT)
        answer = self._execute(rw, [None] * rw.n_params, settings)
        return oids, answer.columns

    def run(self, sql: str, params: list[Any],
            settings: Mapping[str, str] | None = None) -> CatalogAnswer:
        """Answer it from our catalog. ``settings``: the session's (``user``, ``database``
        and what it SET), for current_setting(), current_user and the like."""
        rw = self._rewrite(sql)
        if len(params) < rw.n_params:
            raise InvalidArgument(f"catalog query needs {rw.n_params} parameter(s), "
                                  f"got {len(params)}")
        values = [_pg_array_text(v) if rw.param_types.get(i + 1) in _ARRAY_PARAM_TYPES else v
                  for i, v in enumerate(params[: rw.n_params])]
        return self._execute(rw, values, settings)

    # -- inside ------------------------------------------------------------------------------

    def _execute(self, rw: Rewritten, params: list[Any],
                 settings: Mapping[str, str] | None) -> CatalogAnswer:
        with self._lock:
            self._refresh(settings)
            try:
                cur = self._con.execute(rw.sql, params)
                desc = cur.description or []
                rows = cur.fetchall()
            except duckdb.CatalogException as e:
                raise NotFound(f"catalog query: {str(e).splitlines()[0]}") from None
            except duckdb.Error as e:
                first = str(e).splitlines()[0]
                # One of our functions refused (an unknown relation, type or setting).
                _, found, inner = first.partition("executing the UDF: NotFound: ")
                if found:
                    raise NotFound(inner) from None
                raise InvalidArgument(f"catalog query: {first}") from None
        columns = [(d[0], _result_oid(d[1])) for d in desc]
        out = [tuple(_python(v) for v in r) for r in rows]
        return CatalogAnswer(columns, out, f"SELECT {len(out)}")

    def _refresh(self, settings: Mapping[str, str] | None) -> None:
        """Reload what changed since the last query: our tables and views, the session's
        rows (``settings`` None: keep the last session's, as Describe has none)."""
        if settings is not None:
            merged = {**DEFAULT_SETTINGS, **{k: str(v) for k, v in settings.items()}}
            session = tuple(sorted(merged.items()))
            if session != self._session:
                self._settings = merged
                catalog_db.load_session(self._con, self._user(), self._database(merged),
                                        merged)
                self._session = session
        tables, views = self._catalog_now()
        fp = (tuple((cid, ts) for cid, ts in tables), tuple(views),
              self._database(self._settings))
        if fp != self._fingerprint:
            self._model = build_model(tables, views)
            catalog_db.load_relations(self._con, self._model, self._database(self._settings))
            self._fingerprint = fp

    def _catalog_now(self) -> tuple[list[tuple[int, Any]], list[tuple[str, str, list[str]]]]:
        if self.engine is None:
            return [], []
        storage = self.engine.storage
        ids = storage.table_ids()
        tables = [(ids[ts.name.lower()], ts) for ts in storage.tables()
                  if ts.name.lower() in ids]
        views = []
        for name, sql in storage.views():
            try:
                columns = self.engine.view_schema(name)["columns"]
            except NotFound:  # dropped meanwhile
                continue
            views.append((name, sql, list(columns)))
        return tables, views

    def _user(self) -> str:
        return self._settings.get("user") or "partialflow"

    def _database(self, settings: Mapping[str, str]) -> str:
        return settings.get("database") or "partialflow"

    # -- functions ------------------------------------------------------------------------

    def _udfs(self) -> dict[str, tuple[Any, list[str], str]]:
        m = lambda: self._model  # noqa: E731 - the model is replaced on refresh
        B, I8, I4, T = "BOOLEAN", "UINTEGER", "INTEGER", "VARCHAR"  # I8: OIDs

        def rel_name(oid: int | None) -> str | None:
            if oid is None:
                return None
            if int(oid) == 0:
                return "-"
            r = m().by_oid(int(oid))
            if r is not None:
                return r.name if int(oid) == r.oid else f"{r.name}_pkey"
            sysname = {v: k for k, v in SYSTEM_RELATIONS.items()}.get(int(oid))
            return sysname or str(oid)

        def rel_oid(name: str | None) -> int | None:
            if name is None:
                return None
            low = name.strip().strip('"').lower().removeprefix("pg_catalog.")
            low = low.removeprefix("public.")
            if low in SYSTEM_RELATIONS:
                return SYSTEM_RELATIONS[low]
            r = m().by_name(low)
            if r is None and low.endswith("_pkey"):
                r = m().by_name(low[:-5])
                return r.pkey_oid if r is not None and r.primary_key else None
            if r is None:
                raise NotFound(f'relation "{name}" does not exist')
            return r.oid

        def type_in(name: str | None) -> int | None:
            if name is None:
                return None
            oid = m().type_oid(name)
            if oid is None:
                raise NotFound(f'type "{name}" does not exist')
            return oid

        def to_regtype(name: str | None) -> int | None:
            return None if name is None else m().type_oid(name)

        def indexdef(oid: int | None, col: int | None, pretty: bool | None) -> str | None:
            r = m().by_oid(int(oid)) if oid is not None else None
            if r is None or not r.primary_key or int(oid or 0) != r.pkey_oid:
                return None
            if col:  # one key column's definition
                keys = r.primary_key
                return quote_ident(r.columns[keys[col - 1] - 1][0]) if col <= len(keys) else ""
            cols = ", ".join(quote_ident(r.columns[i - 1][0]) for i in r.primary_key)
            # Unqualified, as PostgreSQL prints a relation its search_path finds.
            return (f"CREATE UNIQUE INDEX {quote_ident(r.name + '_pkey')} ON "
                    f"{quote_ident(r.name)} USING btree ({cols})")

        def constraintdef(oid: int | None, pretty: bool | None) -> str | None:
            r = m().by_oid(int(oid)) if oid is not None else None
            if r is None or not r.primary_key:
                return None
            cols = ", ".join(quote_ident(r.columns[i - 1][0]) for i in r.primary_key)
            return f"PRIMARY KEY ({cols})"

        def viewdef(oid: int | None, pretty: bool | None) -> str | None:
            r = m().by_oid(int(oid)) if oid is not None else None
            return r.definition if r is not None and r.kind == "v" else None

        def userbyid(oid: int | None) -> str | None:
            if oid is None:
                return None
            return {10: self._user(), 6171: "pg_database_owner"}.get(
                int(oid), f"unknown (OID={oid})")

        def setting(name: str | None, missing_ok: bool | None) -> str | None:
            if name is None:
                return None
            for k, v in self._settings.items():
                if k.lower() == name.lower():
                    return v
            if missing_ok:
                return None
            raise NotFound(f'unrecognized configuration parameter "{name}"')

        def namespace(oid: int | None) -> str | None:
            return None if oid is None else {11: "pg_catalog", 2200: "public", 99: "pg_toast",
                                             13207: "information_schema"}.get(int(oid),
                                                                               str(oid))

        pid = os.getpid()
        return {
            "pf_format_type": (lambda o, t: m().format_type(o, t), [I8, I4], T),
            "pf_pg_get_userbyid": (userbyid, [I8], T),
            "pf_regclass_in": (rel_oid, [T], I8),
            "pf_regclass_out": (rel_name, [I8], T),
            "pf_to_regclass": (lambda n: None if n is None else _try(rel_oid, n), [T], I8),
            "pf_regtype_in": (type_in, [T], I8),
            "pf_regtype_out": (lambda o: m().format_type(o), [I8], T),
            "pf_to_regtype": (to_regtype, [T], I8),
            "pf_regproc_in": (lambda n: n and n.removeprefix("pg_catalog."), [T], T),
            "pf_regproc_out": (lambda n: n, [T], T),
            "pf_regprocedure_out": (lambda n: n, [T], T),
            "pf_regnamespace_out": (namespace, [I8], T),
            "pf_regnamespace_in": (lambda n: None if n is None else {
                "pg_catalog": 11, "public": 2200, "pg_toast": 99,
                "information_schema": 13207}.get(n.strip('"').lower()), [T], I8),
            "pf_regrole_in": (lambda n: None if n is None else (
                10 if n.strip('"') == self._user() else 6171 if n == "pg_database_owner"
                else _missing(f'role "{n}" does not exist')), [T], I8),
            "pf_regrole_out": (userbyid, [I8], T),
            "pf_pg_get_indexdef_py": (indexdef, [I8, I4, B], T),
            "pf_pg_get_constraintdef_py": (constraintdef, [I8, B], T),
            "pf_pg_get_viewdef_py": (viewdef, [I8, B], T),
            "pf_current_setting_py": (setting, [T, B], T),
            "pf_set_config": (lambda n, v, local: v, [T, T, B], T),
            "pf_quote_ident": (lambda n: None if n is None else quote_ident(n), [T], T),
            "pf_parse_ident": (lambda n: None if n is None else _parse_ident(n),
                               [T], "VARCHAR[]"),
            "pf_version": (lambda: VERSION, [], T),
            "pf_current_database": (lambda: self._database(self._settings), [], T),
            "pf_current_schema": (lambda: "public", [], T),
            "pf_current_schemas": (lambda implicit: (["pg_catalog", "public"] if implicit
                                                     else ["public"]), [B], "VARCHAR[]"),
            "pf_current_user": (lambda: self._user(), [], T),
            "pf_session_user": (lambda: self._user(), [], T),
            "pf_pg_backend_pid": (lambda: int(self._settings.get("backend_pid") or pid), [],
                                  I4),
        }


# PostgreSQL's reserved key words (and the ones that cannot name a column): quote_ident()
# quotes these, as pg_get_indexdef and friends do.
_RESERVED = frozenset("""
    all analyse analyze and any array as asc asymmetric authorization between binary both case
    cast check collate collation column concurrently constraint create cross current_catalog
    current_date current_role current_schema current_time current_timestamp current_user
    default deferrable desc distinct do else end except false fetch for foreign freeze from
    full grant group having ilike in initially inner intersect into is isnull join lateral
    leading left like limit localtime localtimestamp natural not notnull null offset on only
    or order outer overlaps placing primary references returning right select session_user
    similar some symmetric system_user table tablesample then to trailing true union unique
    user using variadic verbose when where window with
""".split())


def quote_ident(name: str) -> str:
    """PostgreSQL's quote_ident(): quoted unless a plain lower-case non-reserved name."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def _parse_ident(text: str) -> list[str]:
    """PostgreSQL's parse_ident(): a qualified name's parts, quotes removed, others folded."""
    parts, cur, quoted, i = [], "", False, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            if quoted and text[i + 1:i + 2] == '"':
                cur += '"'
                i += 1
            else:
                quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch if quoted else ch.lower()
        i += 1
    parts.append(cur)
    return [p.strip() for p in parts]


def _missing(message: str) -> Any:
    raise NotFound(message)


def _try(fn: Any, arg: Any) -> Any:
    try:
        return fn(arg)
    except NotFound:
        return None
