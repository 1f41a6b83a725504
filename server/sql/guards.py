"""A scalar subquery that may return several rows: its value, and an error at read time.

SQL makes a scalar subquery's second row an error when it happens, not when the query is
written (PostgreSQL: SQLSTATE 21000, "more than one row returned by a subquery used as an
expression"). The view cannot refuse data it has not seen, so the subquery is maintained
like any other: ``markers.py`` plans it as its rows' count and value per correlation value,
``_n = COUNT(*)`` and ``_v = MIN(v)`` (with one row, MIN is that row's value, NULL
included; with none, the left join's NULL, as SQL has it), joined to the outer rows.

This module carries ``_n > 1`` to the reader as a *guard*, a hidden column of the view:

* a WHERE condition over the value keeps its row when the guard is set (``cond OR
  guard``), so a row whose subquery has too many rows reaches the reader whatever the
  condition would say of a meaningless value;
* the outermost projection adds the guard as a hidden column (``ViewPlan.guards``);
* a read of a key whose rows carry a set guard fails with ``FailedPrecondition`` naming
  the view, the key and the subquery (``check_rows``), until a write leaves at most one
  row; the pgwire front end maps it to 21000.

Only the outermost SELECT without GROUP BY, aggregates, DISTINCT or LIMIT carries guards to
the reader (a grouped or limited query would have to carry them through its operators);
elsewhere such a subquery is refused, naming it and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from partialflow.server.errors import FailedPrecondition, InvalidArgument
from partialflow.server.sql.binding import SYNTHETIC

# PostgreSQL's words for the error (errcodes 21000, cardinality_violation).
TOO_MANY_ROWS = "more than one row returned by a subquery used as an expression"


@dataclass(frozen=True)
class Guard:
    value: str  # the synthetic column holding the subquery's value
    count: str  # the synthetic column holding its row count
    shown: str  # the subquery as the user wrote it (clipped)

    def expr(self) -> exp.Expression:
        """``COALESCE(count, 0) > 1``: NULL counts (no correlation value) are no rows."""
        n = exp.Coalesce(this=exp.column(self.count, table=SYNTHETIC),
                         expressions=[exp.Literal.number(0)])
        return exp.GT(this=n, expression=exp.Literal.number(1))


def guarded(conjuncts: list[exp.Expression], guards: Sequence[Guard]) -> list[exp.Expression]:
    """WHERE ``conjuncts`` with each one over a guarded value ORed with its guards, so a
    row whose subquery has several rows is kept for the reader to refuse."""
    if not guards:
        return conjuncts
    out = []
    for conj in conjuncts:
        names = {c.name for c in conj.find_all(exp.Column) if c.table == SYNTHETIC}
        mine = [g for g in guards if g.value in names]
        if not mine:
            out.append(conj)
            continue
        test: exp.Expression = exp.Paren(this=conj)
        for g in mine:
            test = exp.Or(this=test, expression=g.expr())
        out.append(test)
    return out


def refuse_here(guards: Sequence[Guard], where: str) -> None:
    """Refuses a several-row scalar subquery in a query that cannot carry its guard."""
    if guards:
        raise InvalidArgument(
            f"{guards[0].shown} may return more than one row (it computes no aggregate, or "
            f"has GROUP BY), which is an error SQL reports when a read meets it; that check "
            f"is kept only in the outermost SELECT without GROUP BY, aggregates, DISTINCT or "
            f"LIMIT, not {where}; select MAX(...) or MIN(...) of the column, or define a view "
            "over this one")


def refuse_view_over(name: str, guards: tuple[tuple[int, str], ...]) -> None:
    """Refuses a view over view ``name`` if its reads check guards (a view over it would
    read its rows without them)."""
    if guards:
        raise InvalidArgument(
            f"view {name!r} has a scalar subquery that may return more than one row, which "
            "its own reads check; a view over it would lose that check: define this one over "
            "the tables instead")


def check_rows(guards: tuple[tuple[int, str], ...], view: str, key: Any,
               rows: Sequence[Sequence[Any]]) -> None:
    """Raises ``FailedPrecondition`` if a row of ``key`` has a set guard column."""
    for pos, shown in guards:
        if any(r[pos] for r in rows):
            where = f"key {tuple(key)!r} of view {view!r}" if key else f"view {view!r}"
            raise FailedPrecondition(
                f"{TOO_MANY_ROWS}: {shown} returns more than one row for a row of {where}; "
                "reads of it fail until a write leaves the subquery at most one row")
