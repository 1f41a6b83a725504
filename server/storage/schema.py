"""Table schemas, identifier rules and the batch validator of the write path.

Validation is column-wise on purpose: a batch of 1000 rows is checked with a handful of C-level
passes (``set(map(type, column))``, ``min``/``max``) instead of one Python branch per value, and
only when a fast check fails do we walk the rows one by one to name the exact offending row.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from partialflow.operators.types import ColumnType, column_type_names, normalize_type
from partialflow.operators.values import NAN, canonical_values
from partialflow.server.errors import InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql import types as T

# Storage-internal columns of every Parquet segment; user columns may not shadow them.
LSN_COL = "_lsn"
DIFF_COL = "_diff"
_META_COLUMNS = {LSN_COL, DIFF_COL}

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_IDENT_LEN = 64

# Names refused for tables, views and columns: words sqlglot (which parses every view) cannot
# read as an identifier, words it reads as literals or functions (null, true, current_date...),
# and the core clause keywords that make statements ambiguous. Common words that parse fine as
# names (user, key, value, end, ...) stay allowed: the running example has visit.user.
RESERVED_WORDS: frozenset[str] = frozenset(
    """
    all alter and any as asc between by case create cross current_date current_time
    current_timestamp current_user delete desc distinct drop else except exists false fetch for
    from full grant group having in inner insert intersect interval into is join lateral left
    like limit minus natural not null offset on or order outer primary right select session_user
    set table then true union update using values view when where with
    """.split()
)

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_ARROW_TYPES: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "TEXT": pa.string(),
    "BOOLEAN": pa.bool_(),
}


def _spark_type(name: str) -> T.DataType:
    # Imported here: the write validator below is used by the dataflow's key checks,
    # which must not load pyspark (JVM-free tests, and reads need no Spark types).
    from pyspark.sql import types as T

    return {"BIGINT": T.LongType, "DOUBLE": T.DoubleType, "TEXT": T.StringType,
            "BOOLEAN": T.BooleanType}[name]()


def _column_type(name: str) -> ColumnType:
    column_type = normalize_type(name)
    if column_type is None:
        raise InvalidArgument(f"unknown column type {name!r}; types are {column_type_names()}")
    return column_type


def check_identifier(name: object, what: str) -> str:
    """Validate a table/view/column name; returns it unchanged or raises InvalidArgument."""
    if not isinstance(name, str) or not _IDENT_RE.match(name):
        raise InvalidArgument(
            f"invalid {what} name {name!r}: names must match [A-Za-z_][A-Za-z0-9_]*"
        )
    if len(name) > MAX_IDENT_LEN:
        raise InvalidArgument(
            f"invalid {what} name {name!r}: longer than {MAX_IDENT_LEN} characters"
        )
    if name.lower() in RESERVED_WORDS:
        raise InvalidArgument(f"invalid {what} name {name!r}: it is a reserved SQL word")
    return name


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    primary_key: bool = False


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[Column, ...]

    # Derived values are cached (cached_property writes the instance __dict__ directly, which
    # a frozen dataclass allows): the write path asks for them on every call.
    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @cached_property
    def primary_key(self) -> tuple[int, ...]:
        """Indexes of the PRIMARY KEY columns (empty for a bag table)."""
        return tuple(i for i, c in enumerate(self.columns) if c.primary_key)

    def spark_schema(self) -> T.StructType:
        """The table's columns as a Spark StructType (all nullable, like SQL columns)."""
        from pyspark.sql import types as T

        return T.StructType(
            [T.StructField(c.name, _spark_type(c.type), True) for c in self.columns]
        )

    def arrow_schema(self) -> pa.Schema:
        """The table's columns as a pyarrow schema."""
        return self._arrow_schema

    @cached_property
    def _arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, _ARROW_TYPES[c.type]) for c in self.columns])

    def segment_arrow_schema(self) -> pa.Schema:
        """Schema of a Parquet segment: the columns plus ``_lsn`` and ``_diff``."""
        return self.arrow_schema().append(pa.field(LSN_COL, pa.int64())).append(
            pa.field(DIFF_COL, pa.int64())
        )

    def segment_spark_schema(self) -> T.StructType:
        from pyspark.sql import types as T

        s = self.spark_schema()
        return T.StructType(
            list(s.fields)
            + [
                T.StructField(LSN_COL, T.LongType(), True),
                T.StructField(DIFF_COL, T.LongType(), True),
            ]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": [[c.name, c.type, c.primary_key] for c in self.columns],
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> TableSchema:
        return TableSchema(
            obj["name"], tuple(Column(n, t, bool(pk)) for n, t, pk in obj["columns"])
        )


def validate_schema(schema: TableSchema) -> TableSchema:
    """Check names and types of a schema; returns it with types normalized."""
    if not isinstance(schema, TableSchema):
        raise InvalidArgument(f"expected a TableSchema, got {type(schema).__name__}")
    check_identifier(schema.name, "table")
    if not schema.columns:
        raise InvalidArgument(f"table '{schema.name}' must have at least one column")
    seen: set[str] = set()
    cols = []
    for c in schema.columns:
        check_identifier(c.name, "column")
        low = c.name.lower()
        if low in _META_COLUMNS:
            raise InvalidArgument(f"column name '{c.name}' is reserved for storage")
        # Spark resolves column names case-insensitively, so 'a' and 'A' would clash there.
        if low in seen:
            raise InvalidArgument(f"table '{schema.name}' has duplicate column name '{c.name}'")
        seen.add(low)
        cols.append(Column(c.name, _column_type(c.type), bool(c.primary_key)))
    return TableSchema(schema.name, tuple(cols))


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class _BadValue(Exception):
    """Internal: carries the index of the first bad value of a column."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason


def _coerce_slow(ctype: str, vals: list[Any]) -> list[Any]:
    """Per-value coercion; used only when the fast path found something unusual."""
    out: list[Any] = []
    for i, v in enumerate(vals):
        if v is None:
            out.append(None)
        elif ctype == "BIGINT":
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise _BadValue(i, f"expects BIGINT, got {_short(v)}")
            iv = int(v)
            if not _INT64_MIN <= iv <= _INT64_MAX:
                raise _BadValue(i, f"value {iv} is out of the BIGINT (64-bit) range")
            out.append(iv)
        elif ctype == "DOUBLE":
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise _BadValue(i, f"expects DOUBLE, got {_short(v)}")
            try:
                f = float(v) + 0.0
                out.append(NAN if f != f else f)
            except OverflowError:
                raise _BadValue(i, f"value {_short(v)} is out of the DOUBLE range") from None
        elif ctype == "TEXT":
            if not isinstance(v, str):
                raise _BadValue(i, f"expects TEXT, got {_short(v)}")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise _BadValue(i, f"value {_short(v)} is not valid UTF-8 text") from None
            out.append(str(v))
        else:  # BOOLEAN
            if not isinstance(v, bool):
                raise _BadValue(i, f"expects BOOLEAN, got {_short(v)}")
            out.append(bool(v))
    return out


_NONE = type(None)


def coerce_column(ctype: str, vals: list[Any]) -> tuple[list[Any], bool]:
    """Validate one column; returns (values, changed). Raises _BadValue for the first bad value.

    DOUBLE values are always rebuilt as ``v + 0.0``: that turns ints into floats and -0.0 into
    0.0, because Spark's GROUP BY treats -0.0 and 0.0 as one value and the row index must agree.
    For the same reason every NaN becomes the one ``NAN`` object (see operators.values).
    """
    types = set(map(type, vals))
    if ctype == "BIGINT":
        if types <= {int, _NONE}:
            nn = vals if _NONE not in types else [v for v in vals if v is not None]
            if not nn or (min(nn) >= _INT64_MIN and max(nn) <= _INT64_MAX):
                return vals, False
    elif ctype == "DOUBLE":
        if types <= {float, int}:
            try:
                return canonical_values([v + 0.0 for v in vals]), True
            except OverflowError:
                pass
        elif types <= {float, int, _NONE}:
            try:
                return canonical_values([None if v is None else v + 0.0 for v in vals]), True
            except OverflowError:
                pass
    elif ctype == "TEXT":
        if types <= {str, _NONE}:
            nn = vals if _NONE not in types else [v for v in vals if v is not None]
            try:
                # One C-level pass proves every value is encodable (no lone surrogates);
                # otherwise Parquet would refuse the row at flush time, long after the ack.
                "".join(nn).encode("utf-8")
                return vals, False
            except UnicodeEncodeError:
                pass
    elif ctype == "BOOLEAN" and types <= {bool, _NONE}:
        return vals, False
    return _coerce_slow(ctype, vals), True


def coerce_rows(
    schema: TableSchema, rows: Sequence[Sequence[Any]], label: str
) -> tuple[list[tuple[Any, ...]], list[list[Any]]]:
    """Validate and coerce a batch of rows for ``schema``.

    Returns (rows as tuples, columns as lists). ``label`` names the batch in messages
    ("row" for inserts, "delete row" for deletes); row numbers are 0-based list indexes.
    Raises InvalidArgument naming table, row and column on the first problem.
    """
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise InvalidArgument(
            f"table '{schema.name}': rows must be a list of rows, got {type(rows).__name__}"
        )
    n = len(schema.columns)
    if not rows:
        return [], [[] for _ in range(n)]
    if not set(map(type, rows)) <= {tuple, list}:
        fixed = []
        for i, r in enumerate(rows):
            if isinstance(r, (str, bytes, Mapping)) or not isinstance(r, Sequence):
                raise InvalidArgument(
                    f"table '{schema.name}' {label} {i}: expected a sequence of {n} values, "
                    f"got {_short(r)}"
                )
            fixed.append(tuple(r))
        rows = fixed
    if set(map(len, rows)) != {n}:
        for i, r in enumerate(rows):
            if len(r) != n:
                raise InvalidArgument(
                    f"table '{schema.name}' {label} {i}: expected {n} values "
                    f"({', '.join(schema.column_names)}), got {len(r)}"
                )
    cols = [[r[j] for r in rows] for j in range(n)] if n > 1 else [[r[0] for r in rows]]
    changed = False
    pk = set(schema.primary_key)
    for j, c in enumerate(schema.columns):
        try:
            vals, ch = coerce_column(c.type, cols[j])
        except _BadValue as e:
            raise InvalidArgument(
                f"table '{schema.name}' {label} {e.index}: column '{c.name}' {e.reason}"
            ) from None
        if j in pk and None in vals:
            i = vals.index(None)
            raise InvalidArgument(
                f"table '{schema.name}' {label} {i}: column '{c.name}' is part of the "
                "PRIMARY KEY and cannot be NULL"
            )
        if ch:
            cols[j] = vals
            changed = True
    if changed or not set(map(type, rows)) <= {tuple}:
        out = list(zip(*cols, strict=True))
    else:
        # already tuples of correctly typed values: reuse them
        out = cast("list[tuple]", list(rows))
    return out, cols


def coerce_filter_values(
    schema: TableSchema, column: str, values: Sequence[Any]
) -> tuple[str, list[Any]]:
    """Resolve a filter column (case-insensitively) and coerce its allowed values.

    Returns (the schema's spelling of the column, coerced values). None stays None: a filter
    value None matches NULL (null-safe equality), so callers wanting SQL ``=`` drop it first.
    """
    for c in schema.columns:
        if c.name.lower() == str(column).lower():
            break
    else:
        raise InvalidArgument(
            f"table '{schema.name}' has no column '{column}'; columns are: "
            + ", ".join(schema.column_names)
        )
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, set, frozenset)):
        raise InvalidArgument(f"filter on '{c.name}' needs a list of values, got {_short(values)}")
    try:
        coerced = _coerce_slow(c.type, list(values))
    except _BadValue as e:
        raise InvalidArgument(
            f"filter on table '{schema.name}' column '{c.name}' {e.reason}"
        ) from None
    return c.name, coerced
