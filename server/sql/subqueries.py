"""``col IN (SELECT ...)`` and ``[NOT] EXISTS (SELECT ...)`` as semi- and anti-joins.

In a top-level AND of WHERE, ``x IN (SELECT y ...)`` keeps a row exactly when some y equals
x: an inner join of the row with the *distinct* values of y on x = y (δ makes each row
match at most once; a NULL x or y matches nothing, and a row for which IN is NULL is
dropped by WHERE like one for which it is false). The subquery is planned on its own; a
correlated one (naming the outer query's columns) goes to ``markers.py``.

``EXISTS (SELECT ... FROM r WHERE r.y = outer.x AND p)``, correlated by equalities
between inner and outer columns (``p`` naming inner columns only), is decorrelated into a
semi-join of the outer rows with the distinct ``(r.y, ...)`` of ``SELECT r.y, ... FROM r
WHERE p``: the same rows, since a row has a match exactly when its ``(x, ...)`` is among
them (NULLs match nothing either way). ``NOT EXISTS`` is the anti-join: a left join with
the same distinct values, keeping the rows that found no match (the joined values are
NULL; a row with a NULL x finds none, and NOT EXISTS is then true, as in SQL).

These are the cheap forms, for conjuncts of WHERE. NOT IN is ``not_in.py``; scalar
subqueries ``scalars.py``; every other subquery in an expression (under OR, CASE or NOT,
correlated by other comparisons) is a marker column joined in (``markers.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.distinct import Distinct
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.binding import _AGG_FUNCS, Scope, _conjuncts, col, compile_expr
from partialflow.server.sql.from_clause import conjunction
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, select_columns, visible_only

Relation = Callable[[exp.Expression], tuple[PlanNode, Scope]]
_SHOWN = 60  # characters of a construct quoted in a message


def clip(text: str) -> str:
    """``text`` for a message, cut to _SHOWN characters (a subquery keeps its ")")."""
    return text if len(text) <= _SHOWN else text[: _SHOWN - 5] + " ...)"


def in_where_and(node: exp.Expression) -> bool:
    """Whether ``node`` is a conjunct of a top-level AND of a WHERE."""
    up = node.parent
    while isinstance(up, (exp.And, exp.Paren)):
        up = up.parent
    return isinstance(up, exp.Where)


def is_semi_join(node: exp.Expression) -> bool:
    """Whether ``node`` is ``column IN (SELECT ...)`` in a top-level AND of a WHERE."""
    if not isinstance(node, exp.In) or node.args.get("query") is None:
        return False
    return isinstance(node.this, exp.Column) and in_where_and(node)


def semi_join(
    node: PlanNode,
    scope: Scope,
    conj: exp.Expression,
    plan_query: Callable[[exp.Expression], ViewPlan],
) -> PlanNode:
    """``node`` restricted to rows whose ``conj.this`` is among the subquery's values."""
    query = conj.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    shown = f"IN ({inner.sql()})"
    try:
        sub = plan_query(inner)
    except (InvalidArgument, NotFound) as err:
        raise type(err)(
            f"{shown}: {err} (the subquery is planned on its own: correlated subqueries, "
            "naming the outer query's columns, are not supported)"
        ) from None
    if len(sub.columns) != 1:
        n = len(sub.columns)
        raise InvalidArgument(f"{shown}: the subquery must select one column, not {n}")
    joined = join_distinct(node, (scope.find(conj.this),), sub, "inner")
    return select_columns(joined, list(range(len(node.columns))), node.columns)


def join_distinct(node: PlanNode, xs: tuple[int, ...], sub: ViewPlan, kind: str) -> PlanNode:
    """``node`` joined (``kind``: inner or left) on its columns ``xs`` with the distinct rows
    of ``sub`` (δ: each row of ``node`` matches at most once), ``sub``'s columns after
    ``node``'s."""
    values = visible_only(sub)
    right = op_node(Distinct(values.columns), values)
    cols = node.columns + right.columns
    ys = tuple(range(len(xs)))
    return PlanNode(cols, Join(cols, xs, ys, kind, left_width=len(node.columns)), [node, right])


# -- EXISTS / NOT EXISTS -------------------------------------------------------------------
def _exists_of(node: exp.Expression) -> tuple[exp.Exists, bool] | None:
    """``node`` as (EXISTS, negated) when it is [NOT] EXISTS (parentheses allowed)."""
    negated = False
    while True:
        if isinstance(node, exp.Paren):
            node = node.this
        elif isinstance(node, exp.Not):
            negated, node = not negated, node.this
        else:
            break
    return (node, negated) if isinstance(node, exp.Exists) else None


def is_exists_join(node: exp.Expression) -> bool:
    """Whether ``node`` (an EXISTS, or a NOT/parentheses around one) is a conjunct of a
    top-level AND of a WHERE."""
    if isinstance(node, exp.Exists):
        while isinstance(node.parent, (exp.Not, exp.Paren)):
            node = node.parent
    return _exists_of(node) is not None and in_where_and(node)


def exists_join(
    node: PlanNode,
    scope: Scope,
    conj: exp.Expression,
    relation: Relation,
    plan_query: Callable[[exp.Expression], ViewPlan],
) -> PlanNode:
    """``node`` restricted by ``conj``, a [NOT] EXISTS conjunct of its WHERE."""
    found = _exists_of(conj)
    assert found is not None
    ex, negated = found
    sub = ex.this.this if isinstance(ex.this, exp.Subquery) else ex.this
    word = "NOT EXISTS" if negated else "EXISTS"
    shown = clip(f"{word} ({sub.sql()})")
    outer, inner_sql = _decorrelate(sub, scope, relation, shown)
    try:
        plan = plan_query(inner_sql)
    except (InvalidArgument, NotFound) as err:
        raise type(err)(f"{shown}: {err}") from None
    xs = tuple(scope.find(c) for c in outer)
    width = len(node.columns)
    joined = join_distinct(node, xs, plan, "left" if negated else "inner")
    if not negated:
        return select_columns(joined, list(range(width)), node.columns)
    unmatched = exp.Is(this=col(width), expression=exp.Null())
    kept = op_node(Filter(joined.columns, compile_expr(unmatched)), joined)
    return select_columns(kept, list(range(width)), node.columns)


def _decorrelate(
    sub: exp.Expression, outer: Scope, relation: Relation, shown: str
) -> tuple[list[exp.Column], exp.Select]:
    """The outer columns and the uncorrelated subquery of their inner partners, for an
    EXISTS correlated by equalities (see the module docstring); anything else is refused
    by name."""
    if not isinstance(sub, exp.Select):
        raise InvalidArgument(f"{shown}: the subquery must be a SELECT")
    for arg, what in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"),
                      ("offset", "OFFSET")):
        if sub.args.get(arg) is not None:
            raise InvalidArgument(f"{shown}: {what} in an EXISTS subquery is not supported")
    if any(isinstance(n, tuple(_AGG_FUNCS)) for e in sub.expressions for n in e.walk()):
        raise InvalidArgument(
            f"{shown}: an aggregate in an EXISTS subquery is not supported (it makes one row "
            "whatever the filter, so EXISTS would always be true)"
        )
    links, rest = split_correlation(sub, outer, relation, shown)
    if not links:
        raise InvalidArgument(
            f"{shown}: an uncorrelated EXISTS is not supported (it is true or false for every "
            "row at once); correlate it by an equality with an outer column"
        )
    inner_sql = sub.copy()
    inner_sql.set("expressions", [c.copy() for _, c in links])
    inner_sql.set("distinct", None)
    inner_sql.set("order", None)
    inner_sql.set("where", where_of(rest))
    return [c for c, _ in links], inner_sql


def split_correlation(
    sub: exp.Select, outer: Scope, relation: Relation, shown: str
) -> tuple[list[tuple[exp.Column, exp.Column]], list[exp.Expression]]:
    """The (outer column, inner column) equalities of ``sub``'s WHERE that correlate it
    with ``outer``, and its other conditions (naming inner columns only). Columns are
    resolved as SQL scopes them: the subquery's own relations first. A condition naming
    the outer query in any other way is refused."""
    from_ = sub.args.get("from_") or sub.args.get("from")
    if from_ is None:
        raise InvalidArgument(f"{shown}: the subquery needs a FROM clause")
    inner_cols: list[tuple[str | None, str]] = []
    for rel in [from_.this] + [j.this for j in sub.args.get("joins") or []]:
        inner_cols += relation(rel)[1].cols
    inner = Scope(inner_cols)

    def is_outer(c: exp.Column) -> bool:
        name, qual = c.name.lower(), c.table.lower() if c.table else None
        if any(n == name and (qual is None or q == qual) for q, n in inner.cols):
            return False  # SQL scoping: the innermost relation that has the column
        outer.find(c)  # raises naming the column when neither has it
        return True

    where = sub.args.get("where")
    conjuncts = _conjuncts(where.this) if where is not None else []
    links: list[tuple[exp.Column, exp.Column]] = []
    rest = []
    for conj in conjuncts:
        outs = [c for c in conj.find_all(exp.Column) if is_outer(c)]
        if not outs:
            rest.append(conj)
            continue
        pair = None
        if isinstance(conj, exp.EQ) and all(
            isinstance(s, exp.Column) for s in (conj.this, conj.expression)
        ):
            a, b = conj.this, conj.expression
            if is_outer(a) != is_outer(b):
                pair = (a, b) if is_outer(a) else (b, a)
        if pair is None:
            raise InvalidArgument(
                f"{shown}: only a subquery correlated by equalities between an outer and an "
                f"inner column (ANDed into its WHERE) is supported; {conj.sql()!r} names the "
                "outer query"
            )
        links.append(pair)
    return links, rest


def where_of(conds: list[exp.Expression]) -> exp.Where | None:
    """A WHERE clause ANDing ``conds`` (copies), or None for none."""
    return exp.Where(this=conjunction([c.copy() for c in conds])) if conds else None

