"""A client's catalog query, parsed by sqlglot as PostgreSQL, made runnable on our DuckDB.

Only names change: catalog relations get their prefixed names (catalog_db.py), functions we
emulate become ``pf_*``, the ``reg*`` casts become lookups, PostgreSQL-only types become
DuckDB's, ``OPERATOR(pg_catalog.~)`` a regular-expression match and ``COLLATE`` goes away.
Unaliased output columns are named the way PostgreSQL names them (``format_type``,
``?column?``, ...), since drivers read columns by name. Parameters stay ``$n`` (DuckDB binds
them); each one's type is read from the cast around it, as PostgreSQL infers it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from partialflow.server.errors import InvalidArgument, NotFound

# `x::oid[]` is PostgreSQL's spelling sqlglot cannot parse; `x::_oid` (the array type's
# internal name) means the same and parses.
_ARRAY_CAST = re.compile(r'::\s*(?:pg_catalog\.)?"?(\w+)"?\s*\[\s*\]')
_REG_TYPES = {"regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole",
              "regoper", "regoperator", "regconfig"}
# PostgreSQL types without a DuckDB namesake.
_DUCK_TYPES = {
    "oid": "UINTEGER", "xid": "BIGINT", "cid": "BIGINT", "tid": "VARCHAR", "name": "VARCHAR",
    "char": "VARCHAR", "bpchar": "VARCHAR", "text": "VARCHAR", "int2vector": "SMALLINT[]",
    "oidvector": "UINTEGER[]", "_oid": "UINTEGER[]", "_int8": "BIGINT[]", "_int4": "INTEGER[]",
    "_int2": "SMALLINT[]", "_text": "VARCHAR[]", "_name": "VARCHAR[]", "_char": "VARCHAR[]",
    "_varchar": "VARCHAR[]", "_bool": "BOOLEAN[]", "_float8": "DOUBLE[]", "_aclitem": "VARCHAR[]",
    "aclitem": "VARCHAR", "pg_node_tree": "VARCHAR", "regclass": "UINTEGER", "int8": "BIGINT",
    "int4": "INTEGER", "int2": "SMALLINT", "float8": "DOUBLE", "float4": "REAL", "bool": "BOOLEAN",
}
_FUNC_NAMES = {"CurrentVersion": "version", "CurrentDatabase": "current_database",
               "CurrentSchema": "current_schema", "CurrentUser": "current_user",
               "SessionUser": "session_user", "CurrentCatalog": "current_catalog",
               "CurrentSchemas": "current_schemas",
               "ArrayAgg": "array_agg"}
_RENAMED_TYPED = {exp.CurrentVersion: "pf_version", exp.CurrentDatabase: "pf_current_database",
                  exp.CurrentSchema: "pf_current_schema", exp.CurrentUser: "pf_current_user",
                  exp.SessionUser: "pf_session_user", exp.CurrentCatalog: "pf_current_database",
                  exp.CurrentSchemas: "pf_current_schemas"}


class Rewritten:
    """A query ready for DuckDB: its text, and the type name each ``$n`` was cast to."""

    def __init__(self, sql: str, param_types: dict[int, str], n_params: int,
                 param_columns: dict[int, str]) -> None:
        self.sql = sql
        self.param_types = param_types  # $n -> the type it is cast to
        self.n_params = n_params
        self.param_columns = param_columns  # $n -> the catalog column it is compared with


def _type_name(dt: exp.DataType) -> str:
    """``pg_catalog.regclass`` -> ``regclass``; ``INT8`` -> ``int8``."""
    kind = dt.args.get("kind")
    if isinstance(kind, exp.Dot):
        return kind.expression.name.lower()
    if isinstance(kind, exp.Identifier):
        return kind.name.lower()
    return dt.sql("postgres").lower()


def _cast_type(cast: exp.Cast) -> str:
    to = cast.args["to"]
    if isinstance(to, exp.DataType):
        return _type_name(to)
    return to.sql("postgres").lower().removeprefix("pg_catalog.")


def pg_column_name(e: exp.Expr) -> str:
    """The name PostgreSQL gives an unaliased output column (its FigureColname)."""
    return _figure(e)[0]


def _figure(e: exp.Expr) -> tuple[str, int]:
    """(name, strength) as PostgreSQL figures it: 2 for a column's or function's name, 1 for
    a weak guess (a cast's type, ``case``) that an enclosing cast may override."""
    if isinstance(e, exp.Column):
        return e.name, 2
    if isinstance(e, (exp.Paren, exp.Bracket)):
        return _figure(e.this)
    if isinstance(e, exp.Dot):
        return _figure(e.expression) if isinstance(e.expression, exp.Func) \
            else (e.expression.name, 2)
    if isinstance(e, exp.Cast):
        name, strength = _figure(e.this)
        return (name, strength) if strength > 1 else (_cast_type(e).lstrip("_"), 1)
    if isinstance(e, exp.Anonymous):
        return str(e.this).lower(), 2
    if isinstance(e, exp.Case):
        return "case", 1
    if isinstance(e, exp.Array):
        return "array", 2
    if isinstance(e, exp.Exists):
        return "exists", 2
    if isinstance(e, exp.Subquery) and isinstance(e.this, exp.Select) and e.this.selects:
        first = e.this.selects[0]
        return (first.alias, 2) if first.alias else _figure(first)
    if isinstance(e, exp.Func) and not isinstance(e, (exp.Binary, exp.Predicate)):
        return _FUNC_NAMES.get(type(e).__name__, e.sql_name().lower()), 2
    return "?column?", 0


def _name_outputs(tree: exp.Expr) -> None:
    query = tree
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return
    for i, sel in enumerate(query.expressions):
        if isinstance(sel, (exp.Alias, exp.Star)) or (
                isinstance(sel, exp.Column) and isinstance(sel.this, exp.Star)):
            continue
        query.expressions[i] = exp.alias_(sel, pg_column_name(sel), quoted=True)


def rewrite(sql: str, tables: Iterable[str], functions: Iterable[str]) -> Rewritten:
    """``tables``: our prefixed relation names; ``functions``: our ``pf_`` function names."""
    known_tables = set(tables)
    known_funcs = set(functions)
    try:
        trees = sqlglot.parse(_ARRAY_CAST.sub(r"::_\1", sql), read="postgres")
    except SqlglotError as e:
        raise InvalidArgument(f"cannot parse catalog query: {str(e).splitlines()[0]}") from None
    found = [t for t in trees if t is not None]
    if len(found) != 1:
        raise InvalidArgument("catalog queries are answered one statement at a time")
    tree: exp.Expr = normalize_identifiers(found[0], dialect="postgres")
    _name_outputs(tree)
    param_types: dict[int, str] = {}
    param_columns: dict[int, str] = {}
    n_params = 0

    def fn_name(name: str) -> str | None:
        low = name.lower().lstrip("_").removeprefix("pg_")
        for cand in (f"pf_{name.lower()}", f"pf_{low}", f"pf_pg_{low}"):
            if cand in known_funcs:
                return cand
        return None

    def visit(node: exp.Expr) -> exp.Expr:
        # sqlglot does not descend into a node the function replaced: do it here.
        new = replace(node)
        return node if new is node else new.transform(visit)

    def replace(node: exp.Expr) -> exp.Expr:
        nonlocal n_params
        if isinstance(node, exp.Parameter) and node.this is not None:
            n = int(node.this.name)
            n_params = max(n_params, n)
            parent = node.parent
            if isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
                other = parent.expression if parent.this is node else parent.this
                if isinstance(other, exp.Column) and n not in param_types:
                    param_columns[n] = other.name.lower()  # typed like the column, in describe
            return node
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Parameter):
            # (setdefault: the cast rewritten to DuckDB's type is visited again)
            param_types.setdefault(int(node.this.this.name), _cast_type(node))
        if isinstance(node, exp.Collate):
            return node.this
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator")).lower().removeprefix("pg_catalog.")
            regex = exp.RegexpLike(this=node.this, expression=node.expression)
            if op == "~":
                return regex
            if op == "!~":
                return exp.Not(this=regex)
            raise InvalidArgument(f"operator {op} is not supported in catalog queries")
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and \
                node.this.name.lower() in ("pg_catalog", "information_schema") and \
                isinstance(node.expression, exp.Func):
            return node.expression
        if isinstance(node, exp.Anonymous):
            new = fn_name(str(node.this))
            if new is not None:
                node.set("this", new)
            return node
        for cls, name in _RENAMED_TYPED.items():
            if type(node) is cls:
                args = [node.this] if isinstance(node.this, exp.Expr) else []
                return exp.Anonymous(this=name, expressions=args)
        if isinstance(node, exp.Cast):
            return _cast(node)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
            node.set("db", None)  # pg_catalog.generate_series(...) AS s
            if isinstance(node.this, (exp.ExplodingGenerateSeries, exp.GenerateSeries,
                                      exp.Unnest)) or (isinstance(node.this, exp.Anonymous)
                                                       and node.this.name.lower()
                                                       in ("generate_series", "unnest")):
                return node
            # A scalar function in FROM (Grafana's string_to_array(...) s) is a one-row
            # relation whose one column has the alias's name, as in PostgreSQL.
            alias = node.alias or "f"
            return exp.select(exp.alias_(node.this, alias)).subquery(alias)
        if isinstance(node, exp.Column) and not node.table and not node.this.quoted and \
                node.name.lower() == "user":
            return exp.Anonymous(this="pf_current_user", expressions=[])  # PostgreSQL's USER
        if isinstance(node, exp.Div) and node.args.get("typed") and not any(
                (isinstance(x, exp.Literal) and not x.is_int) or (isinstance(x, exp.Cast) and
                _cast_type(x) in ("float8", "float4", "double precision", "real", "numeric",
                                  "double", "float", "decimal"))
                for x in (node.this, node.expression)):
            # PostgreSQL divides integers to an integer (server_version_num::int / 100).
            return exp.IntDiv(this=node.this, expression=node.expression)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            return _table(node, known_tables)
        return node

    tree = tree.transform(visit)
    return Rewritten(tree.sql(dialect="duckdb"), param_types, n_params, param_columns)


def _reg(t: str, value: exp.Expr, *, as_text: bool) -> exp.Expr:
    """A reg* cast: a name literal becomes its OID (``pf_regclass_in``), an OID its name
    (``pf_regclass_out``); ``as_text`` (cast on to text) always ends with the name."""
    if isinstance(value, exp.Literal) and value.is_string:
        oid = exp.Anonymous(this=f"pf_{t}_in", expressions=[value])
        return exp.Anonymous(this=f"pf_{t}_out", expressions=[oid]) if as_text else oid
    return exp.Anonymous(this=f"pf_{t}_out", expressions=[value])


def _cast(node: exp.Cast) -> exp.Expr:
    t = _cast_type(node)
    if t in _REG_TYPES:
        return _reg(t, node.this, as_text=False)
    inner = node.this
    if t in ("text", "varchar", "name") and isinstance(inner, exp.Cast) and \
            _cast_type(inner) in _REG_TYPES:
        return exp.Cast(this=_reg(_cast_type(inner), inner.this, as_text=True),
                        to=exp.DataType.build("VARCHAR", dialect="duckdb"))
    to = node.args["to"]
    foreign = not isinstance(to, exp.DataType) or to.this == exp.DataType.Type.USERDEFINED
    if foreign and t in _DUCK_TYPES:  # (DuckDB's own types print as PostgreSQL's: keep them)
        return exp.Cast(this=node.this, to=exp.DataType.build(_DUCK_TYPES[t], dialect="duckdb"))
    return node


def _table(node: exp.Table, known: set[str]) -> exp.Expr:
    schema = node.db.lower()
    name = node.name.lower()
    if schema in ("", "pg_catalog"):
        target = f"pc_{name}"
    elif schema == "information_schema":
        target = f"is_{name}"
    else:
        return node
    if target not in known:
        if schema or name.startswith("pg_"):
            where = f"{schema}." if schema else ""
            raise NotFound(f'relation "{where}{name}" is not emulated by partialflow\'s catalog')
        return node  # a CTE or a subquery's alias
    alias = node.args.get("alias")
    new = exp.Table(this=exp.to_identifier(target))
    new.set("alias", alias if alias is not None else exp.TableAlias(
        this=exp.to_identifier(name)))
    return new


def cached(fn: Callable[[str], Rewritten], size: int = 512) -> Callable[[str], Rewritten]:
    """Rewrites are pure in the SQL text: clients send the same few again and again."""
    from functools import lru_cache

    return lru_cache(maxsize=size)(fn)
