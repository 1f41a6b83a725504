"""The rows of the emulated pg_catalog and information_schema, built from our catalog.

Storage keeps the tables (names, columns, types, primary keys) and the view definitions;
the dataflow keeps each view's output column names. A view's column types are not kept
anywhere, so they are inferred here from its SQL with sqlglot's type annotator over the
base tables' (and earlier views') schemas, the way PostgreSQL derives a view's row type.

Object identifiers must be stable while the server runs and across restarts (clients cache
them): a table's OID comes from its catalog id (never reused), a view's from its name.
Each relation takes four consecutive OIDs: the relation, its row type, the row type's array
type and, for a table with a primary key, the ``<table>_pkey`` index and constraint.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from partialflow.server.pgwire.catalog_types import BUILTIN_TYPES

OID_BOOL, OID_INT8, OID_FLOAT8, OID_TEXT = 16, 20, 701, 25

# Our column types (storage's names) as PostgreSQL types.
TYPE_OIDS: dict[str, int] = {
    "BIGINT": OID_INT8, "DOUBLE": OID_FLOAT8, "TEXT": OID_TEXT, "BOOLEAN": OID_BOOL,
}

NS_PG_CATALOG, NS_PUBLIC, NS_TOAST, NS_INFORMATION_SCHEMA = 11, 2200, 99, 13207
ROLE_OWNER, ROLE_DATABASE_OWNER = 10, 6171
DATABASE_OID = 5
FIRST_TABLE_OID = 16384
VIEW_OID_BASE = 0x40000000

# Well-known system relations, for 'pg_class'::regclass and the like.
SYSTEM_RELATIONS: dict[str, int] = {
    "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259,
    "pg_database": 1262, "pg_constraint": 2606, "pg_index": 2610, "pg_namespace": 2615,
    "pg_description": 2609, "pg_am": 2601, "pg_attrdef": 2604, "pg_collation": 3456,
}

# format_type(): PostgreSQL's SQL spellings of the internal type names.
_SQL_TYPE_NAMES = {
    "int8": "bigint", "int4": "integer", "int2": "smallint", "float4": "real",
    "float8": "double precision", "bool": "boolean", "varchar": "character varying",
    "bpchar": "character", "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone", "time": "time without time zone",
    "timetz": "time with time zone", "varbit": "bit varying", "char": '"char"',
}


@dataclass
class Relation:
    """A table or view as the catalog presents it."""

    oid: int
    name: str
    kind: str  # 'r' table, 'v' view
    columns: list[tuple[str, int]]  # (name, type OID)
    primary_key: list[int] = field(default_factory=list)  # 1-based column numbers
    definition: str = ""  # a view's SQL

    @property
    def pkey_oid(self) -> int:
        return self.oid + 3


@dataclass
class Model:
    """Everything the catalog tables are made of, at one moment."""

    relations: list[Relation]
    types: dict[int, tuple[Any, ...]]  # builtin pg_type rows by OID

    def by_oid(self, oid: int) -> Relation | None:
        for r in self.relations:
            if oid in (r.oid, r.pkey_oid):
                return r
        return None

    def by_name(self, name: str) -> Relation | None:
        low = name.lower()
        for r in self.relations:
            if r.name == low:
                return r
        return None

    def format_type(self, oid: int | None, typmod: int | None = None) -> str | None:
        if oid is None:
            return None
        if int(oid) == 0:
            return "-"  # as PostgreSQL prints the invalid OID as a type
        t = self.types.get(int(oid))
        if t is None:
            rel = next((r for r in self.relations if int(oid) in (r.oid + 1, r.oid + 2)), None)
            if rel is None:
                return "???"
            return rel.name + ("[]" if int(oid) == rel.oid + 2 else "")
        name, elem = t[1], t[8]
        if t[2] == -1 and elem != 0 and name.startswith("_"):
            return f"{self.format_type(elem)}[]"
        return _SQL_TYPE_NAMES.get(name, name)

    def type_oid(self, name: str) -> int | None:
        """to_regtype(): a type's OID from its internal or SQL name (None if unknown)."""
        low = name.strip().lower().removeprefix("pg_catalog.")
        if low.endswith("[]"):
            elem = self.type_oid(low[:-2])
            found = [t[0] for t in self.types.values() if t[8] == elem and t[1].startswith("_")]
            return found[0] if elem is not None and found else None
        aliases = {v: k for k, v in _SQL_TYPE_NAMES.items()}
        aliases.update({"int": "int4", "double": "float8", "float": "float8", "decimal": "numeric",
                        "character varying": "varchar", "string": "text"})
        low = aliases.get(low, low)
        for t in self.types.values():
            if t[1] == low:
                return int(t[0])
        rel = self.by_name(low)
        return rel.oid + 1 if rel is not None else None


def table_oid(catalog_id: int) -> int:
    return FIRST_TABLE_OID + 4 * (catalog_id - 1)


def view_oid(name: str) -> int:
    return VIEW_OID_BASE + (zlib.crc32(name.lower().encode()) & 0x0FFFFFFC)


def _spark_type_oid(dtype: exp.DataType | None) -> int:
    if dtype is None:
        return OID_TEXT
    if dtype.is_type(*exp.DataType.INTEGER_TYPES):
        return OID_INT8
    if dtype.is_type(*exp.DataType.REAL_TYPES):
        return OID_FLOAT8
    if dtype.is_type(exp.DataType.Type.BOOLEAN):
        return OID_BOOL
    return OID_TEXT


def view_column_types(sql: str, names: Sequence[str], schema: dict[str, Any]) -> list[int]:
    """The PostgreSQL type OID of each output column of a view's SELECT, inferred by
    sqlglot over ``schema`` (relation -> column -> SQL type); text where it cannot tell."""
    try:
        tree = sqlglot.parse_one(sql.replace("?", "NULL"))
        tree = annotate_types(qualify(tree, schema=schema, validate_qualify_columns=False),
                              schema=schema)
        selects = tree.selects if isinstance(tree, exp.Query) else []
        oids = [_spark_type_oid(s.type) for s in selects]
    except Exception:  # a view sqlglot cannot type still lists its columns (as text)
        oids = []
    if len(oids) != len(names):
        oids = (oids + [OID_TEXT] * len(names))[: len(names)]
    return oids


def build_model(tables: Sequence[tuple[int, Any]], views: Sequence[tuple[str, str, list[str]]]
                ) -> Model:
    """``tables``: (catalog id, TableSchema); ``views``: (name, SQL, output column names),
    in creation order (a view may read the views before it)."""
    relations: list[Relation] = []
    schema: dict[str, Any] = {}
    sql_names = {OID_INT8: "BIGINT", OID_FLOAT8: "DOUBLE", OID_TEXT: "TEXT", OID_BOOL: "BOOLEAN"}
    for cid, ts in tables:
        cols = [(c.name, TYPE_OIDS[c.type]) for c in ts.columns]
        pk = [i + 1 for i, c in enumerate(ts.columns) if c.primary_key]
        relations.append(Relation(table_oid(cid), ts.name.lower(), "r", cols, pk))
        schema[ts.name.lower()] = {c.name.lower(): c.type for c in ts.columns}
    for name, sql, names in views:
        oids = view_column_types(sql, names, schema)
        relations.append(Relation(view_oid(name), name.lower(), "v", list(zip(names, oids,
                                                                                strict=True)),
                                  definition=sql))
        schema[name.lower()] = {n.lower(): sql_names[o] for n, o in zip(names, oids, strict=True)}
    types = {t[0]: t for t in BUILTIN_TYPES}
    return Model(relations, types)
