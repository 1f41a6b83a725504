"""Row-level SQL evaluation: the closures compiled expressions are made of.

``operators/expressions.py`` compiles a sqlglot tree by composing these builders; each
returns a function of the input row. They implement SQL's NULL handling (three-valued
logic, NULL in -> NULL out) with Spark's non-ANSI rules from ``values``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from partialflow.operators import values as sv

Row = tuple[Any, ...]
Fn = Callable[[Row], Any]


def and3(fa: Fn, fb: Fn) -> Fn:
    """Three-valued AND: FALSE wins over NULL."""

    def and_(row: Row) -> bool | None:
        a = fa(row)
        if a is False:
            return False
        b = fb(row)
        if b is False:
            return False
        return None if a is None or b is None else True

    return and_


def or3(fa: Fn, fb: Fn) -> Fn:
    """Three-valued OR: TRUE wins over NULL."""

    def or_(row: Row) -> bool | None:
        a = fa(row)
        if a is True:
            return True
        b = fb(row)
        if b is True:
            return True
        return None if a is None or b is None else False

    return or_


def negate(fn: Fn) -> Fn:
    """Three-valued NOT: NULL stays NULL."""

    def not_(row: Row) -> bool | None:
        v = fn(row)
        return None if v is None else not v

    return not_


def comparison(fa: Fn, fb: Fn, op: Callable[[Any, Any], bool]) -> Fn:
    """``a <op> b``: NULL if either is NULL; a string meeting a number is cast to it."""
    coerce = sv.coerce_for_comparison

    def compare(row: Row) -> bool | None:
        a = fa(row)
        if a is None:
            return None
        b = fb(row)
        if b is None:
            return None
        if a.__class__ is not b.__class__ and (a.__class__ is str or b.__class__ is str):
            a, b = coerce(a, b)
            if a is None or b is None:
                return None
        return op(a, b)

    return compare


def membership(fx: Fn, fns: list[Fn]) -> Fn:
    """x IN (...): TRUE on a match, else NULL if x or any item is NULL, else FALSE."""

    def in_(row: Row) -> bool | None:
        v = fx(row)
        if v is None:
            return None
        saw_null = False
        for fn in fns:
            w = fn(row)
            if w is None:
                saw_null = True
            elif sv.in_equal(v, w):
                return True
        return None if saw_null else False

    return in_


def constant_membership(fx: Fn, values: list[Any]) -> Fn:
    """IN over literals: set lookups instead of a loop."""
    has_null = None in values
    strings = frozenset(v for v in values if v.__class__ is str)
    others = frozenset(v for v in values if v is not None and v.__class__ is not str)
    # Spark's common type of a string and a number in IN is STRING: compare as text.
    as_text = frozenset(sv.to_string(v) for v in values if v is not None)
    to_string = sv.to_string

    def in_const(row: Row) -> bool | None:
        v = fx(row)
        if v is None:
            return None
        if v.__class__ is str:
            if v in strings or (others and v in as_text):
                return True
        elif v in others or (strings and to_string(v) in as_text):
            return True
        return None if has_null else False

    return in_const


def numeric_unary(fa: Fn, op: Callable[[Any], Any], bits: int) -> Fn:
    """Unary minus / ABS: integers wrap at ``bits``; strings are cast to double."""

    def unary(row: Row) -> Any:
        v = fa(row)
        if v is None:
            return None
        if v.__class__ is str:
            v = sv.to_double(v)
            return None if v is None else op(v)
        r = op(v)
        return sv.wrap(r, bits) if r.__class__ is int else r

    return unary


def arithmetic(op: Callable[[Any, Any], Any]) -> Callable[[Fn, Fn, int], Fn]:
    """A builder of ``a <op> b`` closures whose integer results wrap at ``bits``."""

    def build(fa: Fn, fb: Fn, bits: int) -> Fn:
        lo, hi = (sv.INT32_MIN, sv.INT32_MAX) if bits == 32 else (sv.INT64_MIN, sv.INT64_MAX)

        def arith(row: Row) -> Any:
            a = fa(row)
            if a is None:
                return None
            b = fb(row)
            if b is None:
                return None
            if a.__class__ is str or b.__class__ is str:  # Spark casts strings to double
                a, b = sv.to_double(a), sv.to_double(b)
                if a is None or b is None:
                    return None
            r = op(a, b)
            if r.__class__ is int and not lo <= r <= hi:
                return sv.wrap(r, bits)
            return r

        return arith

    return build


def division(fa: Fn, fb: Fn) -> Fn:
    """``/``: always a double (operands cast), NULL on a zero divisor."""

    def div(row: Row) -> Any:
        a = fa(row)
        if a is None:
            return None
        b = fb(row)
        if b is None:
            return None
        a, b = sv.to_double(a), sv.to_double(b)
        if a is None or b is None or b == 0:
            return None
        return a / b

    return div


def java_mod(a: Any, b: Any) -> Any:
    """``%`` as Java computes it; NULL on a zero divisor."""
    if b == 0:
        return None
    if a.__class__ is float or b.__class__ is float:
        try:
            return math.fmod(a, b)
        except ValueError:  # fmod(inf, x): Java gives NaN
            return math.nan
    r = abs(a) % abs(b)  # Java remainder: the sign follows the dividend
    return -r if a < 0 else r


def converted(fn: Fn, target: str) -> Fn:
    """``CAST(fn AS target)`` (also the implicit casts of CASE / COALESCE branches)."""

    convert = sv.CONVERTERS[target]

    def converted(row: Row) -> Any:
        v = fn(row)
        return None if v is None else convert(v)

    return converted


def rounded(fa: Fn, digits: int, bits: int = 64) -> Fn:
    """``ROUND(a, digits)``: half away from zero on the decimal digits Java prints for a
    double (Spark rounds ``BigDecimal(Double.toString(d))``), so 1.25 -> 1.3 where
    Python's round gives 1.2. Integers stay integers (wrapping at ``bits``); strings are
    cast to double."""
    quantum = Decimal(1).scaleb(-digits)

    def round_(row: Row) -> Any:
        v = fa(row)
        if v is None:
            return None
        if v.__class__ is str:
            v = sv.to_double(v)
            if v is None:
                return None
        if v.__class__ is int:
            if digits >= 0:
                return v
            # Java's BigDecimal.toLong keeps the low bits of a result out of range.
            return sv.wrap(int(Decimal(v).quantize(quantum, ROUND_HALF_UP)), bits)
        if v != v or v in (math.inf, -math.inf):
            return v
        # + 0.0: Java's BigDecimal has no -0, so a value rounded to zero is 0.0.
        return float(Decimal(repr(v)).quantize(quantum, ROUND_HALF_UP)) + 0.0

    return round_


def substring(fs: Fn, fpos: Fn, flen: Fn | None) -> Fn:
    """``SUBSTR(s, pos[, len])`` as Spark's UTF8String.substringSQL: 1-based, 0 means 1,
    a negative start counts from the end, and a start before the string shortens it."""

    def substr(row: Row) -> Any:
        s = fs(row)
        if s is None:
            return None
        p = fpos(row)
        if p is None:
            return None
        p = sv.to_int(p)
        n: Any = sv.INT32_MAX
        if flen is not None:
            n = flen(row)
            if n is None:
                return None
            n = sv.to_int(n)
        if p is None or n is None:
            return None
        text = sv.to_string(s)
        start = p - 1 if p > 0 else (len(text) + p if p < 0 else 0)
        end = min(start + n, sv.INT32_MAX)
        start = max(start, 0)
        if start >= end:
            return ""
        return text[start:end]

    return substr
