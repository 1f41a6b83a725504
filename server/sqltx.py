"""SQL transaction blocks for ``Engine.execute``: ``BEGIN; INSERT ...; UPDATE ...; DELETE ...;
COMMIT`` (or ``ROLLBACK``) sent as one script, committed as one write over every table the
block changes (``Engine.write_many``): one LSN, all or nothing.

The statements inside are INSERT ... VALUES, UPDATE t SET col = expr [WHERE ...] and
DELETE FROM t [WHERE ...]. UPDATE and DELETE pick their rows from the committed tables at
the LSN the block starts reading at (one snapshot for the whole block); they do not see the
block's own earlier statements, and reads (SELECT) inside a block are refused. If a picked
row is gone by the time the block commits, the whole block is refused (NotFound) and
nothing is written: run it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import sqlglot.expressions as exp

from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.parse import parse_statements
from partialflow.server.statements import insert_statement, simple_name
from partialflow.server.storage import TableChange

if TYPE_CHECKING:
    from partialflow.server.storage import Storage


class TxHost(Protocol):
    """What a transaction block needs of the engine (which passes itself): the tables'
    columns and last LSN, INSERT column lists put in table order, snapshot reads."""

    storage: Storage

    def reorder(self, table: str, listed: list[str], rows: list[tuple]) -> list[tuple]: ...

    def query(self, sql: str, as_of: int | None = None) -> Any: ...

_BEGIN = ("BEGIN", "START TRANSACTION", "BEGIN TRANSACTION", "BEGIN WORK")
_COMMIT = ("COMMIT", "END", "COMMIT TRANSACTION", "COMMIT WORK")
_ROLLBACK = ("ROLLBACK", "ABORT", "ROLLBACK TRANSACTION", "ROLLBACK WORK")


def split(sql: str) -> list[str]:
    """The statements of a script, as text (semicolons inside quotes are not splits)."""
    out: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == ";":
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return [s for s in out if s]


def _norm(stmt: str) -> str:
    return " ".join(stmt.upper().split())


def is_transaction(sql: str) -> bool:
    """Whether ``sql`` is a transaction block (its first statement is BEGIN)."""
    head = sql.lstrip()[:24].upper()
    if not (head.startswith(("BEGIN", "START"))):
        return False
    parts = split(sql)
    return bool(parts) and _norm(parts[0]) in _BEGIN


def changes(engine: TxHost, sql: str) -> list[TableChange]:
    """A transaction block (BEGIN, writes, then COMMIT or ROLLBACK as its last statement)
    as the changes to commit in one write; none for ROLLBACK or a block without rows."""
    parts = split(sql)
    end = _norm(parts[-1]) if len(parts) > 1 else ""
    if end not in _COMMIT + _ROLLBACK:
        raise InvalidArgument("a transaction block ends with COMMIT or ROLLBACK: "
                              "BEGIN; INSERT ...; DELETE ...; COMMIT")
    body = parts[1:-1]
    changes: list[TableChange] = []
    as_of: int | None = None  # the one snapshot UPDATE/DELETE pick their rows from
    for i, text in enumerate(body, 1):
        word = _norm(text).split(" ", 1)[0]
        if word in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"):
            raise InvalidArgument(f"statement {i} of the transaction: {word} inside a "
                                  "transaction block (blocks do not nest)")
        if word not in ("INSERT", "UPDATE", "DELETE"):
            raise InvalidArgument(
                f"statement {i} of the transaction: only INSERT, UPDATE and DELETE may run "
                f"inside a transaction block, not {word} (reads see committed data: run "
                "them before BEGIN or after COMMIT)")
        nodes = parse_statements(text)
        node = nodes[0] if len(nodes) == 1 else None
        if isinstance(node, exp.Insert):
            changes.append(_insert(engine, node))
            continue
        if as_of is None:
            as_of = engine.storage.last_lsn
        if isinstance(node, exp.Delete):
            table, rows = _picked(engine, node, "DELETE", as_of)
            changes.append(TableChange(table, deletes=rows))
        elif isinstance(node, exp.Update):
            changes.append(_update(engine, node, as_of))
        else:
            raise InvalidArgument(f"statement {i} of the transaction: cannot parse {text!r}")
    if end in _ROLLBACK or not any(c.inserts or c.deletes for c in changes):
        return []
    return changes


def _insert(engine: TxHost, node: exp.Insert) -> TableChange:
    stmt = insert_statement(node)
    rows = stmt.rows
    if stmt.columns:
        rows = engine.reorder(stmt.table, stmt.columns, rows)
    return TableChange(stmt.table, inserts=rows)


def _target(engine: TxHost, node: exp.Expression, kind: str) -> tuple[str, list[str]]:
    if node.args.get("returning"):
        raise InvalidArgument(f"{kind} ... RETURNING is not supported")
    if node.args.get("from") or node.args.get("from_") or node.args.get("using"):
        raise InvalidArgument(f"{kind} ... FROM/USING is not supported")
    table = simple_name(node.this, kind)
    names = [c.name for c in engine.storage.table(table).columns]
    return table, names


def _picked(engine: TxHost, node: exp.Expression, kind: str, as_of: int,
            extra: list[exp.Expression] | None = None) -> tuple[str, list[tuple]]:
    """The rows ``node`` (an UPDATE or DELETE) picks at ``as_of``, each followed by the
    values of ``extra`` for it."""
    table, names = _target(engine, node, kind)
    q = exp.select(*[exp.column(n, quoted=True) for n in names], *(extra or [])).from_(table)
    where = node.args.get("where")
    if where is not None:
        q = q.where(where.this.copy())
    rows = engine.query(q.sql(dialect="spark"), as_of=as_of).rows
    return table, [tuple(r) for r in rows]


def _update(engine: TxHost, node: exp.Update, as_of: int) -> TableChange:
    table, names = _target(engine, node, "UPDATE")
    low = [n.lower() for n in names]
    sets: dict[int, Any] = {}
    for a in node.expressions:
        if not isinstance(a, exp.EQ) or not isinstance(a.left, exp.Column):
            raise InvalidArgument(f"UPDATE: expected SET column = value, got {a.sql()}")
        if a.left.name.lower() not in low:
            raise InvalidArgument(f"UPDATE of {table}: unknown column {a.left.name}; columns "
                                  f"are {', '.join(names)}")
        sets[low.index(a.left.name.lower())] = a.right.copy()
    _, rows = _picked(engine, node, "UPDATE", as_of, list(sets.values()))
    n = len(names)
    old = [r[:n] for r in rows]
    new = []
    for r in rows:
        row = list(r[:n])
        for j, i in enumerate(sets):
            row[i] = r[n + j]
        new.append(tuple(row))
    return TableChange(table, inserts=new, deletes=old)
