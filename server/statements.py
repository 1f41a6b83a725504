"""Statements as the engine reads them: parsing one statement, naming it, and turning
CREATE TABLE and INSERT ... VALUES into a schema and Python values (sqlglot trees in,
storage's types out). Everything refused raises InvalidArgument naming the problem."""

from __future__ import annotations

import math
import re
from typing import Any

import sqlglot.expressions as exp

from partialflow.operators.types import column_type_names, normalize_type
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.parse import parse_query, parse_statements
from partialflow.server.storage import Column, TableSchema


def parse_statement(sql: str) -> exp.Expression:
    """Parse exactly one SQL statement; malformed SQL raises InvalidArgument."""
    statements = parse_statements(sql)
    if not statements:
        raise InvalidArgument("empty statement")
    if len(statements) > 1:
        raise InvalidArgument(f"expected one statement, got {len(statements)}")
    node = statements[0]
    if isinstance(node, exp.Command) and str(node.this).upper() == "CREATE":
        _explain_unparsed_create(str(node.expression or ""))
    return node


def _explain_unparsed_create(rest: str) -> None:
    """sqlglot parses a CREATE it can't read as a raw command; say what is wrong with it
    instead of refusing it as an unsupported CREATE."""
    words = rest.split(None, 1)
    kind = words[0].upper() if words else ""
    if kind not in ("VIEW", "TABLE"):
        raise InvalidArgument(
            f"CREATE must be followed by TABLE or VIEW, got {words[0] if words else 'nothing'!r}"
        )
    if kind == "VIEW":
        m = re.search(r"\bAS\b", rest, flags=re.IGNORECASE)
        if m is None:
            raise InvalidArgument("CREATE VIEW needs AS SELECT ...: CREATE VIEW name AS SELECT ...")
        parse_query(rest[m.end() :].strip(), "malformed SQL in the view's query")
    raise InvalidArgument(
        f"malformed CREATE {kind}: expected "
        + ("CREATE TABLE name (column TYPE [PRIMARY KEY], ...)" if kind == "TABLE"
           else "CREATE VIEW name AS SELECT ...")
    )


def statement_kind(node: exp.Expression) -> str:
    """A readable name for a statement, for error messages (e.g. ``CREATE INDEX``)."""
    if isinstance(node, (exp.Create, exp.Drop)):
        verb = "CREATE" if isinstance(node, exp.Create) else "DROP"
        return f"{verb} {node.args.get('kind') or ''}".strip()
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    return type(node).__name__.upper()


def simple_name(table: exp.Expression | None, what: str) -> str:
    if not isinstance(table, exp.Table) or not table.name:
        raise InvalidArgument(f"{what}: expected a name")
    if table.args.get("db") or table.args.get("catalog"):
        raise InvalidArgument(f"{what}: qualified names like {table.sql()} are not supported")
    return table.name


def _column(node: exp.ColumnDef) -> Column:
    kind = node.args.get("kind")
    # sqlglot names the type by its own enum (INTEGER reads as INT, REAL as FLOAT).
    column_type = normalize_type(kind.this.name) if isinstance(kind, exp.DataType) else None
    if column_type is None:
        shown = kind.sql() if kind is not None else "no type"
        raise InvalidArgument(
            f"column {node.name}: unsupported type {shown}; types are {column_type_names()}"
        )
    primary = False
    for constraint in node.args.get("constraints") or ():
        if isinstance(constraint.args.get("kind"), exp.PrimaryKeyColumnConstraint):
            primary = True
        else:
            raise InvalidArgument(
                f"column {node.name}: constraint {constraint.sql()} is not supported "
                "(only PRIMARY KEY)"
            )
    return Column(node.name, column_type, primary_key=primary)


def table_schema(create: exp.Create) -> TableSchema:
    """The storage schema described by a ``CREATE TABLE`` statement."""
    schema = create.this
    if not isinstance(schema, exp.Schema) or create.args.get("expression") is not None:
        raise InvalidArgument(
            "CREATE TABLE needs a column list (CREATE TABLE ... AS is not supported)"
        )
    name = simple_name(schema.this, "CREATE TABLE")
    columns: list[Column] = []
    key: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            columns.append(_column(item))
        elif isinstance(item, exp.PrimaryKey):
            key.extend(e.name for e in item.expressions)
        else:
            raise InvalidArgument(f"CREATE TABLE {name}: {item.sql()} is not supported")
    if key:
        names = [c.name for c in columns]
        unknown = [k for k in key if k not in names]
        if unknown:
            raise InvalidArgument(
                f"CREATE TABLE {name}: PRIMARY KEY names unknown column {unknown[0]}; "
                f"columns are {', '.join(names)}"
            )
        columns = [Column(c.name, c.type, c.primary_key or c.name in key) for c in columns]
    return TableSchema(name, tuple(columns))


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal in INSERT ... VALUES."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -literal_value(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            value = float(text)
            if math.isfinite(value):
                return value
    raise InvalidArgument(f"INSERT: only literal values are supported, not {node.sql()}")
