"""Statements as the engine reads them: one statement parsed into a typed statement
(``parse``), with CREATE TABLE and INSERT ... VALUES turned into a schema and Python
values (sqlglot trees in, typed statements of storage's types out). Everything refused
raises InvalidArgument naming the problem, before the engine changes anything.

The engine runs them by their type (``dispatch.run``); a new statement is a class here, a
case in ``_typed`` and a case there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import sqlglot.expressions as exp

from partialflow.operators.types import column_type_names, normalize_type
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.parse import parse_query, parse_statements
from partialflow.server.sql.refusals import refuse_constructs
from partialflow.server.storage import Column, TableSchema

SUPPORTED = (
    "CREATE TABLE, CREATE VIEW, DROP TABLE, DROP VIEW, INSERT ... VALUES, SELECT or EXPLAIN"
)


@dataclass(frozen=True)
class Select:
    """A query over the base tables, run on Spark at a snapshot; ``sql`` as written."""

    sql: str


@dataclass(frozen=True)
class CreateTable:
    schema: TableSchema
    if_not_exists: bool = False


@dataclass(frozen=True)
class CreateView:
    """``query``: the view's SELECT as sqlglot prints it (the planner's input)."""

    name: str
    query: str
    if_not_exists: bool = False


@dataclass(frozen=True)
class Drop:
    """DROP TABLE or DROP VIEW (``kind``) of one name."""

    kind: str  # "TABLE" or "VIEW"
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class Insert:
    """INSERT ... VALUES: rows of Python values, in the order of ``columns`` when the
    statement lists them (None: the table's own order)."""

    table: str
    rows: list[tuple]
    columns: list[str] | None = None


@dataclass(frozen=True)
class ExplainView:
    """``EXPLAIN v``: an existing view's dataflow tree."""

    name: str


@dataclass(frozen=True)
class ExplainCreate:
    """``EXPLAIN CREATE VIEW v AS ...``: a dry run of the view's planning."""

    name: str
    query: str


@dataclass(frozen=True)
class Begin:
    """BEGIN / START TRANSACTION (``kind`` names it as written, for messages)."""

    kind: str = "TRANSACTION"


@dataclass(frozen=True)
class Commit:
    kind: str = "COMMIT"


@dataclass(frozen=True)
class Rollback:
    kind: str = "ROLLBACK"


Statement = (
    Select | CreateTable | CreateView | Drop | Insert | ExplainView | ExplainCreate
    | Begin | Commit | Rollback
)


def parse(sql: str) -> Statement:
    """One SQL statement as a typed statement; anything refused raises InvalidArgument."""
    return _typed(parse_statement(sql), sql)


def _typed(node: exp.Expression, sql: str) -> Statement:
    if isinstance(node, exp.Query):
        return Select(sql)
    if isinstance(node, exp.Create) and node.args.get("kind") == "TABLE":
        if node.args.get("replace"):
            raise InvalidArgument("CREATE OR REPLACE TABLE is not supported")
        return CreateTable(table_schema(node), bool(node.args.get("exists")))
    if isinstance(node, exp.Create) and node.args.get("kind") == "VIEW":
        return _create_view(node, sql)
    if isinstance(node, exp.Drop) and node.args.get("kind") in ("TABLE", "VIEW"):
        return _drop(node)
    if isinstance(node, exp.Insert):
        return insert_statement(node)
    if isinstance(node, exp.Command) and str(node.this).upper() == "EXPLAIN":
        return _explain(node)
    if isinstance(node, exp.Transaction):
        return Begin(statement_kind(node))
    if isinstance(node, exp.Commit):
        return Commit()
    if isinstance(node, exp.Rollback):
        return Rollback()
    raise InvalidArgument(f"unsupported statement {statement_kind(node)}; expected {SUPPORTED}")


def _create_view(node: exp.Create, sql: str) -> CreateView:
    if node.args.get("replace"):
        raise InvalidArgument("CREATE OR REPLACE VIEW is not supported; DROP VIEW first")
    name = simple_name(node.this, "CREATE VIEW")
    query = node.args.get("expression")
    if not isinstance(query, exp.Query):
        raise InvalidArgument(f"CREATE VIEW {name}: expected AS SELECT ...")
    # Here, where positions are still those of the user's statement (the planner sees the
    # query printed again by sqlglot).
    refuse_constructs(query, sql)
    return CreateView(name, query.sql(), bool(node.args.get("exists")))


def _drop(node: exp.Drop) -> Drop:
    kind = node.args["kind"]
    # sqlglot keeps the dropped names under "tables" (older releases: "this").
    tables = node.args.get("tables") or ([node.this] if node.this is not None else [])
    if len(tables) != 1:
        raise InvalidArgument(f"DROP {kind}: drop one {kind.lower()} per statement")
    if node.args.get("cascade"):
        raise InvalidArgument(f"DROP {kind} ... CASCADE is not supported")
    return Drop(kind, simple_name(tables[0], f"DROP {kind}"), bool(node.args.get("exists")))


def insert_statement(node: exp.Insert) -> Insert:
    """A parsed INSERT ... VALUES as its typed statement (also used by transaction blocks)."""
    target = node.this
    listed = target.expressions if isinstance(target, exp.Schema) else None
    name = simple_name(target.this if isinstance(target, exp.Schema) else target, "INSERT")
    values = node.args.get("expression")
    if not isinstance(values, exp.Values):
        raise InvalidArgument("INSERT: only INSERT ... VALUES is supported")
    rows = [tuple(literal_value(v) for v in t.expressions) for t in values.expressions]
    return Insert(name, rows, [c.name for c in listed] if listed else None)


def _explain(node: exp.Command) -> ExplainView | ExplainCreate:
    rest = node.expression.this if isinstance(node.expression, exp.Literal) else ""
    target = parse_statement(rest) if rest.strip() else None
    if isinstance(target, exp.Create) and target.args.get("kind") == "VIEW":
        name = simple_name(target.this, "EXPLAIN CREATE VIEW")
        query = target.args.get("expression")
        if not isinstance(query, exp.Query):
            raise InvalidArgument(f"EXPLAIN CREATE VIEW {name}: expected AS SELECT ...")
        return ExplainCreate(name, query.sql())
    if isinstance(target, exp.Column) and not target.table:
        return ExplainView(target.name)
    raise InvalidArgument(
        "EXPLAIN takes CREATE VIEW name AS SELECT ... (a dry run) or a view's name"
    )


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
