"""SQL value semantics, as Spark computes them with ``spark.sql.ansi.enabled=false``.

Spark is the reference: upquery replies are computed by Spark and incremental updates by
Python, so every conversion and implicit cast the two can both perform must agree. This
module holds the value-level rules (casts, integer wrap-around, Java's number printing,
LIKE patterns, implicit casts between strings and numbers); ``operators/expressions.py``
composes them into expressions. Types are named by Spark's simple type names
(``operators/types.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from partialflow.operators.types import BIGINT, BOOLEAN, DOUBLE, INT, NULL, STRING

# The one NaN object rows carry. Python compares floats in a tuple by identity first, then
# by value, and NaN != NaN: two NaN objects make two different rows, so a row holding a
# NaN could never be retracted by a delete decoded (or computed) afresh. Spark, like SQL
# engines generally, treats NaN as equal to itself in grouping and equality; so every
# NaN entering or produced in the dataflow is replaced by this one object.
NAN: float = float("nan")


def canonical_row(row: tuple) -> tuple:
    """``row`` with every NaN replaced by ``NAN`` (the same tuple when it has none)."""
    for v in row:
        if v != v:  # only NaN is unequal to itself
            return tuple([NAN if v != v else v for v in row])
    return row


def canonical_values(values: list) -> list:
    """A DOUBLE column's values with every NaN replaced by ``NAN``."""
    for v in values:
        if v != v:
            return [NAN if v != v else v for v in values]
    return values


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_NUMERIC_RANK = {INT: 0, BIGINT: 1, DOUBLE: 2}


def arith_type(a: str | None, b: str | None) -> str | None:
    """Result type of ``a + b`` (also - * %): strings are cast to double, ints widen."""
    if DOUBLE in (a, b) or STRING in (a, b):
        return DOUBLE
    known = {t for t in (a, b) if t != NULL}
    if not known or None in known or BOOLEAN in known:
        return None
    return INT if known == {INT} else BIGINT


def common_type(types: Sequence[str | None]) -> str | None:
    """The type CASE / COALESCE branches are converted to (known branches only)."""
    known = {t for t in types if t is not None and t != NULL}
    if not known:
        return NULL if all(t == NULL for t in types) else None
    if len(known) == 1:
        return known.pop()
    if STRING in known:
        return STRING
    if known <= _NUMERIC_RANK.keys():
        return max(known, key=_NUMERIC_RANK.__getitem__)
    return None


def wrap(value: int, bits: int) -> int:
    """Two's complement wrap-around, as Java integer arithmetic overflows."""
    half = 1 << (bits - 1)
    return ((value + half) & ((1 << bits) - 1)) - half


# Spark trims ASCII whitespace and control characters around numbers and booleans.
def _trim(s: str) -> str:
    return s.strip("".join(chr(c) for c in range(33)))


_INTEGRAL = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?", re.ASCII)
_DOUBLE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?", re.ASCII)
_SPECIAL_DOUBLES = {
    "inf": float("inf"), "+inf": float("inf"), "infinity": float("inf"),
    "+infinity": float("inf"), "-inf": float("-inf"), "-infinity": float("-inf"),
    "nan": float("nan"),
}


def _string_to_integral(s: str, lo: int, hi: int) -> int | None:
    # Spark accepts a fractional part and truncates it ('1.9' -> 1), but no exponent.
    m = _INTEGRAL.fullmatch(_trim(s))
    if m is None or not (m[2] or m[3]):
        return None
    value = int(m[2] or "0")
    value = -value if m[1] == "-" else value
    return value if lo <= value <= hi else None


def _double_to_integral(d: float, lo: int, hi: int) -> int:
    # Java's (long)/(int) conversion: NaN -> 0, out of range saturates, else truncates.
    if d != d:
        return 0
    if d >= hi:
        return hi
    if d <= lo:
        return lo
    return int(d)


def to_bigint(v: Any) -> int | None:
    """CAST(v AS BIGINT)."""
    if v.__class__ is str:
        return _string_to_integral(v, INT64_MIN, INT64_MAX)
    if v.__class__ is float:
        return _double_to_integral(v, INT64_MIN, INT64_MAX)
    return int(v)


def to_int(v: Any) -> int | None:
    """CAST(v AS INT): strings out of range give NULL, longs wrap, doubles saturate."""
    if v.__class__ is str:
        return _string_to_integral(v, INT32_MIN, INT32_MAX)
    if v.__class__ is float:
        return _double_to_integral(v, INT32_MIN, INT32_MAX)
    return wrap(int(v), 32)


def to_double(v: Any) -> float | None:
    """CAST(v AS DOUBLE): Java's Double.parseDouble grammar plus Spark's inf/nan names."""
    if v.__class__ is not str:
        return float(v)
    s = _trim(v)
    special = _SPECIAL_DOUBLES.get(s.lower())
    if special is not None:
        return special
    if s in ("Infinity", "+Infinity", "-Infinity", "NaN", "+NaN", "-NaN"):
        return float(s.replace("Infinity", "inf"))
    if _DOUBLE.fullmatch(s) is None:
        return None
    return float(s.rstrip("fFdD"))


_TRUE = frozenset({"t", "true", "y", "yes", "1"})
_FALSE = frozenset({"f", "false", "n", "no", "0"})


def to_boolean(v: Any) -> bool | None:
    """CAST(v AS BOOLEAN)."""
    if v.__class__ is str:
        s = _trim(v).lower()
        return True if s in _TRUE else False if s in _FALSE else None
    return bool(v)


def to_string(v: Any) -> str:
    """CAST(v AS STRING), also the implicit cast of ``||``, LIKE, LOWER, ..."""
    if v.__class__ is str:
        return v
    if v.__class__ is bool:
        return "true" if v else "false"
    if v.__class__ is float:
        return java_double_str(v)
    return str(v)


def java_double_str(d: float) -> str:
    """Java's Double.toString: plain in [1e-3, 1e7), else computerized scientific.

    Python's repr gives the shortest round-tripping digits; Java 17 agrees except for a
    few values where it prints one digit more (e.g. 1e23), which this does not copy.
    """
    if d != d:
        return "NaN"
    if d in (float("inf"), float("-inf")):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        return repr(d)
    sign, digits, exponent = Decimal(repr(d)).normalize().as_tuple()
    text = "".join(map(str, digits))
    power = len(digits) - 1 + int(exponent)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    BIGINT: to_bigint, INT: to_int, DOUBLE: to_double, STRING: to_string, BOOLEAN: to_boolean,
}


def coerce_for_comparison(a: Any, b: Any) -> tuple[Any, Any]:
    """A string compared with a non-string is cast to the other side's type."""
    if a.__class__ is str:
        return _cast_like(a, b), b
    return a, _cast_like(b, a)


def _cast_like(s: str, other: Any) -> Any:
    if other.__class__ is bool:
        return to_boolean(s)
    if other.__class__ is float:
        return to_double(s)
    return to_bigint(s)


def in_equal(v: Any, w: Any) -> bool:
    """Equality inside IN, where a string meets a number as text (common type STRING)."""
    if (v.__class__ is str) != (w.__class__ is str):
        return to_string(v) == to_string(w)
    return bool(v == w)


@lru_cache(maxsize=256)
def like_regex(pattern: str) -> re.Pattern[str]:
    """Spark's LIKE: % any run, _ one character, backslash escapes %, _ and itself.

    Raises ValueError where Spark refuses the pattern.
    """
    out: list[str] = []
    chars = iter(pattern)
    for c in chars:
        if c == "\\":
            nxt = next(chars, None)
            if nxt is None:
                raise ValueError("it is not allowed to end with the escape character")
            if nxt not in "_%\\":
                raise ValueError(f"the escape character is not allowed to precede {nxt!r}")
            out.append(re.escape(nxt))
        elif c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        else:
            out.append(re.escape(c))
    return re.compile("".join(out), re.DOTALL)
