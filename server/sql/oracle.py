"""The oracle of a view's key: the Spark SQL that answers a view for one key over the base
tables alone, sharing nothing with the dataflow.

The background sampler (``server/verifier.py``) checks served reads against it, and a
subscription started from an LSN (``dataflow/resume.py``) reads its keys' first rows with
it. It is a rewrite of the view's SQL, so it lives with the SQL layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlglot import exp

from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.parse import parse_tree


def oracle_sql(sql: str, key: Sequence[Any], view_sql: Callable[[str], str | None]) -> str:
    """The Spark SQL that answers ``sql`` (a view's definition) for ``key`` over base
    tables only: each ``?`` bound to its key value (in order), each view the SQL reads
    replaced by its own definition as a subquery, and, under a LIMIT, every output column
    added to ORDER BY as a tie-breaker — the dataflow breaks ties by all columns
    ascending, and Spark must pick the same rows."""
    values = list(key)
    tree = _inline_views(parse_tree(sql), view_sql, depth=0)

    def bind(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder):
            if not values:
                raise InvalidArgument("the key has fewer values than the view has parameters")
            # sqlglot annotates convert() with its Expr base; it builds an Expression.
            return cast(exp.Expression, exp.convert(values.pop(0)))
        return node

    tree = tree.transform(bind)
    if values:
        raise InvalidArgument("the key has more values than the view has parameters")
    order = tree.args.get("order")
    if order is not None and tree.args.get("limit") is not None and isinstance(tree, exp.Select):
        width = len(tree.expressions)
        ties = [exp.Ordered(this=exp.Literal.number(i + 1), nulls_first=True) for i in range(width)]
        order.set("expressions", [*order.expressions, *ties])
    return tree.sql(dialect="spark")


def _inline_views(
    tree: exp.Expression, view_sql: Callable[[str], str | None], depth: int
) -> exp.Expression:
    if depth > 32:  # views cannot be cyclic, but a bug should not recurse forever
        raise InvalidArgument("views nested too deeply to verify")

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and not node.args.get("db"):
            inner = view_sql(node.name.lower())
            if inner is not None:
                sub = _inline_views(parse_tree(inner), view_sql, depth + 1)
                return exp.Subquery(
                    this=sub, alias=exp.TableAlias(this=exp.to_identifier(node.alias_or_name))
                )
        return node

    return tree.transform(swap)
