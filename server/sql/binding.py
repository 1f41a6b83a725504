"""Name binding and small SQL helpers for the planner.

Resolves column names against the relation being planned (``Scope``) and rewrites
sqlglot expressions to positional ``_c{i}`` references; the rest are small readers of
sqlglot trees (conjuncts, parameters, output names, LIMIT).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from partialflow.operators.expressions import CompiledExpr, UnsupportedExpression
from partialflow.operators.expressions import compile_expr as _compile_expr
from partialflow.server.errors import InvalidArgument

_AGG_FUNCS: dict[type, str] = {
    exp.Count: "COUNT",
    exp.Sum: "SUM",
    exp.Avg: "AVG",
    exp.Min: "MIN",
    exp.Max: "MAX",
}


# Why a window function is refused, and what to do instead.
WHY_WINDOW = (
    "(a window's value depends on the other rows of its partition and their order, which a "
    "view's operators do not keep); compute it over the view's rows when reading"
)

def compile_expr(e: exp.Expression) -> CompiledExpr:
    """Compile an expression for the dataflow; one it cannot compute refuses the view."""
    try:
        return _compile_expr(e)
    except UnsupportedExpression as err:
        raise InvalidArgument(str(err)) from None


# The qualifier of hidden columns the planner adds to a relation (a scalar subquery's
# value, scalars.py): resolvable by name, never expanded by ``*``.
SYNTHETIC = "_pf_sq"


def col(i: int) -> exp.Column:
    return exp.Column(this=exp.to_identifier(f"_c{i}"))


@dataclass
class Scope:
    """Columns of the relation being built: (qualifier, name) per position."""

    cols: list[tuple[str | None, str]]

    def find(self, column: exp.Column) -> int:
        name = column.name.lower()
        qual = column.table.lower() if column.table else None
        hits = [
            i for i, (q, n) in enumerate(self.cols) if n == name and (qual is None or q == qual)
        ]
        if not hits:
            shown = ", ".join(f"{q}.{n}" if q else n for q, n in self.cols)
            raise InvalidArgument(f"unknown column {column.sql()!r}; columns are: {shown}")
        if len(hits) > 1:
            raise InvalidArgument(
                f"column {column.sql()!r} is ambiguous; qualify it with a table name"
            )
        return hits[0]


# -- helpers -----------------------------------------------------------------------------
def _names(visible: list[str], exprs: list[exp.Expression]) -> tuple[str, ...]:
    hidden = [f"_k{i}" for i in range(len(exprs) - len(visible))]
    return tuple(visible) + tuple(hidden)


def _append_hidden(exprs: list[exp.Expression], extra: list[exp.Expression]) -> list[int]:
    """Positions of ``extra`` among ``exprs``, appending those not already selected."""
    out = []
    for e in extra:
        for i, x in enumerate(exprs):
            if x == e:
                out.append(i)
                break
        else:
            exprs.append(e)
            out.append(len(exprs) - 1)
    return out


def _bind(
    e: exp.Expression, scope: Scope, keep: Callable[[exp.Column], bool] | None = None
) -> exp.Expression:
    """Replace column names with positional ``_c{i}`` references into ``scope``."""
    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            if keep is not None and keep(n):
                return n
            return col(scope.find(n))
        if isinstance(n, (exp.Subquery, exp.Exists, exp.Select)):
            raise InvalidArgument(f"subqueries in expressions are not supported here: {n.sql()!r} "
                                  "(only in WHERE, the SELECT list and HAVING)")
        if isinstance(n, exp.Window):
            raise InvalidArgument(f"window functions are not supported: {n.sql()!r} {WHY_WINDOW}")
        if isinstance(n, exp.Placeholder):
            raise InvalidArgument("a parameter (?) is only allowed as `column = ?` in WHERE")
        if isinstance(n, tuple(_AGG_FUNCS)):
            raise InvalidArgument(
                f"aggregate {n.sql()!r} is not allowed here (in WHERE, GROUP BY or ON, which "
                "are decided per row); aggregates go in the SELECT list or HAVING")
        return n
    return e.copy().transform(swap)


def scope_name(scope: Scope, c: exp.Column) -> str:
    """The user's name for a positional column reference (for error messages)."""
    if c.name.startswith("_c") and c.name[2:].isdigit():
        q, n = scope.cols[int(c.name[2:])]
        return f"{q}.{n}" if q else n
    return c.sql()


def _order_positions(
    items: list[tuple[int | exp.Expression, bool]], exprs: list[exp.Expression]
) -> list[tuple[int, bool]]:
    out = []
    for what, desc in items:
        pos = what if isinstance(what, int) else _append_hidden(exprs, [what])[0]
        out.append((pos, desc))
    return out


def _resolve_position(g: exp.Expression, items, scope) -> exp.Expression:
    """GROUP BY 1 means the first select item."""
    if isinstance(g, exp.Literal) and g.is_int:
        i = int(g.this) - 1
        if not 0 <= i < len(items):
            raise InvalidArgument(f"GROUP BY position {i + 1} is out of range")
        return _bind(_unalias(items[i]), scope)
    return g


def _output_position(e: exp.Expression, items, names) -> int | None:
    if isinstance(e, exp.Literal) and e.is_int:
        i = int(e.this) - 1
        if not 0 <= i < len(items):
            raise InvalidArgument(f"ORDER BY position {i + 1} is out of range")
        return i
    if isinstance(e, exp.Column) and not e.table:
        matches = [i for i, n in enumerate(names) if n.lower() == e.name.lower()]
        if len(matches) == 1:
            return matches[0]
    for i, it in enumerate(items):
        if _unalias(it) == e:
            return i
    return None


def _expand_star(items: list[exp.Expression], scope: Scope) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for e in items:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            qual = e.table.lower() if isinstance(e, exp.Column) and e.table else None
            for q, n in scope.cols:
                if (qual is None and q != SYNTHETIC) or (qual is not None and q == qual):
                    out.append(exp.column(n, table=q) if q else exp.column(n))
        else:
            out.append(e)
    return out


def _output_name(e: exp.Expression) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return e.sql()


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


def _conjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    return [e]


def _param_column(conj: exp.Expression) -> exp.Column | None:
    if isinstance(conj, exp.EQ):
        a, b = conj.this, conj.expression
        if isinstance(a, exp.Column) and isinstance(b, exp.Placeholder):
            return a
        if isinstance(b, exp.Column) and isinstance(a, exp.Placeholder):
            return b
    return None


def _limit(q: exp.Expression) -> int | None:
    lim = q.args.get("limit")
    if q.args.get("offset"):
        raise InvalidArgument(
            "OFFSET is not supported (a view keeps each key's top rows in order, not a page "
            "further down, which every change above it would shift); read LIMIT n + m and skip "
            "the first m rows")
    if lim is None:
        return None
    value = lim.expression if lim.expression is not None else lim.this
    if not (isinstance(value, exp.Literal) and value.is_int) or int(value.this) <= 0:
        raise InvalidArgument(f"LIMIT must be a positive integer, got {value.sql()!r}")
    return int(value.this)


# Clauses no view takes, with what to write instead.
_UNSUPPORTED = (
    ("with", "WITH", "define each WITH query as a view and select from it"),
    ("qualify", "QUALIFY", f"it filters window functions, which are not kept {WHY_WINDOW}"),
    ("windows", "WINDOW", f"it names window functions, which are not kept {WHY_WINDOW}"),
    ("laterals", "LATERAL", "a lateral subquery is not decorrelated; write a scalar subquery "
     "or a join"),
    ("pivots", "PIVOT", "write the pivot as conditional aggregates (SUM(CASE WHEN ...))"),
)


def _refuse_unsupported(sel: exp.Expression) -> None:
    for key, what, instead in _UNSUPPORTED:
        if sel.args.get(key) or sel.args.get(key + "_"):
            raise InvalidArgument(f"{what} is not supported in views: {instead}")


def _empty_aggregate_row(
    exprs: list[exp.Expression], having: exp.Expression | None, n_groups: int, calls
) -> tuple | None:
    """What a global aggregate returns over no rows (COUNT 0, others NULL)."""
    values = [0 if f in ("COUNT", "COUNT_STAR") else None for f, _ in calls]
    row = tuple([None] * n_groups + values)
    if having is not None and compile_expr(having).eval(row) is not True:
        return None
    return tuple(compile_expr(e).eval(row) for e in exprs)
