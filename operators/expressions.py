"""Scalar expressions: one sqlglot tree compiled twice, to a Python closure and to Spark SQL.

The planner hands over expression trees whose column references are ``_c{i}`` (input
column i). ``compile_expr`` turns a tree into a ``CompiledExpr``: ``eval(row)`` is a tree of
closures built once (no AST walking per row) and ``sql`` is the same tree printed by sqlglot
for Spark, so an upquery computes exactly what the incremental path computes.

Spark (``spark.sql.ansi.enabled=false``) is the reference for every semantic choice here:
NULL in, NULL out; ``/`` always gives a double and NULL on a zero divisor; ``%`` takes the
sign of the dividend; integer arithmetic wraps at 64 bits (32 for INT); a string meets a
number by being cast to the number's type (comparisons) or to double (arithmetic); CAST of
an invalid string gives NULL. Value conversions live in ``operators/values.py``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlglot import exp

from partialflow.operators import scalar as sc
from partialflow.operators import values as sv
from partialflow.operators.types import BIGINT, BOOLEAN, DOUBLE, INT, NULL, STRING, spark_type

Row = tuple[Any, ...]


class UnsupportedExpression(ValueError):
    """An expression the dataflow cannot compute (the planner refuses the view with it)."""
Fn = Callable[[Row], Any]

_COLUMN = re.compile(r"_c(\d+)")


class CompiledExpr:
    """A compiled scalar expression over positional input columns.

    ``eval(row)`` computes the value for one input row; ``sql`` is Spark SQL text over
    columns ``_c0..``; ``columns_used`` the input positions it reads; ``type`` the Spark
    type name when it can be inferred (None when it depends on unknown column types);
    ``column`` the input position when the expression is a bare column reference.
    Equality and hashing go by the SQL text, so operators can use it in signatures.
    """

    __slots__ = ("eval", "sql", "columns_used", "type", "column", "tree")

    def __init__(self, fn: Fn, tree: exp.Expression, type_: str | None,
                 columns_used: frozenset[int]) -> None:
        self.eval: Fn = fn
        self.tree = tree
        self.sql: str = _spark_tree(tree).sql(dialect="spark")
        self.columns_used = columns_used
        self.type = type_
        m = _COLUMN.fullmatch(tree.name) if isinstance(tree, exp.Column) else None
        self.column: int | None = int(m[1]) if m else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompiledExpr) and other.sql == self.sql

    def __hash__(self) -> int:
        return hash(self.sql)

    def __repr__(self) -> str:
        return f"CompiledExpr({self.sql})"


def compile_expr(e: exp.Expression, column_types: Sequence[str | None] | None = None
                 ) -> CompiledExpr:
    """Compile ``e`` (columns named ``_c{i}``) for Python evaluation and Spark.

    ``column_types`` (optional, Spark type names such as ``bigint``/``double``/``string``)
    lets the compiler match Spark's implicit casts where values alone can't tell, e.g.
    the result type of ``CASE`` over an int and a double branch. Raises UnsupportedExpression
    naming the construct for anything unsupported.
    """
    while isinstance(e, (exp.Alias, exp.Paren)):
        e = e.this
    types = [spark_type(t) for t in column_types] if column_types else []
    compiler = _Compiler(types)
    node = compiler.compile(e)
    return CompiledExpr(node.fn, e, node.type, frozenset(compiler.used))


def _spark_tree(tree: exp.Expression) -> exp.Expression:
    """The tree as Spark should see it: decimal literals become doubles (Spark would make
    ``1.5`` a DECIMAL, Python a float) and dialect flags that change printing are reset."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Literal) and not node.is_string and not node.is_int:
            return exp.cast(exp.Literal.number(node.this), exp.DataType.build("double"))
        if isinstance(node, exp.TryCast):
            node = exp.Cast(this=node.this, to=node.args["to"])
        if isinstance(node, exp.Cast) and node.args["to"].this == exp.DataType.Type.FLOAT:
            # FLOAT and REAL name DOUBLE here, as they do for columns (Spark's FLOAT is
            # 32-bit; Python has no such arithmetic to agree with it).
            return exp.Cast(this=node.this, to=exp.DataType.build("double"))
        if isinstance(node, exp.Div):
            node.set("typed", False)
            node.set("safe", False)
        return node

    return tree.copy().transform(fix)


class _Node(NamedTuple):
    fn: Fn
    type: str | None
    const: bool = False
    value: Any = None


def _unsupported(node: exp.Expression, what: str | None = None) -> UnsupportedExpression:
    name = what or type(node).__name__
    return UnsupportedExpression(f"unsupported expression: {name} ({node.sql()})")


def _constant(value: Any, type_: str | None) -> _Node:
    return _Node(lambda row: value, type_, True, value)


class _Compiler:
    """Walks the tree once; every handler returns a closure over its children's closures."""

    def __init__(self, types: list[str | None]) -> None:
        self.types = types
        self.used: set[int] = set()

    def compile(self, node: exp.Expression) -> _Node:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise _unsupported(node)
        return handler(self, node)

    def column(self, node: exp.Column) -> _Node:
        m = _COLUMN.fullmatch(node.name)
        if m is None or node.table:
            raise _unsupported(node, f"column reference {node.sql()!r} (expected _c<i>)")
        i = int(m[1])
        self.used.add(i)
        type_ = self.types[i] if i < len(self.types) else None
        return _Node(operator.itemgetter(i), type_)

    def literal(self, node: exp.Literal) -> _Node:
        text = node.this
        if node.is_string:
            return _constant(text, STRING)
        if node.is_int:
            value = int(text)
            if not sv.INT64_MIN <= value <= sv.INT64_MAX:
                raise _unsupported(node, "integer literal out of BIGINT range")
            # Spark types small integer literals as INT, which wraps at 32 bits.
            return _constant(value, INT if sv.INT32_MIN <= value <= sv.INT32_MAX else BIGINT)
        return _constant(float(text), DOUBLE)

    def boolean(self, node: exp.Boolean) -> _Node:
        return _constant(bool(node.this), BOOLEAN)

    def null(self, node: exp.Null) -> _Node:
        return _constant(None, NULL)

    def paren(self, node: exp.Paren) -> _Node:
        return self.compile(node.this)

    # -- arithmetic ------------------------------------------------------------------
    def arith(self, node: exp.Binary) -> _Node:
        a, b = self.compile(node.this), self.compile(node.expression)
        type_ = sv.arith_type(a.type, b.type)
        fn = _ARITH[type(node)](a.fn, b.fn, 32 if type_ == INT else 64)
        return _Node(fn, type_)

    def div(self, node: exp.Div) -> _Node:
        fa, fb = self.compile(node.this).fn, self.compile(node.expression).fn
        return _Node(sc.division(fa, fb), DOUBLE)

    def neg(self, node: exp.Neg) -> _Node:
        a = self.compile(node.this)
        return _Node(sc.numeric_unary(a.fn, operator.neg, 32 if a.type == INT else 64),
                     sv.arith_type(a.type, a.type))

    def abs(self, node: exp.Abs) -> _Node:
        a = self.compile(node.this)
        return _Node(sc.numeric_unary(a.fn, abs, 32 if a.type == INT else 64),
                     sv.arith_type(a.type, a.type))

    # -- predicates ------------------------------------------------------------------
    def compare(self, node: exp.Binary) -> _Node:
        fa, fb = self.compile(node.this).fn, self.compile(node.expression).fn
        return _Node(sc.comparison(fa, fb, _COMPARE[type(node)]), BOOLEAN)

    def and_(self, node: exp.And) -> _Node:
        return _Node(sc.and3(self.compile(node.this).fn, self.compile(node.expression).fn), BOOLEAN)

    def or_(self, node: exp.Or) -> _Node:
        return _Node(sc.or3(self.compile(node.this).fn, self.compile(node.expression).fn), BOOLEAN)

    def not_(self, node: exp.Not) -> _Node:
        return _Node(sc.negate(self.compile(node.this).fn), BOOLEAN)

    def is_(self, node: exp.Is) -> _Node:
        if not isinstance(node.expression, exp.Null):
            raise _unsupported(node, f"IS {node.expression.sql()}")
        fa = self.compile(node.this).fn
        return _Node(lambda row: fa(row) is None, BOOLEAN)

    def in_(self, node: exp.In) -> _Node:
        if any(node.args.get(k) for k in ("query", "unnest", "field")):
            raise _unsupported(node, "IN with a subquery")
        needle = self.compile(node.this)
        items = [self.compile(x) for x in node.expressions]
        if all(i.const for i in items):
            fn = sc.constant_membership(needle.fn, [i.value for i in items])
        else:
            fn = sc.membership(needle.fn, [i.fn for i in items])
        return _Node(sc.negate(fn) if node.args.get("negate") else fn, BOOLEAN)

    def between(self, node: exp.Between) -> _Node:
        if node.args.get("symmetric"):
            raise _unsupported(node, "BETWEEN SYMMETRIC")
        fx = self.compile(node.this).fn
        ge = sc.comparison(fx, self.compile(node.args["low"]).fn, operator.ge)
        le = sc.comparison(fx, self.compile(node.args["high"]).fn, operator.le)
        between = sc.and3(ge, le)  # Spark rewrites BETWEEN to exactly this
        return _Node(sc.negate(between) if node.args.get("negate") else between, BOOLEAN)

    def like(self, node: exp.Like) -> _Node:
        fs = self.compile(node.this).fn
        pattern = self.compile(node.expression)
        if pattern.const:
            if pattern.value is None:
                return _constant(None, BOOLEAN)
            try:
                regex = sv.like_regex(sv.to_string(pattern.value))
            except ValueError as err:
                raise _unsupported(node, f"LIKE pattern ({err})") from None

            def like(row: Row) -> bool | None:
                s = fs(row)
                return None if s is None else regex.fullmatch(sv.to_string(s)) is not None
        else:
            fp = pattern.fn

            def like(row: Row) -> bool | None:
                s, p = fs(row), fp(row)
                if s is None or p is None:
                    return None
                try:
                    regex = sv.like_regex(sv.to_string(p))
                except ValueError:  # Spark fails the query; one bad row must not stop ours
                    return None
                return regex.fullmatch(sv.to_string(s)) is not None

        return _Node(sc.negate(like) if node.args.get("negate") else like, BOOLEAN)

    # -- conditionals ----------------------------------------------------------------
    def case(self, node: exp.Case) -> _Node:
        subject = self.compile(node.this) if node.this else None
        conds: list[Fn] = []
        values: list[_Node] = []
        for branch in node.args.get("ifs") or []:
            cond = self.compile(branch.this).fn
            if subject is not None:  # CASE x WHEN v: the branch is taken when x = v
                cond = sc.comparison(subject.fn, cond, operator.eq)
            conds.append(cond)
            values.append(self.compile(branch.args["true"]))
        default = node.args.get("default")
        values.append(self.compile(default) if default else _constant(None, NULL))
        type_, fns = _coerce_all(values)
        pairs = list(zip(conds, fns[:-1], strict=True))
        otherwise = fns[-1]

        def case(row: Row) -> Any:
            for cond, value in pairs:
                if cond(row) is True:
                    return value(row)
            return otherwise(row)

        return _Node(case, type_)

    def coalesce(self, node: exp.Coalesce) -> _Node:
        type_, fns = _coerce_all([self.compile(x) for x in [node.this, *node.expressions]])

        def coalesce(row: Row) -> Any:
            for fn in fns:
                v = fn(row)
                if v is not None:
                    return v
            return None

        return _Node(coalesce, type_)

    def nullif(self, node: exp.Nullif) -> _Node:
        # Spark rewrites NULLIF(a, b) to IF(a = b, NULL, a): the type is a's.
        a = self.compile(node.this)
        equal = sc.comparison(a.fn, self.compile(node.expression).fn, operator.eq)
        fa = a.fn

        def nullif(row: Row) -> Any:
            return None if equal(row) is True else fa(row)

        return _Node(nullif, a.type)

    # -- numbers ---------------------------------------------------------------------
    def round_(self, node: exp.Round) -> _Node:
        a = self.compile(node.this)
        scale, sign = node.args.get("decimals"), 1
        if isinstance(scale, exp.Neg):
            scale, sign = scale.this, -1
        if scale is not None and not (isinstance(scale, exp.Literal) and scale.is_int):
            raise _unsupported(node, "ROUND with a scale that is not an integer literal")
        if node.args.get("truncate"):
            raise _unsupported(node, "ROUND with a third argument")
        digits = sign * int(scale.this) if scale is not None else 0
        type_ = DOUBLE if a.type in (STRING, DOUBLE) else a.type
        return _Node(sc.rounded(a.fn, digits, 32 if a.type == INT else 64), type_)

    # -- strings and casts -----------------------------------------------------------
    def substring(self, node: exp.Substring) -> _Node:
        fs = self.compile(node.this).fn
        fpos = self.compile(node.args["start"]).fn if node.args.get("start") else None
        flen = self.compile(node.args["length"]).fn if node.args.get("length") else None
        if fpos is None:
            raise _unsupported(node, "SUBSTR without a start position")
        return _Node(sc.substring(fs, fpos, flen), STRING)

    def string_fn(self, node: exp.Func) -> _Node:
        fa = self.compile(node.this).fn
        method, type_ = _STRING_FNS[type(node)]
        to_string = sv.to_string

        def string_fn(row: Row) -> Any:
            v = fa(row)
            return None if v is None else method(to_string(v))

        return _Node(string_fn, type_)

    def concat(self, node: exp.DPipe) -> _Node:
        fa, fb = self.compile(node.this).fn, self.compile(node.expression).fn
        to_string = sv.to_string

        def concat(row: Row) -> str | None:
            a = fa(row)
            if a is None:
                return None
            b = fb(row)
            return None if b is None else to_string(a) + to_string(b)

        return _Node(concat, STRING)

    def cast(self, node: exp.Cast) -> _Node:
        to = node.args["to"]
        target = _CAST_TARGETS.get(to.this)
        if target is None or to.expressions:
            raise _unsupported(node, f"CAST to {to.sql()}")
        return _Node(sc.converted(self.compile(node.this).fn, target), target)


def _coerce_all(nodes: list[_Node]) -> tuple[str | None, list[Fn]]:
    """Branches of CASE/COALESCE converted to their common Spark type."""
    target = sv.common_type([n.type for n in nodes])
    if target in (None, NULL):
        return target, [n.fn for n in nodes]
    # A branch of unknown type is only converted where that can't be wrong: to double (it
    # is numeric, else the common type would be string) or to string.
    convert_unknown = target in (DOUBLE, STRING)
    return target, [
        sc.converted(n.fn, target)
        if n.type not in (target, NULL) and (n.type is not None or convert_unknown)
        else n.fn
        for n in nodes
    ]


_ARITH: dict[type, Callable[[Fn, Fn, int], Fn]] = {
    exp.Add: sc.arithmetic(operator.add),
    exp.Sub: sc.arithmetic(operator.sub),
    exp.Mul: sc.arithmetic(operator.mul),
    exp.Mod: sc.arithmetic(sc.java_mod),
}

_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.LT: operator.lt,
    exp.LTE: operator.le, exp.GT: operator.gt, exp.GTE: operator.ge,
}

_STRING_FNS: dict[type, tuple[Callable[[str], Any], str]] = {
    exp.Lower: (str.lower, STRING), exp.Upper: (str.upper, STRING), exp.Length: (len, INT),
}

_CAST_TARGETS = {
    exp.DataType.Type.BIGINT: BIGINT, exp.DataType.Type.INT: INT,
    exp.DataType.Type.DOUBLE: DOUBLE, exp.DataType.Type.FLOAT: DOUBLE,
    exp.DataType.Type.TEXT: STRING,
    exp.DataType.Type.VARCHAR: STRING, exp.DataType.Type.BOOLEAN: BOOLEAN,
}

_HANDLERS: dict[type, Callable[[_Compiler, Any], _Node]] = {
    exp.Column: _Compiler.column, exp.Literal: _Compiler.literal,
    exp.Boolean: _Compiler.boolean, exp.Null: _Compiler.null, exp.Paren: _Compiler.paren,
    **dict.fromkeys(_ARITH, _Compiler.arith),
    exp.Div: _Compiler.div, exp.Neg: _Compiler.neg, exp.Abs: _Compiler.abs,
    **dict.fromkeys(_COMPARE, _Compiler.compare),
    exp.And: _Compiler.and_, exp.Or: _Compiler.or_, exp.Not: _Compiler.not_,
    exp.Is: _Compiler.is_, exp.In: _Compiler.in_, exp.Between: _Compiler.between,
    exp.Like: _Compiler.like, exp.Case: _Compiler.case, exp.Coalesce: _Compiler.coalesce,
    **dict.fromkeys(_STRING_FNS, _Compiler.string_fn),
    exp.DPipe: _Compiler.concat, exp.Cast: _Compiler.cast, exp.TryCast: _Compiler.cast,
    exp.Nullif: _Compiler.nullif, exp.Round: _Compiler.round_,
    exp.Substring: _Compiler.substring,
}
