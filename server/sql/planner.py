"""From a view's SQL to a tree of operators (a logical plan).

The planner reads SQL with sqlglot, resolves names against the catalog (tables and other
views), and produces ``PlanNode`` trees of operators over base-table ``Source`` leaves. It
decides nothing about state: ``server/dataflow/graph.py`` walks the tree top-down with the
reader's key and chooses, per stateful node, partial or full materialization.

Column references inside operator expressions are positional (``_c{i}`` = input column i);
see ``operators/expressions.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from partialflow.operators.aggregate import Aggregate, AggSpec
from partialflow.operators.distinct import Distinct
from partialflow.operators.filter import Filter
from partialflow.operators.project import Project
from partialflow.operators.topk import TopK
from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql import markers
from partialflow.server.sql.binding import (
    _AGG_FUNCS,
    Scope,
    _append_hidden,
    _bind,
    _conjuncts,
    _empty_aggregate_row,
    _expand_star,
    _limit,
    _names,
    _order_positions,
    _output_name,
    _output_position,
    _param_column,
    _refuse_unsupported,
    _resolve_position,
    _unalias,
    col,
    compile_expr,
    scope_name,
)
from partialflow.server.sql.distinct_aggregates import distinct_input, mixed, two_levels
from partialflow.server.sql.from_clause import conjunction, plan_from, without_from
from partialflow.server.sql.guards import Guard, guarded, refuse_here, refuse_view_over
from partialflow.server.sql.not_in import is_not_in, not_in_join
from partialflow.server.sql.parse import parse_query
from partialflow.server.sql.plan import PlanNode, ViewPlan, op_node, visible_only
from partialflow.server.sql.refusals import refuse_constructs
from partialflow.server.sql.scalars import join_scalars
from partialflow.server.sql.subqueries import exists_join, is_exists_join, is_semi_join, semi_join
from partialflow.server.sql.unions import plan_union

__all__ = ["PlanNode", "Planner", "ViewPlan"]

# Candidates kept per group by MIN/MAX and top-k in partial state (top-k keeps k + this).
MINMAX_CANDIDATES = 8
TOPK_SLACK = 8


# Catalog callbacks: table name -> column names; view name -> its plan (or None).
TableLookup = Callable[[str], "tuple[str, ...] | None"]
ViewLookup = Callable[[str], "ViewPlan | None"]


class Planner:
    """Plans one CREATE VIEW's SELECT."""

    def __init__(self, tables: TableLookup, views: ViewLookup) -> None:
        self._tables = tables
        self._views = views
        # Relations made while planning (a decorrelated subquery's domain, markers.py).
        self._locals: markers.Locals = {}

    # -- entry point -------------------------------------------------------------------
    def plan(self, sql: str) -> ViewPlan:
        tree = parse_query(sql)
        refuse_constructs(tree, sql)
        if isinstance(tree, exp.SetOperation):
            return self._plan_union(tree)
        if not isinstance(tree, exp.Select):
            raise InvalidArgument(f"a view must be a SELECT, got {tree.key.upper()}")
        return self._plan_select(tree, allow_params=True)

    def _plan_query(self, q: exp.Expression) -> ViewPlan:
        """A subquery: a SELECT or UNION without parameters."""
        if isinstance(q, exp.SetOperation):
            return self._plan_union(q)
        return self._plan_select(q, allow_params=False)

    # -- SELECT ------------------------------------------------------------------------
    def _plan_select(self, sel: exp.Expression, allow_params: bool) -> ViewPlan:
        # An Expression, not only a Select: a UNION branch or FROM subquery of another kind
        # (VALUES, ...) comes here too and is refused by the checks below.
        _refuse_unsupported(sel)
        sel = without_from(sel)
        where = sel.args.get("where")
        node, scope, conjuncts = plan_from(
            sel, _conjuncts(where.this) if where is not None else [], self._relation
        )
        ctx = markers.Context(self._relation, self._plan_query, self._locals)

        def fallback(sq, n, sc):
            return markers.plan_one(sq, n, sc, ctx)

        # Scalar subqueries become columns joined in (scalars.py, or markers.py for other
        # forms), in WHERE here and in the SELECT list below.
        conjuncts, node, scope = join_scalars(
            conjuncts, node, scope, self._relation, self._plan_query, fallback
        )
        conjuncts = guarded(conjuncts, ctx.guards)  # several-row scalars (guards.py)
        params: list[int] = []
        semis: list[exp.Expression] = []
        residual: list[exp.Expression] = []
        for conj in conjuncts:
            p = _param_column(conj)
            if p is not None:
                if not allow_params:
                    raise InvalidArgument(
                        "parameters (?) are only allowed in the outermost SELECT of a view, "
                        "not in a subquery or UNION branch; define a view over this one instead"
                    )
                params.append(scope.find(p))
            elif is_semi_join(conj) or is_exists_join(conj) or is_not_in(conj):
                semis.append(conj)
            elif any(isinstance(n, exp.Placeholder) for n in conj.walk()):
                raise InvalidArgument(
                    "a parameter must appear as `column = ?` in a top-level AND of WHERE; got "
                    f"{conj.sql()!r}"
                )
            else:
                residual.append(conj)
        # EXISTS / IN inside larger conditions: marker columns joined in (markers.py).
        residual, node, scope = markers.rewrite(residual, node, scope, ctx)
        if residual:
            pred = conjunction(residual)
            node = op_node(Filter(node.columns, compile_expr(_bind(pred, scope))), node)
        for conj in semis:
            try:
                if is_semi_join(conj):
                    node = semi_join(node, scope, conj, self._plan_query)
                elif isinstance(conj, exp.Not) and is_not_in(conj):
                    node = not_in_join(node, scope, conj, self._relation, self._plan_query)
                else:
                    node = exists_join(node, scope, conj, self._relation, self._plan_query)
            except InvalidArgument:
                # Correlated otherwise than the semi-join forms allow: a marker and a filter.
                (pred,), node, scope = markers.rewrite([conj], node, scope, ctx)
                node = op_node(Filter(node.columns, compile_expr(_bind(pred, scope))), node)
        if len(set(params)) != len(params):
            raise InvalidArgument("the same column is compared with ? twice; compare it once "
                                  "(a view has one parameter per key column)")
        has_aggs = any(  # a scalar subquery's own aggregate does not make this one grouped
            isinstance(n, tuple(_AGG_FUNCS))
            for e in sel.expressions
            for n in e.walk(prune=lambda x: isinstance(x, exp.Subquery))
        )
        having = sel.args.get("having")
        if sel.args.get("group") or has_aggs or having is not None:
            sel, node, scope, extra = self._aggregate_subqueries(sel, node, scope, ctx)
            refuse_here(ctx.guards, "in an aggregate query")
            return self._plan_aggregate(sel, node, scope, params, extra)
        items, node, scope = join_scalars(
            list(sel.expressions), node, scope, self._relation, self._plan_query, fallback
        )
        items, node, scope = markers.rewrite(items, node, scope, ctx)
        if items != list(sel.expressions):
            sel = sel.copy()
            sel.set("expressions", items)
        if not allow_params:
            refuse_here(ctx.guards, "in a subquery, a FROM subquery or a set operation's branch")
        if sel.args.get("distinct") or sel.args.get("limit"):
            refuse_here(ctx.guards, "with DISTINCT or LIMIT")
        return self._plan_projection(sel, node, scope, params, ctx.guards)

    def _aggregate_subqueries(
        self, sel: exp.Expression, node: PlanNode, scope: Scope, ctx: markers.Context
    ) -> tuple[exp.Expression, PlanNode, Scope, list[int]]:
        """Subqueries in the SELECT list and HAVING of an aggregate query, joined in before
        the aggregate. One outside an aggregate's argument must name no column but the
        grouping ones: its value is then the same for every row of a group, so grouping by
        it too (the returned positions) changes no group and makes it a group column."""
        having = sel.args.get("having")
        parts = list(sel.expressions) + ([having.this] if having is not None else [])
        if not any(markers.has_subquery(e) for e in parts):
            return sel, node, scope, []
        group = sel.args.get("group")
        if group is None:
            raise InvalidArgument(
                "a subquery in the SELECT list or HAVING of an aggregate query without GROUP BY "
                "is not supported; compute the aggregate in a view and the subquery over it"
            )
        grouped = {scope.find(g) for g in group.expressions if isinstance(g, exp.Column)}
        for e in parts:
            for sq in markers.subqueries_of(e):
                outside = sq.find_ancestor(*_AGG_FUNCS) is None
                named = markers.outer_columns(sq, scope, ctx)
                if outside and not set(named) <= grouped:
                    q, n = scope.cols[next(p for p in named if p not in grouped)]
                    raise InvalidArgument(
                        f"subquery {markers.clip(sq.sql())} names {q + '.' if q else ''}{n}, "
                        "which is not a GROUP BY column; in an aggregate query a subquery "
                        "outside an aggregate may name grouping columns only"
                    )
        new_parts, node, scope = markers.rewrite(parts, node, scope, ctx)
        sel = sel.copy()
        sel.set("expressions", new_parts[: len(sel.expressions)])
        if having is not None:
            sel.set("having", exp.Having(this=new_parts[-1]))
        extra: list[int] = []
        for e in new_parts:
            for c in e.walk(prune=lambda x: isinstance(x, tuple(_AGG_FUNCS))):
                if isinstance(c, exp.Column) and c.table == markers.SYNTHETIC:
                    p = scope.find(c)
                    if p not in extra:
                        extra.append(p)
        return sel, node, scope, extra

    def _plan_projection(
        self, sel: exp.Expression, node: PlanNode, scope: Scope, params: list[int],
        guards: list[Guard] | None = None,
    ) -> ViewPlan:
        items = _expand_star(sel.expressions, scope)
        names = [_output_name(e) for e in items]
        exprs = [_bind(_unalias(e), scope) for e in items]
        key = _append_hidden(exprs, [col(p) for p in params])
        order_cols = _order_positions(
            self._order_items(sel, items, names, lambda e: _bind(e, scope)), exprs
        )
        # Guards last, hidden: the reader fails a key with a set one (guards.py).
        checks = [(len(exprs) + i, g.shown) for i, g in enumerate(guards or [])]
        exprs += [_bind(g.expr(), scope) for g in guards or []]
        root = op_node(Project(_names(names, exprs), [compile_expr(e) for e in exprs]), node)
        plan = self._finish(sel, root, names, key, order_cols)
        plan.guards = tuple(checks)
        return plan

    def _plan_aggregate(
        self, sel: exp.Expression, node: PlanNode, scope: Scope, params: list[int],
        extra: list[int] | None = None,
    ) -> ViewPlan:
        items = _expand_star(sel.expressions, scope)
        names = [_output_name(e) for e in items]
        group = sel.args.get("group")
        groups = [_bind(g, scope) for g in (group.expressions if group else [])]
        groups = [_resolve_position(g, items, scope) for g in groups]
        n_declared = len(groups)
        for p in params:  # a parameter column becomes an (implicit) grouping column
            if not any(g == col(p) for g in groups):
                groups.append(col(p))
        key_group = [next(i for i, g in enumerate(groups) if g == col(p)) for p in params]
        for p in extra or []:  # subquery values that are the same within a group
            if not any(g == col(p) for g in groups):
                groups.append(col(p))
        calls: list[tuple[str, exp.Expression | None]] = []
        distinct: set[int] = set()  # calls over DISTINCT
        shown: list[str] = []  # calls as written, for messages

        def agg_index(call: exp.Expression) -> int:
            func = _AGG_FUNCS[type(call)]
            arg = call.this
            is_distinct = isinstance(arg, exp.Distinct)
            if isinstance(call, exp.Count) and isinstance(arg, exp.Star):
                func, bound = "COUNT_STAR", None
            else:
                if is_distinct:
                    if len(arg.expressions) != 1:
                        raise InvalidArgument(
                            f"{func}(DISTINCT ...) takes one argument, got {call.sql()!r}"
                        )
                    arg = arg.expressions[0]
                bound = _bind(arg, scope)
            for i, (f, a) in enumerate(calls):
                if f == func and a == bound and (i in distinct) == is_distinct:
                    return i
            calls.append((func, bound))
            shown.append(call.sql())
            if is_distinct:
                distinct.add(len(calls) - 1)
            return len(calls) - 1

        def over_agg(e: exp.Expression) -> exp.Expression:
            """An expression over the aggregate's output: groups first, then aggregates."""
            def swap_aggs(n: exp.Expression) -> exp.Expression:
                if isinstance(n, tuple(_AGG_FUNCS)):
                    return exp.Column(this=exp.to_identifier(f"_a{agg_index(n)}"))
                return n

            e = e.copy().transform(swap_aggs)
            e = _bind(e, scope, keep=lambda c: c.name.startswith("_a") and not c.table)

            def swap_groups(n: exp.Expression) -> exp.Expression:
                for i, g in enumerate(groups):
                    if n == g:
                        return exp.Column(this=exp.to_identifier(f"_g{i}"))
                return n

            e = e.transform(swap_groups)

            def rename(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Column):
                    name = n.name
                    if name.startswith("_g"):
                        return col(int(name[2:]))
                    if name.startswith("_a"):
                        return col(len(groups) + int(name[2:]))
                    raise InvalidArgument(
                        f"column {scope_name(scope, n)} must appear in GROUP BY or be used in an "
                        "aggregate function"
                    )
                return n

            return e.transform(rename)

        exprs = [over_agg(_unalias(e)) for e in items]
        having = sel.args.get("having")
        having_expr = over_agg(having.this) if having is not None else None
        order_items = self._order_items(sel, items, names, over_agg)
        # Pre-projection: grouping expressions then aggregate arguments, as input columns.
        inputs = list(groups) + [a for _, a in calls if a is not None]
        two = bool(distinct) and mixed(calls, distinct)
        group_cols: tuple[int, ...]
        arg_cols: list[int | None]
        if two:  # DISTINCT beside other aggregates: two levels, the values as one γ gives
            src = node
            group_cols, arg_cols = (), []
        elif distinct:
            src = distinct_input(node, groups, calls, distinct, shown)
            group_cols = tuple(range(len(groups)))
            arg_cols = [len(groups) if a is not None else None for _, a in calls]
        elif all(isinstance(e, exp.Column) for e in inputs):
            src = node
            group_cols = tuple(int(g.name[2:]) for g in groups)
            arg_cols = [int(a.name[2:]) if a is not None else None for _, a in calls]
        else:
            pre_names = [f"g{i}" for i in range(len(groups))] + [
                f"a{i}" for i in range(len(inputs) - len(groups))
            ]
            src = op_node(Project(tuple(pre_names), [compile_expr(e) for e in inputs]), node)
            group_cols = tuple(range(len(groups)))
            arg_cols, j = [], len(groups)
            for _, a in calls:
                arg_cols.append(j if a is not None else None)
                j += a is not None
        agg_names = tuple(f"g{i}" for i in range(len(groups))) + tuple(
            f"{f.lower()}{i}" for i, (f, _) in enumerate(calls)
        )
        if two:
            node = two_levels(node, groups, calls, distinct, shown, MINMAX_CANDIDATES)
        else:
            aggs = [AggSpec(f, c) for (f, _), c in zip(calls, arg_cols, strict=True)]
            node = op_node(
                Aggregate(agg_names, group_cols, aggs, candidates=MINMAX_CANDIDATES), src
            )
        if having_expr is not None:
            node = op_node(Filter(node.columns, compile_expr(having_expr)), node)
        key = _append_hidden(exprs, [col(k) for k in key_group])
        order_cols = _order_positions(order_items, exprs)
        root = op_node(Project(_names(names, exprs), [compile_expr(e) for e in exprs]), node)
        empty = None
        if n_declared == 0 and params:
            # Implicitly grouped by the parameters: a key with no rows must still answer
            # like SQL's global aggregate (COUNT 0, others NULL), if HAVING admits it.
            empty = _empty_aggregate_row(exprs[: len(names)], having_expr, len(groups), calls)
        return self._finish(sel, root, names, key, order_cols, empty)

    def _order_items(self, sel, items, names, bind) -> list[tuple[int | exp.Expression, bool]]:
        """ORDER BY items: a visible output position, or an expression to add as hidden."""
        order = sel.args.get("order")
        out: list[tuple[int | exp.Expression, bool]] = []
        for o in order.expressions if order else []:
            desc = bool(o.args.get("desc"))
            pos = _output_position(o.this, items, names)
            out.append((pos if pos is not None else bind(o.this), desc))
        return out

    def _finish(self, sel, root: PlanNode, names, key, order, empty=None) -> ViewPlan:
        limit = _limit(sel)
        if sel.args.get("distinct"):
            if len(root.columns) > len(names) + len(key):
                raise InvalidArgument("ORDER BY with DISTINCT must use selected columns (a "
                                      "DISTINCT row has no one value of another column)")
            root = op_node(Distinct(root.columns), root)
        if limit is not None:
            if not order:
                raise InvalidArgument(
                    "LIMIT needs an ORDER BY (top-k is kept per key in that order)"
                )
            root = op_node(
                TopK(root.columns, tuple(key), list(order), limit, candidates=limit + TOPK_SLACK),
                root,
            )
        return ViewPlan(
            root, list(names), tuple(range(len(names))), tuple(key), list(order), limit, empty
        )

    # -- UNION -------------------------------------------------------------------------
    def _plan_union(self, u: exp.SetOperation) -> ViewPlan:
        """A UNION [ALL], or an EXCEPT / INTERSECT [ALL] (unions.py, setops.py)."""
        return plan_union(u, self._plan_union_branch, self._plan_query,
                          MINMAX_CANDIDATES, TOPK_SLACK)

    def _plan_union_branch(self, e: exp.Expression) -> ViewPlan:
        if isinstance(e, exp.SetOperation):
            return self._plan_union(e)
        return self._plan_select(e, allow_params=False)

    # -- FROM items ------------------------------------------------------------------
    def _relation(self, rel: exp.Expression) -> tuple[PlanNode, Scope]:
        if isinstance(rel, exp.Table):
            if rel.args.get("db") or rel.args.get("catalog"):
                raise InvalidArgument(f"qualified table names are not supported: {rel.sql()!r} "
                                      "(the server has one namespace); name the table alone")
            name = rel.name.lower()
            alias = (rel.alias or rel.name).lower()
            if name in self._locals:
                local, names = self._locals[name]
                return local, Scope([(alias, c) for c in names])
            cols = self._tables(name)
            if cols is not None:
                node = PlanNode(tuple(cols), table=name)
                return node, Scope([(alias, c.lower()) for c in cols])
            view = self._views(name)
            if view is None:
                raise NotFound(f"unknown table or view {rel.name!r}")
            if view.key:
                raise InvalidArgument(
                    f"view {name!r} has parameters; a view over it must be defined over a view "
                    "without parameters"
                )
            refuse_view_over(name, view.guards)
            node = visible_only(view)
            return node, Scope([(alias, c.lower()) for c in view.columns])
        if isinstance(rel, exp.Subquery):
            sub = self._plan_union_branch(rel.this)
            sub_alias = rel.alias.lower() if rel.alias else None
            return visible_only(sub), Scope([(sub_alias, c.lower()) for c in sub.columns])
        raise InvalidArgument(f"unsupported FROM item: {rel.sql()!r}; a FROM item is a "
                              "table, a view or a subquery (SELECT ...)")
