"""FROM and JOIN: relations joined on equalities, from ON or (comma joins) from WHERE.

A FROM list is a sequence of *units* separated by commas or CROSS JOIN (or a JOIN without
ON, which Spark also reads as a cross join): each unit is a relation with the explicit
``JOIN ... ON`` clauses attached to it, since JOIN binds tighter than a comma. Units are
joined to each other on the WHERE conjuncts that equate a column of one with a column of
another, as any SQL planner does; those conjuncts are consumed (they are the join), the
rest stay in WHERE. Units may be joined in an order other than the FROM order (``FROM a,
b, c WHERE a.x = c.x AND b.y = c.y`` joins c before b); a projection then restores the
FROM order so ``SELECT *`` and positions mean what the user wrote.

A unit no equality reaches is a genuine cross product: a join on a constant key
(``plan.cross_join``), whose indexes are full (each holds its whole side); the WHERE
conditions relating the two stay a filter above it (a theta join). So is an inner ``JOIN
... ON`` whose condition has no equality between the sides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from sqlglot import exp

from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.binding import Scope, _bind, _conjuncts, compile_expr
from partialflow.server.sql.plan import PlanNode, cross_join, op_node, select_columns

# Plans one FROM item (a table, a view or a subquery) into a node and its columns.
RelationPlanner = Callable[[exp.Expression], tuple[PlanNode, Scope]]
# A FROM unit: its node, its columns and the FROM item it starts with (for messages).
Unit = tuple[PlanNode, Scope, exp.Expression]


def plan_from(
    sel: exp.Expression, conjuncts: list[exp.Expression], relation: RelationPlanner
) -> tuple[PlanNode, Scope, list[exp.Expression]]:
    """The FROM clause of ``sel`` as one node; returns the WHERE ``conjuncts`` not used as
    join conditions."""
    from_ = sel.args.get("from_") or sel.args.get("from")
    if from_ is None:
        raise InvalidArgument("a view needs a FROM clause")
    units: list[Unit] = []
    node, scope = relation(from_.this)
    first = from_.this
    for j in sel.args.get("joins") or []:
        if _is_cross(j):
            units.append((node, scope, first))
            node, scope = relation(j.this)
            first = j.this
        else:
            node, scope = _join_on(node, scope, j, relation)
    units.append((node, scope, first))
    if len(units) == 1:
        return node, scope, conjuncts
    return _join_units(units, conjuncts)


def without_from(sel: exp.Expression) -> exp.Expression:
    """A SELECT without FROM over a one-row relation: the global count of a table the
    statement names (a global aggregate always has exactly one row), so constants and
    subqueries in it are computed once and kept fresh like any view."""
    if not isinstance(sel, exp.Select) or sel.args.get("from_") is not None:
        return sel
    tables = [t for t in sel.find_all(exp.Table) if t.name]
    if not tables:
        raise InvalidArgument(
            "a view without FROM that names no table is a constant: nothing to maintain; "
            "run it with query(), or select the constants FROM a table"
        )
    table = exp.Table(this=exp.to_identifier(tables[0].name))
    one = exp.Select(expressions=[exp.alias_(exp.Count(this=exp.Star()), "_pf_rows")])
    one = one.from_(table)
    out = sel.copy()
    out.set("from_", exp.From(this=exp.Subquery(
        this=one, alias=exp.TableAlias(this=exp.to_identifier("_pf_one")))))
    return out


def _is_cross(j: exp.Join) -> bool:
    """A comma, CROSS JOIN or [INNER] JOIN without ON/USING: a cross join in Spark."""
    side = (j.args.get("side") or "").upper()
    kind = (j.args.get("kind") or "").upper()
    no_condition = j.args.get("on") is None and not j.args.get("using")
    return not side and (kind == "CROSS" or (kind in ("", "INNER") and no_condition))


def _join_units(
    units: list[Unit], conjuncts: list[exp.Expression]
) -> tuple[PlanNode, Scope, list[exp.Expression]]:
    full = Scope([c for _, s, _ in units for c in s.cols])
    starts = [0]
    for _, s, _ in units[:-1]:
        starts.append(starts[-1] + len(s.cols))

    def unit_of(pos: int) -> int:
        return max(i for i, s in enumerate(starts) if s <= pos)

    units, conjuncts = _push_down(units, conjuncts, full, unit_of, starts)
    # Column equalities between two different units, as (full position, full position).
    links: dict[int, tuple[int, int]] = {}
    for i, conj in enumerate(conjuncts):
        if (
            isinstance(conj, exp.EQ)
            and isinstance(conj.this, exp.Column)
            and isinstance(conj.expression, exp.Column)
        ):
            a, b = full.find(conj.this), full.find(conj.expression)
            if unit_of(a) != unit_of(b):
                links[i] = (a, b)
    node, _, _ = units[0]
    joined = [0]
    at: dict[int, int] = {p: p for p in range(len(units[0][1].cols))}  # full -> node position
    used: set[int] = set()
    while len(joined) < len(units):
        step = _next_unit(units, joined, links, used, unit_of)
        width = len(node.columns)
        if step is None:
            # No equality reaches the rest: a cross product with the next unit in FROM
            # order (the WHERE conditions relating them stay a filter above it).
            u = next(i for i in range(len(units)) if i not in joined)
            right, rscope, _ = units[u]
            node = cross_join(node, right)
        else:
            u, pairs = step
            right, rscope, _ = units[u]
            lkey = tuple(at[a] for a, _ in pairs)
            rkey = tuple(b - starts[u] for _, b in pairs)
            cols = node.columns + right.columns
            node = PlanNode(cols, Join(cols, lkey, rkey, "inner", left_width=width),
                            [node, right])
        at.update({starts[u] + j: width + j for j in range(len(rscope.cols))})
        joined.append(u)
    # Back to the FROM order (a projection only when the join order differed).
    order = [at[p] for p in range(len(full.cols))]
    node = select_columns(node, order, tuple(node.columns[i] for i in order))
    return node, full, [c for i, c in enumerate(conjuncts) if i not in used]


def _push_down(
    units: list[Unit],
    conjuncts: list[exp.Expression],
    full: Scope,
    unit_of: Callable[[int], int],
    starts: list[int],
) -> tuple[list[Unit], list[exp.Expression]]:
    """Conditions on one unit's columns only, applied to that unit before it is joined:
    the units are inner-joined, so filtering one before or after is the same rows, and
    before keeps a cross product's full indexes (each holds its whole side) small.
    Parameters and subqueries stay in WHERE, where they are planned."""
    per_unit: dict[int, list[exp.Expression]] = {}
    rest = []
    for conj in conjuncts:
        cols = list(conj.find_all(exp.Column))
        if not cols or any(isinstance(n, _KEPT) for n in conj.walk()):
            rest.append(conj)
            continue
        owners = {unit_of(full.find(c)) for c in cols}
        if len(owners) != 1:
            rest.append(conj)
            continue
        per_unit.setdefault(owners.pop(), []).append(conj)
    if not per_unit:
        return units, conjuncts
    out = list(units)
    for u, conds in per_unit.items():
        node, scope, first = units[u]
        shifted = [_shift(c, full, starts[u]) for c in conds]
        pred = compile_expr(conjunction(shifted))
        out[u] = (op_node(Filter(node.columns, pred), node), scope, first)
    return out, rest


# Conditions left in WHERE by _push_down.
_KEPT = (exp.Placeholder, exp.Subquery, exp.Exists, exp.Select, exp.AggFunc, exp.Window)


def _shift(cond: exp.Expression, full: Scope, start: int) -> exp.Expression:
    """``cond`` bound to one unit's columns (positions in the full scope less ``start``)."""
    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            return exp.Column(this=exp.to_identifier(f"_c{full.find(n) - start}"))
        return n

    return cond.copy().transform(swap)


def _next_unit(
    units: list[Unit],
    joined: list[int],
    links: dict[int, tuple[int, int]],
    used: set[int],
    unit_of: Callable[[int], int],
) -> tuple[int, list[tuple[int, int]]] | None:
    """The first unit (in FROM order) that equalities link to the units joined so far, with
    those equalities as (joined side, new side) pairs; marks them used."""
    for u in range(len(units)):
        if u in joined:
            continue
        pairs: list[tuple[int, int]] = []
        found: list[int] = []
        for i, (a, b) in links.items():
            if i in used:
                continue
            if unit_of(a) in joined and unit_of(b) == u:
                pairs.append((a, b))
                found.append(i)
            elif unit_of(b) in joined and unit_of(a) == u:
                pairs.append((b, a))
                found.append(i)
        if pairs:
            used.update(found)
            return u, pairs
    return None


def _join_on(
    left: PlanNode, lscope: Scope, j: exp.Join, relation: RelationPlanner
) -> tuple[PlanNode, Scope]:
    """An explicit ``[INNER|LEFT] JOIN ... ON`` of ``left`` with ``j``'s relation."""
    side = (j.args.get("side") or "").upper()
    kind = (j.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise InvalidArgument(
            f"{' '.join(x for x in (side, kind) if x)} JOIN is not supported; use INNER or "
            "LEFT JOIN"
        )
    if j.args.get("using"):
        raise InvalidArgument("JOIN ... USING is not supported; write ON a.x = b.x")
    on = j.args.get("on")
    if on is None:
        raise InvalidArgument(
            "a JOIN needs an ON condition with at least one equality between the two sides"
        )
    right, rscope = relation(j.this)
    both = Scope(lscope.cols + rscope.cols)
    nl = len(lscope.cols)
    lkey: list[int] = []
    rkey: list[int] = []
    rest: list[exp.Expression] = []
    for conj in _conjuncts(on):
        if (
            isinstance(conj, exp.EQ)
            and isinstance(conj.this, exp.Column)
            and isinstance(conj.expression, exp.Column)
        ):
            a, b = both.find(conj.this), both.find(conj.expression)
            if a < nl <= b:
                lkey.append(a)
                rkey.append(b - nl)
                continue
            if b < nl <= a:
                lkey.append(b)
                rkey.append(a - nl)
                continue
        rest.append(conj)
    kind_name = "left" if side == "LEFT" else "inner"
    if rest and kind_name == "left":
        raise InvalidArgument(
            "LEFT JOIN conditions must be column equalities (a row's NULL padding depends on "
            f"the whole ON condition, which a filter after the join cannot decide); got "
            f"{' AND '.join(r.sql() for r in rest)!r}"
        )
    cols = left.columns + right.columns
    if not lkey:  # a theta join: the cross product, filtered by ON
        sides = [(left, lscope), (right, rscope)]
        units, rest = _push_down(
            [(n, sc, j.this) for n, sc in sides], rest, both, lambda p: int(p >= nl), [0, nl]
        )
        node = cross_join(units[0][0], units[1][0])
    else:
        node = PlanNode(
            cols,
            Join(cols, tuple(lkey), tuple(rkey), kind_name, left_width=len(left.columns)),
            [left, right],
        )
    if rest:
        pred = conjunction(rest)
        node = op_node(Filter(cols, compile_expr(_bind(pred, both))), node)
    return node, both


def conjunction(parts: list[exp.Expression]) -> exp.Expression:
    """``a AND b AND ...`` of ``parts`` (one part as itself). sqlglot annotates ``and_`` as
    returning a ``Condition``; the node it builds (``And``) is an ``Expression``."""
    return cast(exp.Expression, exp.and_(*parts)) if len(parts) > 1 else parts[0]
