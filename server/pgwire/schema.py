"""Types of what a statement reads and of its parameters, from our schema.

Result columns: a base table's columns have their declared types; a view's and a query's
computed columns are typed by sqlglot's type annotation over the base tables' schema
(COUNT -> bigint, AVG -> double, ...). Parameters: ``$n`` compared with (or assigned to, or
inserted into) a column takes that column's type, as PostgreSQL infers it.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
import sqlglot.expressions as exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from partialflow.server.errors import NotFound
from partialflow.server.pgwire import types
from partialflow.server.pgwire.sqltext import bind_params, param_count

_SQLGLOT_TYPES = {
    "BIGINT": types.OID_INT8, "INT": types.OID_INT8, "SMALLINT": types.OID_INT8,
    "TINYINT": types.OID_INT8, "DOUBLE": types.OID_FLOAT8, "FLOAT": types.OID_FLOAT8,
    "DECIMAL": types.OID_FLOAT8, "BOOLEAN": types.OID_BOOL, "TEXT": types.OID_TEXT,
    "VARCHAR": types.OID_TEXT, "CHAR": types.OID_TEXT,
}
_COMPARED = re.compile(r"([A-Za-z_][\w.]*)\s*(?:=|<>|!=|<=|>=|<|>)\s*\$(\d+)\b")
_COMPARED_R = re.compile(r"\$(\d+)\s*(?:=|<>|!=|<=|>=|<|>)\s*([A-Za-z_][\w.]*)")
_IN = re.compile(r"([A-Za-z_][\w.]*)\s+IN\s*\(([^)]*)\)", re.I)
_LIMIT = re.compile(r"\b(?:LIMIT|OFFSET)\s+\$(\d+)", re.I)
_RELATIONS = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TO)\s+([A-Za-z_]\w*)", re.I)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+([A-Za-z_]\w*)\s*(?:\(([^)]*)\))?\s*VALUES\s*(.*)$",
                     re.I | re.S)


class Schema:
    """Reads the engine's tables and views; nothing is cached across DDL."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        # A view's column types by its SQL: typing it costs a sqlglot analysis (about a
        # millisecond), and a view's SQL fixes its types (its tables cannot be dropped
        # under it; a view made again under the name has its own SQL text).
        self._view_types: dict[str, list[tuple[str, int]]] = {}

    def tables(self) -> dict[str, dict[str, str]]:
        return {t.name.lower(): {c.name.lower(): str(c.type) for c in t.columns}
                for t in self.engine.storage.tables()}

    def view(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.engine.view_schema(name))
        except NotFound:
            return None

    def relation_columns(self, name: str) -> dict[str, int]:
        """Column name -> OID of a table or view (empty if neither)."""
        table = self.tables().get(name.lower())
        if table is not None:
            return {c: types.oid_of_type(t) for c, t in table.items()}
        view = self.view(name)
        if view is None:
            return {}
        out = {c.lower(): oid for c, oid in self.view_columns(view)}
        for root, base, typ in view["keys"]:
            for c in (root, base):
                if c and typ:
                    out.setdefault(c.lower(), types.oid_of_type(typ))
        return out

    def view_columns(self, view: dict[str, Any]) -> list[tuple[str, int]]:
        """A view's visible columns and their OIDs (text where annotation cannot tell)."""
        key = view["sql"] + "\0" + ",".join(view["columns"])
        found = self._view_types.get(key)
        if found is None:
            typed = dict(self.annotate(view["sql"].replace("?", "NULL")) or [])
            found = [(c, typed.get(c.lower(), types.OID_TEXT)) for c in view["columns"]]
            if len(self._view_types) > 1000:
                self._view_types.clear()
            self._view_types[key] = found
        return found

    def annotate(self, sql: str) -> list[tuple[str, int]] | None:
        """A SELECT's output columns typed by sqlglot over the base tables (None if it
        cannot be analysed); names lower-cased."""
        schema: dict[str, Any] = dict(self.tables())
        try:
            tree = sqlglot.parse_one(sql)
            if not isinstance(tree, exp.Query):
                return None
            tree = annotate_types(qualify(tree, schema=schema, validate_qualify_columns=False),
                                  schema=schema)
        except Exception:
            return None
        out = []
        for s in tree.selects:
            t = s.type.this.name if s.type is not None else ""
            out.append((s.alias_or_name.lower(), _SQLGLOT_TYPES.get(t, 0)))
        return out

    def query_columns(self, sql: str, nparams: int) -> list[tuple[str, int]] | None:
        typed = self.annotate(bind_params(sql, [None] * nparams))
        if typed is None or any(o == 0 for _, o in typed):
            return None
        return typed

    def param_oids(self, sql: str, given: list[int]) -> list[int]:
        """Each ``$n``'s OID: the client's where it gave one, else the type of the column it
        is compared with, assigned to or inserted into; text when nothing says."""
        n = max(param_count(sql), len(given))
        oids = list(given) + [0] * (n - len(given))
        if all(oids):
            return oids
        columns: dict[str, int] = {}
        for rel in _RELATIONS.findall(sql):
            for c, oid in self.relation_columns(rel).items():
                columns.setdefault(c, oid)
        found: dict[int, int] = {}
        for col, i in _COMPARED.findall(sql):
            if col.split(".")[-1].lower() in columns:
                found.setdefault(int(i), columns[col.split(".")[-1].lower()])
        for i, col in _COMPARED_R.findall(sql):
            if col.split(".")[-1].lower() in columns:
                found.setdefault(int(i), columns[col.split(".")[-1].lower()])
        for col, inside in _IN.findall(sql):
            in_oid = columns.get(col.split(".")[-1].lower())
            if in_oid:
                for i in re.findall(r"\$(\d+)", inside):
                    found.setdefault(int(i), in_oid)
        for i in _LIMIT.findall(sql):
            found.setdefault(int(i), types.OID_INT8)
        m = _INSERT.match(sql)
        if m:
            table = self.tables().get(m.group(1).lower(), {})
            names = ([c.strip().strip('"').lower() for c in m.group(2).split(",")]
                     if m.group(2) else list(table))
            for group in re.findall(r"\(([^)]*)\)", m.group(3)):
                for pos, item in enumerate(group.split(",")):
                    p = re.fullmatch(r"\s*\$(\d+)\s*", item)
                    if p and pos < len(names) and names[pos] in table:
                        found.setdefault(int(p.group(1)), types.oid_of_type(table[names[pos]]))
        return [o or found.get(i + 1, types.OID_TEXT) for i, o in enumerate(oids)]
