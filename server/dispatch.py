"""Running a typed statement (``statements.parse``) for the engine: DDL onto storage (tables)
and the dataflow's view catalog (views), INSERT ... VALUES as one write, EXPLAIN as the
dataflow's plan, a plain SELECT on Spark at a snapshot (``Engine.query``).

Kept apart from the engine, which owns storage and the dataflow and passes itself as the
``StatementHost``: this module only turns statements into the engine's calls. A new
statement type is a class in ``statements.py`` and a case in ``run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from partialflow.server.errors import AlreadyExists, InvalidArgument, NotFound
from partialflow.server.statements import (
    SUPPORTED,
    Begin,
    Commit,
    CreateTable,
    CreateView,
    Drop,
    ExplainCreate,
    ExplainView,
    Insert,
    Rollback,
    Select,
    Statement,
)

if TYPE_CHECKING:
    from partialflow.server.bulk import BulkLoader
    from partialflow.server.dataflow import Dataflow
    from partialflow.server.storage import Storage


@dataclass
class ResultSet:
    """What every statement returns: rows, their column names, and the LSN they hold at."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    lsn: int = 0


class StatementHost(Protocol):
    """What running a statement needs of the engine (which passes itself)."""

    storage: Storage
    dataflow: Dataflow
    loader: BulkLoader
    follower: Any  # the follower when following (it refuses drops of followed tables)

    def query(self, sql: str, as_of: int | None = None) -> ResultSet: ...

    def write(self, table: str, inserts: Sequence[Sequence[Any]] = (),
              deletes: Sequence[Sequence[Any]] = ()) -> int: ...

    def explain(self, view: str) -> tuple[str, str]: ...

    def recluster(self) -> None: ...


def run(host: StatementHost, stmt: Statement) -> ResultSet:
    """Run one typed statement."""
    match stmt:
        case Select():
            return host.query(stmt.sql)
        case CreateTable():
            return _create_table(host, stmt)
        case CreateView():
            return _create_view(host, stmt)
        case Drop():
            return _drop(host, stmt)
        case Insert():
            return _insert(host, stmt)
        case ExplainCreate():
            return _plan_lines(host, host.dataflow.explain_create(stmt.name, stmt.query))
        case ExplainView():
            return _plan_lines(host, host.explain(stmt.name)[0])
        case Begin() | Commit() | Rollback():
            raise InvalidArgument(
                f"unsupported statement {stmt.kind}; expected {SUPPORTED}"
            )
    raise AssertionError(f"no case for {type(stmt).__name__}")  # a new statement type


def _plan_lines(host: StatementHost, text: str) -> ResultSet:
    """EXPLAIN's answer: the dataflow tree, one line per row of a single ``plan`` column."""
    lines = text.rstrip("\n").splitlines()
    return ResultSet(["plan"], [(line,) for line in lines], host.storage.last_lsn)


def _done(host: StatementHost) -> ResultSet:
    return ResultSet([], [], host.storage.last_lsn)


def _create_table(host: StatementHost, stmt: CreateTable) -> ResultSet:
    try:
        host.storage.create_table(stmt.schema)
    except AlreadyExists:
        if not stmt.if_not_exists:
            raise
    return _done(host)


def _create_view(host: StatementHost, stmt: CreateView) -> ResultSet:
    try:
        host.dataflow.create_view(stmt.name, stmt.query)
    except AlreadyExists:
        if not stmt.if_not_exists:
            raise
    host.recluster()
    return _done(host)


def _drop(host: StatementHost, stmt: Drop) -> ResultSet:
    name = stmt.name
    try:
        if stmt.kind == "VIEW":
            host.dataflow.drop_view(name)
            host.recluster()
        else:
            if host.follower is not None:  # a followed table: refused, naming the upstream
                host.follower.check_drop(name)
            host.dataflow.check_drop_table(name)
            host.storage.drop_table(name)
            # A table made again under this name starts empty: its files may load again.
            host.loader.forget_table(name)
    except NotFound:
        if not stmt.if_exists:
            raise
    return _done(host)


def _insert(host: StatementHost, stmt: Insert) -> ResultSet:
    rows = stmt.rows
    if stmt.columns:
        names = [c.name for c in host.storage.table(stmt.table).columns]
        rows = reorder(names, stmt.table, stmt.columns, rows)
    return ResultSet([], [], host.write(stmt.table, inserts=rows))


def reorder(names: list[str], table: str, listed: list[str], rows: list[tuple]) -> list[tuple]:
    """Rows given for a column list, in the table's column order ``names`` (NULL for the
    rest)."""
    # Names match as Spark matches them, whatever the case; each may be listed once
    # (a second value for a column would otherwise be dropped without a word).
    known = {n.lower(): n for n in names}
    unknown = [c for c in listed if c.lower() not in known]
    if unknown:
        raise InvalidArgument(
            f"INSERT into {table}: unknown column {unknown[0]}; columns are {', '.join(names)}"
        )
    position: dict[str, int] = {}
    for i, c in enumerate(listed):
        if c.lower() in position:
            raise InvalidArgument(f"INSERT into {table}: column {c} is listed twice")
        position[c.lower()] = i
    for row in rows:
        if len(row) != len(listed):
            raise InvalidArgument(
                f"INSERT into {table}: {len(row)} values for {len(listed)} columns"
            )
    where = [position.get(n.lower()) for n in names]
    return [tuple(None if i is None else row[i] for i in where) for row in rows]
