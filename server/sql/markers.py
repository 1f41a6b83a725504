"""Subqueries anywhere an expression goes, decorrelated into columns joined in (markers).

Each subquery of an expression (a scalar subquery, ``[NOT] EXISTS``, ``x [NOT] IN
(SELECT ...)``) inside OR, CASE, NOT, arithmetic, BETWEEN, IN lists, the SELECT list or
HAVING is planned as a relation and left-joined (⟕) to the outer rows; the subquery in the
expression is replaced by an expression over the joined columns, so the rest of planning
sees plain columns and the filter or projection above computes SQL's answer:

* a scalar subquery with one aggregate expression ``E`` and no GROUP BY has one row per
  outer row: its grouped relation, E per correlation value, joined on it; an outer row
  with no group gets E over no rows (COUNT 0, the others NULL), through CASE on a marker;
* ``EXISTS``: the distinct correlation values with a row, joined; the marker (the joined
  value) is NULL exactly when there is none;
* ``x IN (SELECT y ...)``: the distinct (correlation, y) pairs joined on (correlation, x)
  for the match, and the per-correlation row count and non-NULL count for SQL's three
  values: TRUE on a match, FALSE on no rows, NULL when x is NULL or a y is NULL, else FALSE
  (``NOT IN`` is the three-valued NOT of it).

Uncorrelated, these relations have one row (a global count or aggregate), joined to every
outer row as a cross product with a one-row side (``plan.cross_join``).

Correlated: a subquery naming outer columns in its WHERE (``x.b < t1.b``, any condition,
not only equalities) is made uncorrelated over the *domain* D = δ(π[outer columns](outer)):
the outer references become D's columns, D is added to the subquery's FROM (joined to it
by the correlation's equalities, or crossed with it), and the answer is computed per D
row, grouped by D's columns. The outer rows are then joined with it on those columns. A
NULL outer value matches no D row, so it must give the same answer as no subquery rows:
true when every condition naming it is a comparison, which is NULL for a NULL operand;
other conditions naming the outer query (``IS NULL``, ``OR``, ``COALESCE``) are refused.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from sqlglot import exp

from partialflow.operators.distinct import Distinct
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.binding import (
    _AGG_FUNCS,
    SYNTHETIC,
    Scope,
    _bind,
    _conjuncts,
    col,
    compile_expr,
)
from partialflow.server.sql.guards import Guard
from partialflow.server.sql.plan import (
    PlanNode,
    ViewPlan,
    cross_join,
    op_node,
    select_columns,
    visible_only,
)
from partialflow.server.sql.scalars import is_scalar
from partialflow.server.sql.subqueries import Relation, clip, where_of

PlanQuery = Callable[[exp.Expression], ViewPlan]
# Relations the planner resolves by name while planning a decorrelated subquery (its
# domain D): name -> (node, column names).
Locals = dict[str, tuple[PlanNode, tuple[str, ...]]]
_names = itertools.count()

# Operators through which a NULL operand makes the value NULL (so a comparison over them
# is NULL, and a row with a NULL outer value is not selected).
_STRICT = (exp.Column, exp.Literal, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod,
           exp.Neg, exp.Cast, exp.Abs, exp.Identifier, exp.DataType)
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


@dataclass
class Context:
    relation: Relation
    plan_query: PlanQuery
    locals: Locals
    joined: dict[str, exp.Expression] = field(default_factory=dict)
    guards: list[Guard] = field(default_factory=list)  # several-row scalars (guards.py)


def subqueries_of(e: exp.Expression) -> list[exp.Expression]:
    """The subqueries of ``e`` at its own level (not inside a nested SELECT): scalar
    subqueries, EXISTS and IN (SELECT ...)."""
    out: list[exp.Expression] = []
    for walked in e.walk(prune=lambda x: isinstance(x, exp.Select)):
        n = cast(exp.Expression, walked)
        if (isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query"))
                or is_scalar(n)):
            out.append(n)
    # Outermost first; nested ones inside an IN's needle are planned with it.
    return [n for n in out if not any(o is not n and _inside(n, o) for o in out)]


def _inside(n: exp.Expression, o: exp.Expression) -> bool:
    up = n.parent
    while up is not None:
        if up is o:
            return True
        up = up.parent
    return False


def has_subquery(e: exp.Expression) -> bool:
    return bool(subqueries_of(e))


def rewrite(
    exprs: list[exp.Expression], node: PlanNode, scope: Scope, ctx: Context
) -> tuple[list[exp.Expression], PlanNode, Scope]:
    """``exprs`` with every subquery replaced by an expression over columns joined to
    ``node`` (returned with its wider scope)."""
    out = []
    for e in exprs:
        subs = subqueries_of(e)
        if not subs:
            out.append(e)
            continue
        holder = exp.Paren(this=e.copy())  # a parent for an item that is a subquery
        for sq in subqueries_of(holder):
            text = sq.sql()
            if text not in ctx.joined:
                node, scope, ctx.joined[text] = plan_one(sq, node, scope, ctx)
            sq.replace(ctx.joined[text].copy())
        out.append(holder.this)
    return out, node, scope


def plan_one(
    sq: exp.Expression, node: PlanNode, scope: Scope, ctx: Context
) -> tuple[PlanNode, Scope, exp.Expression]:
    if isinstance(sq, exp.Exists):
        sub = _select_of(sq.this)
        shown = clip(f"EXISTS ({sub.sql()})")
        return _exists(sub, node, scope, ctx, shown)
    if isinstance(sq, exp.In):
        sub = _select_of(sq.args["query"])
        shown = clip(f"IN ({sub.sql()})")
        return _in(sq.this, sub, node, scope, ctx, shown)
    sub = _select_of(sq.this)
    shown = "scalar subquery " + clip(f"({sub.sql()})")
    return _scalar(sub, node, scope, ctx, shown)


def _select_of(q: exp.Expression) -> exp.Expression:
    return q.this if isinstance(q, exp.Subquery) else q


def outer_columns(sq: exp.Expression, outer: Scope, ctx: Context) -> list[int]:
    """Positions of ``outer`` that subquery ``sq`` names (an IN's needle included)."""
    found: list[int] = []
    if isinstance(sq, exp.In) and sq.this is not None:
        found += [outer.find(c) for c in sq.this.find_all(exp.Column)]
    query = sq.args.get("query") if isinstance(sq, exp.In) else sq.this
    if not isinstance(query, exp.Expression):
        return found
    sub = _select_of(query)
    from_ = sub.args.get("from_")
    if not isinstance(sub, exp.Select) or from_ is None:
        return found
    inner: list[tuple[str | None, str]] = []
    for rel in [from_.this] + [j.this for j in sub.args.get("joins") or []]:
        inner += ctx.relation(rel)[1].cols
    for c in sub.walk(prune=lambda x: isinstance(x, exp.Select) and x is not sub):
        if not isinstance(c, exp.Column) or isinstance(c.this, exp.Star):
            continue
        name, qual = c.name.lower(), c.table.lower() if c.table else None
        if not any(n == name and (qual is None or q == qual) for q, n in inner):
            found.append(outer.find(c))
    return found


# -- correlation -----------------------------------------------------------------------
@dataclass
class Decorrelated:
    sub: exp.Select  # the subquery over D (D first in its FROM), outer names replaced
    outer: list[int]  # outer positions, in D's column order
    names: list[str]  # D's column names (_o0, ...), qualified by ``d``
    d: str  # D's relation name


def _decorrelate(sub: exp.Expression, outer: Scope, node: PlanNode, ctx: Context,
                 shown: str) -> Decorrelated:
    if not isinstance(sub, exp.Select):
        raise InvalidArgument(f"{shown}: the subquery must be a SELECT")
    from_ = sub.args.get("from_") or sub.args.get("from")
    if from_ is None:
        raise InvalidArgument(f"{shown}: the subquery needs a FROM clause")
    inner_cols: list[tuple[str | None, str]] = []
    for rel in [from_.this] + [j.this for j in sub.args.get("joins") or []]:
        inner_cols += ctx.relation(rel)[1].cols

    def is_outer(c: exp.Column) -> bool:
        name, qual = c.name.lower(), c.table.lower() if c.table else None
        if any(n == name and (qual is None or q == qual) for q, n in inner_cols):
            return False  # SQL scoping: the innermost relation that has the column
        outer.find(c)  # raises naming the column when neither has it
        return True

    def own_columns(e: exp.Expression) -> list[exp.Column]:
        return [c for c in e.walk(prune=lambda x: isinstance(x, exp.Select) and x is not e)
                if isinstance(c, exp.Column) and not isinstance(c.this, exp.Star)]

    for key in ("expressions", "group", "having", "joins", "order"):
        value = sub.args.get(key)
        parts = value if isinstance(value, list) else [value] if value is not None else []
        for part in parts:
            named = [c for c in own_columns(part) if is_outer(c)]
            if named:
                raise InvalidArgument(
                    f"{shown}: the subquery names the outer query's {named[0].sql()!r} outside "
                    "its WHERE; only WHERE conditions may name the outer query")
    where = sub.args.get("where")
    conjuncts = _conjuncts(where.this) if where is not None else []
    positions: list[int] = []
    for conj in conjuncts:
        outs = [c for c in own_columns(conj) if is_outer(c)]
        if not outs:
            continue
        if not _null_rejecting(conj, outs):
            raise InvalidArgument(
                f"{shown}: the condition {conj.sql()!r} names the outer query other than in a "
                "comparison (=, <>, <, <=, >, >= over columns, constants and arithmetic), so a "
                "NULL outer value could select rows; rewrite it as such comparisons")
        for c in outs:
            p = outer.find(c)
            if p not in positions:
                positions.append(p)
    d = f"_pfd{next(_names)}"
    names = [f"_o{i}" for i in range(len(positions))]
    if not positions:
        return Decorrelated(sub, [], [], d)
    # D: the distinct outer values the subquery is asked about.
    picked = select_columns(node, positions, tuple(names))
    if picked is node:  # every column in order: a projection still names them _o<i>
        picked = op_node(Project(tuple(names), [compile_expr(col(i)) for i in positions]), node)
    ctx.locals[d] = (op_node(Distinct(picked.columns), picked), tuple(names))
    rewritten = sub.copy()

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star) and is_outer(n):
            return exp.column(names[positions.index(outer.find(n))], table=d)
        return n

    new_where = [c.transform(swap) for c in conjuncts]
    rewritten.set("where", where_of(new_where))
    rewritten.set("from_", exp.From(this=exp.to_table(d)))
    rewritten.set("joins", [exp.Join(this=from_.this.copy())]
                  + [j.copy() for j in sub.args.get("joins") or []])
    return Decorrelated(rewritten, positions, names, d)


def _null_rejecting(conj: exp.Expression, outs: list[exp.Column]) -> bool:
    """Whether ``conj`` is NULL (or false) whenever one of ``outs`` is NULL."""
    while isinstance(conj, exp.Paren):
        conj = conj.this
    if isinstance(conj, exp.Between):
        sides = [conj.this, conj.args["low"], conj.args["high"]]
    elif isinstance(conj, _COMPARE):
        sides = [conj.this, conj.expression]
    else:
        return False
    return all(all(isinstance(n, _STRICT) for n in s.walk()) for s in sides)


def _d_columns(dc: Decorrelated) -> list[exp.Expression]:
    return [exp.column(n, table=dc.d) for n in dc.names]


def _plan(q: exp.Expression, ctx: Context, shown: str) -> PlanNode:
    try:
        return visible_only(ctx.plan_query(q))
    except (InvalidArgument, NotFound) as err:
        raise type(err)(f"{shown}: {err}") from None


def _join_in(node: PlanNode, scope: Scope, right: PlanNode, outer: list[int],
             names: list[str]) -> tuple[PlanNode, Scope]:
    """``node`` ⟕ ``right`` on ``outer`` = right's first columns (a cross product with a
    one-row side when uncorrelated); the joined columns are named ``names`` (hidden)."""
    width = len(node.columns)
    if outer:
        cols = node.columns + right.columns
        ys = tuple(range(len(outer)))
        joined = PlanNode(cols, Join(cols, tuple(outer), ys, "left", left_width=width),
                          [node, right])
    else:
        joined = cross_join(node, right, "left")
    keep = list(range(width)) + [width + j for j in range(len(right.columns))]
    out = select_columns(joined, keep, node.columns + tuple(names))
    return out, Scope(scope.cols + [(SYNTHETIC, n) for n in names])


def _fresh(scope: Scope, what: str, n: int) -> list[str]:
    base = sum(1 for q, _ in scope.cols if q == SYNTHETIC)
    return [f"_{what}{base}_{i}" for i in range(n)]


def _ref(name: str) -> exp.Column:
    return exp.column(name, table=SYNTHETIC)


def _aggregated(sub: exp.Select) -> bool:
    return sub.args.get("group") is not None or sub.args.get("having") is not None or any(
        isinstance(n, tuple(_AGG_FUNCS))
        for e in sub.expressions for n in e.walk(prune=lambda x: isinstance(x, exp.Select)))


def _with_items(sub: exp.Select, dc: Decorrelated, items: list[exp.Expression]) -> exp.Select:
    """``sub`` selecting D's columns then ``items``; grouped by D's columns too when it is
    an aggregate query (its groups are then per D row)."""
    q = sub.copy()
    q.set("expressions", _d_columns(dc) + items)
    q.set("order", None)
    q.set("limit", None)
    if dc.names and _aggregated(sub):
        group = sub.args.get("group")
        q.set("group", exp.Group(expressions=_d_columns(dc) + [
            g.copy() for g in (group.expressions if group else [])]))
    return q


def _alias(e: exp.Expression, name: str) -> exp.Expression:
    return cast(exp.Expression, exp.alias_(e, name))


def _derived(q: exp.Select, alias: str = "_pfs") -> exp.Subquery:
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier(alias)))


# -- the three kinds ---------------------------------------------------------------------
def _scalar(sub: exp.Expression, node: PlanNode, scope: Scope, ctx: Context,
            shown: str) -> tuple[PlanNode, Scope, exp.Expression]:
    if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
        raise InvalidArgument(f"{shown}: a scalar subquery must select one column")
    _no_limit(sub, shown)
    item = sub.expressions[0]
    value = item.this if isinstance(item, exp.Alias) else item
    one_row = (
        sub.args.get("group") is None and sub.args.get("having") is None
        and any(isinstance(n, tuple(_AGG_FUNCS)) for n in value.walk())
    )
    dc = _decorrelate(sub, scope, node, ctx, shown)
    if not one_row:
        return _several_rows(value, dc, node, scope, ctx, shown)
    marker = [] if dc.names else [_alias(exp.Literal.number(1), "_m")]
    q = _with_items(dc.sub, dc, [*marker, _alias(value.copy(), "_v")])
    if dc.names:
        q.set("group", exp.Group(expressions=_d_columns(dc)))
    right = _plan(q, ctx, shown)
    names = _fresh(scope, "sq", len(right.columns))
    node, scope = _join_in(node, scope, right, dc.outer, names)
    ref: exp.Expression = _ref(names[-1])
    empty = _empty_value(value)
    if empty is not None:  # no group: the aggregate over no rows (COUNT 0), not NULL
        ref = exp.Case(ifs=[exp.If(this=exp.Is(this=_ref(names[0]), expression=exp.Null()),
                                   true=exp.convert(empty))], default=ref)
    return node, scope, ref


def _several_rows(value: exp.Expression, dc: Decorrelated, node: PlanNode, scope: Scope,
                  ctx: Context, shown: str) -> tuple[PlanNode, Scope, exp.Expression]:
    """A scalar subquery that may have several rows: per correlation value its row count
    ``_n`` and ``MIN(v)`` (its value when there is one row), joined in; the count becomes a
    guard (guards.py) that fails reads meeting more than one row."""
    rows = _with_items(dc.sub, dc, [_alias(value.copy(), "_v")])
    d_names = [exp.column(n) for n in dc.names]
    q = exp.Select(expressions=[
        *d_names, exp.alias_(exp.Count(this=exp.Star()), "_n"),
        exp.alias_(exp.Min(this=exp.column("_v")), "_v")]).from_(_derived(rows))
    if dc.names:
        q.set("group", exp.Group(expressions=[c.copy() for c in d_names]))
    right = _plan(q, ctx, shown)
    names = _fresh(scope, "sq", len(right.columns))
    node, scope = _join_in(node, scope, right, dc.outer, names)
    ctx.guards.append(Guard(names[-1], names[-2], shown))
    return node, scope, _ref(names[-1])


def _empty_value(value: exp.Expression) -> object:
    """``value`` (an expression over aggregates) over no rows: COUNT 0, the others NULL."""
    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Count):
            return exp.Literal.number(0)
        if isinstance(n, tuple(_AGG_FUNCS)):
            return exp.Null()
        return n

    try:
        return compile_expr(value.copy().transform(swap)).eval(())
    except (InvalidArgument, IndexError):
        raise InvalidArgument(
            f"scalar subquery value {value.sql()!r} must be computed from aggregates and "
            "constants") from None


def _exists(sub: exp.Expression, node: PlanNode, scope: Scope, ctx: Context,
            shown: str) -> tuple[PlanNode, Scope, exp.Expression]:
    if not isinstance(sub, exp.Select):
        raise InvalidArgument(f"{shown}: the subquery must be a SELECT")
    if sub.args.get("group") is None and sub.args.get("having") is None and _aggregated(sub):
        return node, scope, exp.true()  # an aggregate without GROUP BY: always one row
    dc = _decorrelate(sub, scope, node, ctx, shown)
    if dc.names:
        inner = _with_items(dc.sub, dc, [])
        if not _aggregated(dc.sub):
            inner.set("distinct", exp.Distinct())
            q = inner
        else:
            q = exp.Select(expressions=[exp.column(n) for n in dc.names]).from_(_derived(inner))
            q.set("distinct", exp.Distinct())
        right = _plan(q, ctx, shown)
        names = _fresh(scope, "ex", len(right.columns))
        node, scope = _join_in(node, scope, right, dc.outer, names)
        return node, scope, exp.Not(this=exp.Is(this=_ref(names[0]), expression=exp.Null()))
    inner = dc.sub.copy()
    inner.set("expressions", [exp.alias_(exp.Literal.number(1), "_x")])
    inner.set("order", None)
    inner.set("limit", None)
    if inner.args.get("group") is None and inner.args.get("having") is None:
        inner.set("distinct", None)
    q = exp.Select(expressions=[exp.alias_(exp.Count(this=exp.Star()), "_n")]).from_(
        _derived(inner))
    right = _plan(q, ctx, shown)
    names = _fresh(scope, "ex", 1)
    node, scope = _join_in(node, scope, right, [], names)
    return node, scope, exp.GT(this=exp.Coalesce(this=_ref(names[0]), expressions=[
        exp.Literal.number(0)]), expression=exp.Literal.number(0))


def _in(needle: exp.Expression, sub: exp.Expression, node: PlanNode, scope: Scope,
        ctx: Context, shown: str) -> tuple[PlanNode, Scope, exp.Expression]:
    if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
        raise InvalidArgument(f"{shown}: the subquery must select one column (a SELECT of one "
                              "column)")
    if isinstance(needle, exp.Tuple):
        raise InvalidArgument(f"{shown}: IN with several columns on the left is not supported; "
                              "write EXISTS with an equality per column")
    _no_limit(sub, shown)
    # The needle as a column of the outer rows (joined on below).
    if isinstance(needle, exp.Column):
        x = scope.find(needle)
        x_ref: exp.Expression = needle.copy()
    else:
        width = len(node.columns)
        name = _fresh(scope, "x", 1)[0]
        exprs = [compile_expr(col(i)) for i in range(width)] + [compile_expr(_bind(needle, scope))]
        node = op_node(Project(node.columns + (name,), exprs), node)
        scope = Scope(scope.cols + [(SYNTHETIC, name)])
        x = width
        x_ref = _ref(name)
    dc = _decorrelate(sub, scope, node, ctx, shown)
    item = sub.expressions[0]
    value = item.this if isinstance(item, exp.Alias) else item
    values = _with_items(dc.sub, dc, [_alias(value.copy(), "_v")])
    d_names = [exp.column(n) for n in dc.names]
    v = exp.column("_v")
    pairs = exp.Select(expressions=[*d_names, v]).from_(_derived(values))
    pairs.set("distinct", exp.Distinct())
    counts = exp.Select(expressions=[
        *[c.copy() for c in d_names], exp.alias_(exp.Count(this=exp.Star()), "_t"),
        exp.alias_(exp.Count(this=v.copy()), "_nn")]).from_(_derived(values.copy()))
    if dc.names:
        counts.set("group", exp.Group(expressions=[c.copy() for c in d_names]))
    match_node = _plan(pairs, ctx, shown)
    names = _fresh(scope, "in", len(match_node.columns))
    node, scope = _join_in(node, scope, match_node, dc.outer + [x], names)
    matched = names[-1]
    count_node = _plan(counts, ctx, shown)
    cnames = _fresh(scope, "inc", len(count_node.columns))
    node, scope = _join_in(node, scope, count_node, dc.outer, cnames)
    total, non_null = _ref(cnames[-2]), _ref(cnames[-1])
    null = exp.Null()
    value_expr = exp.Case(ifs=[
        exp.If(this=exp.Not(this=exp.Is(this=_ref(matched), expression=null.copy())),
               true=exp.true()),
        exp.If(this=exp.EQ(this=exp.Coalesce(this=total, expressions=[exp.Literal.number(0)]),
                           expression=exp.Literal.number(0)), true=exp.false()),
        exp.If(this=exp.Or(this=exp.Is(this=x_ref, expression=null.copy()),
                           expression=exp.GT(this=total.copy(), expression=non_null)),
               true=exp.Null()),
    ], default=exp.false())
    return node, scope, exp.Paren(this=value_expr)


def _no_limit(sub: exp.Expression, shown: str) -> None:
    if sub.args.get("limit") is not None or sub.args.get("offset") is not None:
        raise InvalidArgument(f"{shown}: LIMIT in this subquery is not supported (its rows "
                              "would depend on an order the view cannot keep)")
