"""Expressions: Python evaluation must equal Spark's on a table of tricky rows.

Spark (non-ANSI) is the reference. All expressions run in one Spark job; each is its own
test case so a mismatch names the construct.
"""

from __future__ import annotations

import math

import pytest
import sqlglot
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partialflow.operators.expressions import UnsupportedExpression, compile_expr

SCHEMA = T.StructType([
    T.StructField("_c0", T.LongType()), T.StructField("_c1", T.LongType()),
    T.StructField("_c2", T.DoubleType()), T.StructField("_c3", T.DoubleType()),
    T.StructField("_c4", T.StringType()), T.StructField("_c5", T.StringType()),
    T.StructField("_c6", T.BooleanType()), T.StructField("_c7", T.BooleanType()),
])
TYPES = ["bigint", "bigint", "double", "double", "string", "string", "boolean", "boolean"]

ROWS = [
    (7, 2, 1.5, -2.0, "abc", "12", True, False),
    (-7, 2, -1.5, 0.0, "A_b%c", " 3.9 ", False, None),
    (7, -3, 0.0, 2.5, "", "x1", None, True),
    (0, 0, None, -0.5, None, "-0", True, True),
    (None, 5, 3.0, None, "héllo", "1e3", None, None),
    (2**63 - 1, 1, 1e20, 1e-5, "a\nb", "yes", True, None),
    (-(2**63), -1, -7.25, 3.0, "ABC", None, False, False),
    (10, 4, 2.0, 0.5, "abc%", "inf", None, False),
    (3, None, 1e7, 123456.789, "a\\b", "7", True, True),
    (-5, 3, -5.5, -2.0, "7", "  -12.7", False, True),
    (2**31, 2**31 - 1, 0.001, 1e-4, "NaN", "f", True, False),
]

EXPRESSIONS = [
    # arithmetic
    "_c0 + _c1", "_c0 - _c1", "_c0 * _c1", "_c0 / _c1", "_c0 % _c1", "_c2 % _c3",
    "_c0 % _c3", "_c2 / _c3", "-_c0", "-_c2", "_c0 + _c2", "_c0 * 2", "_c0 / 2",
    "_c0 + 1.5", "(_c0 + 1) * 3", "_c2 * _c3", "7 / 2", "_c0 + _c5", "_c5 * 2",
    "ABS(_c0)", "ABS(_c2)", "_c1 % -3", "-7 % _c1", "_c2 - 0.1",
    # comparisons
    "_c0 = _c1", "_c0 <> _c1", "_c0 != _c1", "_c0 < _c2", "_c0 <= _c1", "_c0 > _c1",
    "_c0 >= _c2", "_c4 < _c5", "_c4 = 'abc'", "_c5 = 12", "_c5 > 3", "_c5 < 2.5",
    "_c6 = _c7", "_c5 = TRUE", "_c4 > _c0",
    # logic
    "_c6 AND _c7", "_c6 OR _c7", "NOT _c6", "NOT _c7", "_c0 > 0 AND _c2 > 0",
    "_c0 > 0 OR _c2 IS NULL", "NOT (_c0 > _c1)", "_c6 AND NULL", "_c7 OR NULL",
    # null tests
    "_c0 IS NULL", "_c2 IS NOT NULL", "_c4 IS NULL OR _c4 = ''",
    # IN
    "_c0 IN (7, 10, -7)", "_c0 NOT IN (7, 10)", "_c0 IN (7, NULL)", "_c0 NOT IN (1, NULL)",
    "_c4 IN ('abc', 'ABC')", "_c2 IN (1.5, 2)", "_c5 IN (12, 7)", "_c0 IN (_c1, 10)",
    "_c4 IN (7, 'abc')", "_c0 IN ('7', 'x')",
    # BETWEEN
    "_c0 BETWEEN 0 AND 10", "_c0 NOT BETWEEN _c1 AND 10", "_c2 BETWEEN -2 AND 2.5",
    "_c0 BETWEEN NULL AND 5",
    # LIKE
    "_c4 LIKE 'a%'", "_c4 LIKE '%b%'", "_c4 NOT LIKE 'A_b%'", "_c4 LIKE '%\\\\%'",
    "_c4 LIKE 'a_b'", "_c4 LIKE _c5", "_c0 LIKE '7%'", "_c4 LIKE '%\\\\\\\\%'",
    "_c4 LIKE 'A\\\\_b%'", "_c4 LIKE 'a.c'",
    # CASE
    "CASE WHEN _c0 > 0 THEN 'pos' WHEN _c0 < 0 THEN 'neg' ELSE 'zero' END",
    "CASE WHEN _c6 THEN _c0 ELSE _c2 END",
    "CASE _c1 WHEN 2 THEN 'two' WHEN -3 THEN 'minus three' END",
    "CASE WHEN _c0 > 5 THEN 1 ELSE 2.5 END", "CASE WHEN _c6 THEN _c0 END",
    "CASE WHEN _c7 THEN _c4 ELSE _c0 END",
    # COALESCE
    "COALESCE(_c0, _c1, 0)", "COALESCE(_c2, _c0)", "COALESCE(_c4, _c5, 'none')",
    "COALESCE(_c0, 1.5)", "COALESCE(_c6, _c7)",
    # strings
    "LOWER(_c4)", "UPPER(_c4)", "LENGTH(_c4)", "LENGTH(_c0)", "_c4 || _c5", "_c4 || _c0",
    "_c4 || _c2", "'x' || _c6", "UPPER(_c4) || '!'", "LOWER(_c5) || _c3",
    # casts
    "CAST(_c5 AS BIGINT)", "CAST(_c5 AS INT)", "CAST(_c5 AS DOUBLE)", "CAST(_c5 AS BOOLEAN)",
    "CAST(_c2 AS BIGINT)", "CAST(_c2 AS INT)", "CAST(_c0 AS INT)", "CAST(_c0 AS DOUBLE)",
    "CAST(_c2 AS TEXT)", "CAST(_c3 AS STRING)", "CAST(_c0 AS VARCHAR)", "CAST(_c6 AS BIGINT)",
    "CAST(_c6 AS STRING)", "CAST(_c0 AS BOOLEAN)", "CAST(_c4 AS INT)", "CAST(_c2 AS BOOLEAN)",
    "CAST(_c0 AS INT) * 2", "CAST(_c1 AS INT) + 2147483647", "CAST(_c4 AS DOUBLE)",
    "CAST(_c3 * 1000 AS STRING)", "CAST(_c3 / 3 AS STRING)", "CAST(_c4 AS BOOLEAN)",
    # FLOAT and REAL name DOUBLE (compiled for Spark as DOUBLE); INTEGER, LONG, BOOL
    "CAST(_c5 AS REAL)", "CAST(_c0 AS FLOAT) / 3", "CAST(_c5 AS INTEGER)", "CAST(_c5 AS LONG)",
    "CAST(_c5 AS BOOL)",
    # NULLIF: IF(a = b, NULL, a), with the comparison's implicit casts
    "NULLIF(_c0, 7)", "NULLIF(_c0, _c1)", "NULLIF(_c4, 'abc')", "NULLIF(_c5, 12)",
    "NULLIF(_c2, _c0)", "NULLIF(_c6, _c7)",
    # ROUND: half away from zero on the printed decimal digits; integers stay integers
    "ROUND(_c2)", "ROUND(_c2, 1)", "ROUND(_c3, 2)", "ROUND(_c2 / 3, 3)", "ROUND(_c0, -1)",
    "ROUND(_c1, -2)", "ROUND(_c0)", "ROUND(_c3 * 1000, -2)", "ROUND(_c5, 1)", "ROUND(-_c3)",
    "ROUND(_c2 * 1.1, 1)", "ROUND(_c3, 0)", "ROUND(CAST(_c0 AS INT), -1)",
    # SUBSTR: 1-based, 0 means 1, a negative start counts from the end
    "SUBSTR(_c4, 2)", "SUBSTR(_c4, 0, 2)", "SUBSTR(_c4, -2)", "SUBSTR(_c4, -5, 3)",
    "SUBSTR(_c4, 2, -1)", "SUBSTR(_c4, _c1, 2)", "SUBSTR(_c4, 1, _c1)", "SUBSTR(_c0, 2, 3)",
    "SUBSTR(_c2, 1, 4)", "SUBSTRING(_c5, 2, 2)", "SUBSTR(_c4, _c5)",
]
# Branches of different column types: Spark converts them to a common type, which only
# declared column types reveal (without them the values are returned as they come).
TYPE_DEPENDENT = {
    "CASE WHEN _c6 THEN _c0 ELSE _c2 END", "CASE WHEN _c7 THEN _c4 ELSE _c0 END",
    "COALESCE(_c2, _c0)",
}
# Spark's own dialect parses CAST as TRY_CAST and marks `/` safe: the same semantics here.
SPARK_DIALECT = ["CAST(_c5 AS BIGINT)", "_c0 / _c1", "CAST(_c2 AS STRING) || _c4"]

CASES = [(s, None) for s in EXPRESSIONS] + [(s, "spark") for s in SPARK_DIALECT]


@pytest.fixture(scope="module")
def spark_results(spark):
    """{(expression, dialect): [(input row, Spark value), ...]} from one Spark job."""
    compiled = [compile_expr(sqlglot.parse_one(s, read=d), TYPES) for s, d in CASES]
    df = spark.createDataFrame(ROWS, SCHEMA)
    cols = [F.col(f"_c{i}") for i in range(len(TYPES))]
    out = df.select(*cols, *[F.expr(c.sql).alias(f"e{k}") for k, c in enumerate(compiled)])
    results: dict = {case: [] for case in CASES}
    for r in out.collect():
        row = tuple(r[: len(TYPES)])
        for k, case in enumerate(CASES):
            results[case].append((row, r[len(TYPES) + k]))
    return results


def _same(py, sp) -> bool:
    if py is None or sp is None:
        return py is sp
    if type(py) is not type(sp):
        return False
    if isinstance(py, float):
        return (math.isnan(py) and math.isnan(sp)) or py == sp
    return py == sp


@pytest.mark.parametrize("text,dialect", CASES, ids=[f"{d or ''}:{s}" for s, d in CASES])
def test_python_matches_spark(spark_results, text, dialect):
    for typed in (TYPES, None) if text not in TYPE_DEPENDENT else (TYPES,):
        compiled = compile_expr(sqlglot.parse_one(text, read=dialect), typed)
        bad = [(row, compiled.eval(row), sp) for row, sp in spark_results[(text, dialect)]
               if not _same(compiled.eval(row), sp)]
        assert not bad, f"{text} [{compiled.sql}] types={typed}: (row, python, spark) {bad}"


@pytest.mark.xfail(strict=True, reason="Java 17 prints a few doubles with a non-shortest "
                   "digit string (1e23 -> 9.999999999999999E22); Python's shortest repr is used")
def test_java_double_printing_quirk():
    assert compile_expr(sqlglot.parse_one("CAST(_c0 AS STRING)")).eval((1e23,)) == (
        "9.999999999999999E22")


def test_metadata():
    e = compile_expr(sqlglot.parse_one("_c3 + _c1 * 2"))
    assert e.columns_used == {1, 3}
    assert e.column is None
    bare = compile_expr(sqlglot.parse_one("_c2"))
    assert bare.column == 2 and bare.sql == "_c2" and bare.eval((0, 1, "x")) == "x"
    assert compile_expr(sqlglot.parse_one("_c0 + 1.5")).sql == "_c0 + CAST(1.5 AS DOUBLE)"
    same = compile_expr(sqlglot.parse_one("_c3 + _c1 * 2"))
    assert e == same and hash(e) == hash(same)


def test_like_with_a_bad_pattern_in_data_is_null():
    e = compile_expr(sqlglot.parse_one("_c0 LIKE _c1"))
    assert e.eval(("ab", "a\\")) is None and e.eval(("ab", "a%")) is True


@pytest.mark.parametrize("text,construct", [
    ("SQRT(_c0)", "Sqrt"),
    ("_c0 ILIKE 'x'", "ILike"),
    ("_c0 LIKE 'a' ESCAPE '!'", "Escape"),
    ("foo", "column reference"),
    ("t._c0", "column reference"),
    ("CAST(_c0 AS DECIMAL(10, 2))", "CAST to DECIMAL"),
    ("CAST(_c0 AS VARCHAR(3))", "CAST to VARCHAR(3)"),
    ("_c0 IS TRUE", "IS TRUE"),
    ("_c0 IN (SELECT 1)", "IN with a subquery"),
    ("_c0 = ?", "Placeholder"),
    ("_c0 LIKE 'a\\b'", "LIKE pattern"),
    ("99999999999999999999 + _c0", "integer literal"),
])
def test_unsupported_names_the_construct(text, construct):
    with pytest.raises(UnsupportedExpression, match="unsupported expression") as err:
        compile_expr(sqlglot.parse_one(text))
    assert construct in str(err.value)
