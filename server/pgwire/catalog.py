"""A minimal stand-in for the pg_catalog emulation (the pgcat engineer's module replaces this
whole file, keeping this interface): ``SELECT version()``, ``current_setting(...)`` and
psycopg's type lookup only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

OID_BOOL, OID_INT8, OID_FLOAT8, OID_TEXT = 16, 20, 701, 25  # our four column types

VERSION = "PostgreSQL 16.4 (partialflow) on x86_64-pc-linux-gnu, 64-bit"
_SETTINGS = {"server_version": "16.4", "server_encoding": "UTF8", "client_encoding": "UTF8",
             "datestyle": "ISO, MDY", "timezone": "UTC", "standard_conforming_strings": "on",
             "integer_datetimes": "on", "search_path": '"$user", public',
             "max_identifier_length": "63"}
_TYPES = {"bool": (OID_BOOL, 1000), "int8": (OID_INT8, 1016), "float8": (OID_FLOAT8, 1022),
          "text": (OID_TEXT, 1009)}
_VERSION = re.compile(r"^\s*select\s+(pg_catalog\.)?version\(\)\s*;?\s*$", re.I)
_SETTING = re.compile(r"^\s*select\s+(pg_catalog\.)?current_setting\(\s*'([^']+)'\s*\)\s*;?\s*$",
                      re.I)


@dataclass
class CatalogAnswer:
    columns: list[tuple[str, int]]
    rows: list[tuple[Any, ...]]
    tag: str


class Catalog:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def handles(self, sql: str) -> bool:
        return bool(_VERSION.match(sql) or _SETTING.match(sql) or "pg_type" in sql)

    def describe(self, sql: str, param_oids: list[int]) -> tuple[list[int], list[tuple[str, int]]]:
        params = [o or OID_TEXT for o in param_oids] or [OID_TEXT] * sql.count("$")
        return params, self.run(sql, [None] * len(params)).columns

    def run(self, sql: str, params: list[Any]) -> CatalogAnswer:
        if _VERSION.match(sql):
            return CatalogAnswer([("version", OID_TEXT)], [(VERSION,)], "SELECT 1")
        m = _SETTING.match(sql)
        if m:
            return CatalogAnswer([("current_setting", OID_TEXT)],
                                 [(_SETTINGS.get(m.group(2).lower(), ""),)], "SELECT 1")
        # psycopg's TypeInfo.fetch: name, oid, array_oid, regtype, delimiter.
        name = str(params[0]) if params and params[0] is not None else ""
        found = _TYPES.get(name.split(".")[-1].strip('"'))
        rows = [(name, found[0], found[1], name, ",")] if found else []
        cols = [("name", OID_TEXT), ("oid", OID_INT8), ("array_oid", OID_INT8),
                ("regtype", OID_TEXT), ("delimiter", OID_TEXT)]
        return CatalogAnswer(cols, rows, f"SELECT {len(rows)}")
