"""Python values <-> wire ``Value``/``Row``/``Key`` messages, shared by client and server.

This is the hot path of every write and read (one message per cell), so the common types
are dispatched on ``type(v)`` before any slower ``isinstance`` checks, and repeated fields
are filled with ``add()`` (measured about 3x faster than building ``Value`` objects and
passing them to a constructor, which copies them).
"""

from __future__ import annotations

import datetime
import decimal
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

from partialflow.proto import partialflow_pb2 as pb


class WireError(ValueError):
    """A malformed message: the text names the field, e.g. ``inserts[3].values[0]: ...``.

    The server answers it with INVALID_ARGUMENT; the client library, which decodes with the
    same functions, raises it for a malformed answer.
    """


UNSET_VALUE = "Value has no kind set (use null_value for NULL)"


def _set_slow(target: pb.Value, v: Any, lenient: bool) -> None:
    """Values that are not exactly int/float/str/bool/None (numpy scalars, Decimal, ...)."""
    if isinstance(v, bool):
        target.bool_value = bool(v)
    elif isinstance(v, numbers.Integral):
        target.int_value = int(v)
    elif isinstance(v, (numbers.Real, decimal.Decimal)):
        target.double_value = float(v)
    elif isinstance(v, str):
        target.string_value = str(v)
    elif lenient and isinstance(v, (datetime.date, datetime.datetime)):
        # Spark query results can carry dates; the wire has no date type.
        target.string_value = v.isoformat()
    elif lenient:
        target.string_value = str(v)
    else:
        raise TypeError(
            f"unsupported value {v!r} of type {type(v).__name__}; "
            "values are int, float, str, bool or None"
        )


def set_value(target: pb.Value, v: Any, *, lenient: bool = False) -> None:
    """Store ``v`` into the ``Value`` message ``target``.

    Raises TypeError for a type the wire cannot carry (unless ``lenient``, used for
    server results, which stringifies it) and ValueError for an int outside int64.
    """
    t = type(v)
    if t is int:
        target.int_value = v
    elif t is str:
        target.string_value = v
    elif t is float:
        target.double_value = v
    elif t is bool:
        target.bool_value = v
    elif v is None:
        target.null_value = True
    else:
        _set_slow(target, v, lenient)


def add_rows(field: Any, rows: Iterable[Sequence[Any]], *, lenient: bool = False) -> None:
    """Append ``rows`` to a repeated ``Row`` (or ``Key``-like) message field."""
    for row in rows:
        if isinstance(row, (str, bytes)) or not isinstance(row, Iterable):
            raise TypeError(f"a row must be a sequence of values, not {row!r}")
        values = field.add().values
        for v in row:
            set_value(values.add(), v, lenient=lenient)


def fill_key(key_msg: pb.Key, key: Sequence[Any]) -> pb.Key:
    """Fill ``key_msg`` with the values of ``key`` and return it."""
    values = key_msg.values
    for v in key:
        set_value(values.add(), v)
    return key_msg


def make_key(key: Sequence[Any]) -> pb.Key:
    """A new ``Key`` message holding ``key``'s values."""
    return fill_key(pb.Key(), key)


def _first_unset(values: Iterable[pb.Value], field: str) -> WireError:
    """The error for the first Value without a kind (called once a fast decode failed)."""
    for j, v in enumerate(values):
        if v.WhichOneof("kind") is None:
            return WireError(f"{field}[{j}]: {UNSET_VALUE}")
    return WireError(f"{field}: malformed values")  # not reached: only unset kinds fail


def decode_value(v: pb.Value, field: str = "value") -> Any:
    """The Python value held by one ``Value`` message (WireError if its kind is unset)."""
    kind = v.WhichOneof("kind")
    if kind is None:
        raise WireError(f"{field}: {UNSET_VALUE}")
    return None if kind == "null_value" else getattr(v, kind)


# The decoders below are per cell, so they stay one comprehension: an unset kind makes
# ``getattr(v, None)`` raise TypeError, and only then is the offending value looked for.


def decode_values(values: Iterable[pb.Value], field: str = "values") -> tuple:
    """The tuple of Python values held by a ``Row``'s or ``Key``'s ``values``; WireError
    names ``field[j]`` for a Value whose kind is unset."""
    ga = getattr
    try:
        return tuple(
            [None if (k := v.WhichOneof("kind")) == "null_value" else ga(v, k) for v in values]
        )
    except TypeError:
        raise _first_unset(values, field) from None


def decode_rows(rows: Sequence[pb.Row], field: str = "rows") -> list[tuple]:
    """Rows (``Row`` or ``Key`` messages) as a list of tuples; WireError names
    ``field[i].values[j]`` for a Value whose kind is unset."""
    ga = getattr
    try:
        return [
            tuple(
                [
                    None if (k := v.WhichOneof("kind")) == "null_value" else ga(v, k)
                    for v in r.values
                ]
            )
            for r in rows
        ]
    except TypeError:
        for i, r in enumerate(rows):
            if any(v.WhichOneof("kind") is None for v in r.values):
                raise _first_unset(r.values, f"{field}[{i}].values") from None
        raise


# -- columnar batches --------------------------------------------------------------------

_KIND_OF_TYPE = {
    int: pb.Column.INT,
    float: pb.Column.DOUBLE,
    str: pb.Column.STRING,
    bool: pb.Column.BOOL,
}
_LIST_OF_KIND = {
    pb.Column.INT: "ints",
    pb.Column.DOUBLE: "doubles",
    pb.Column.STRING: "strings",
    pb.Column.BOOL: "bools",
}
_NONE = type(None)


def _fill_column(column: pb.Column, values: Sequence[Any], lenient: bool) -> None:
    types = set(map(type, values))
    nulls = _NONE in types
    types.discard(_NONE)
    kind = _KIND_OF_TYPE.get(types.pop()) if len(types) == 1 else None
    if kind is None:
        # Mixed (or unusual) types: one Value per row, converted exactly as row by row.
        column.kind = pb.Column.MIXED
        target = column.values
        for v in values:
            set_value(target.add(), v, lenient=lenient)
        return
    column.kind = kind
    if nulls:
        column.nulls.extend([i for i, v in enumerate(values) if v is None])
        values = [v for v in values if v is not None]
    getattr(column, _LIST_OF_KIND[kind]).extend(values)


def fill_batch(batch: pb.RowBatch, rows: Sequence[Sequence[Any]], *, lenient: bool = False) -> bool:
    """Store ``rows`` column by column into ``batch``.

    Returns False (leaving ``batch`` empty) when the rows are not all sequences of one
    length: those travel as ``repeated Row`` so the server can name the bad row. Raises
    TypeError/ValueError like ``set_value`` for values the wire cannot carry.
    """
    rows = rows if isinstance(rows, list) else list(rows)
    for row in rows[:1]:
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            return False
    try:
        widths = set(map(len, rows))
    except TypeError:
        return False
    if len(widths) > 1:
        return False
    fill_columns(batch, list(zip(*rows, strict=True)), len(rows), lenient=lenient)
    return True


def fill_columns(batch: pb.RowBatch, columns: Sequence[Sequence[Any]], num_rows: int, *,
                 lenient: bool = False) -> None:
    """Store ``num_rows`` rows given column by column (each of ``num_rows`` values) into
    ``batch``: ``fill_batch`` without the transposition, for a caller that already holds
    columns (e.g. the keys of a one-parameter view). Raises like ``fill_batch``."""
    batch.num_rows = num_rows
    try:
        for values in columns:
            _fill_column(batch.columns.add(), values, lenient)
    except BaseException:
        batch.Clear()
        raise


_LISTS = ("ints", "doubles", "strings", "bools", "values")
_NAMES_OF_KIND = {k: pb.Column.Kind.Name(k) for k in _LIST_OF_KIND}
_KIND_OF_LIST = {name: _NAMES_OF_KIND[k] for k, name in _LIST_OF_KIND.items()}


def _check_nulls(column: pb.Column, num_rows: int, field: str) -> None:
    nulls = column.nulls
    if max(nulls) >= num_rows:
        i = next(i for i, r in enumerate(nulls) if r >= num_rows)
        raise WireError(f"{field}.nulls[{i}]: row {nulls[i]} is out of range for {num_rows} rows")
    if len(set(nulls)) != len(nulls):
        seen: set[int] = set()
        for i, r in enumerate(nulls):
            if r in seen:
                raise WireError(f"{field}.nulls[{i}]: row {r} is listed twice")
            seen.add(r)


def _decode_column(column: pb.Column, num_rows: int, field: str) -> list[Any]:
    """One column's values, row by row. Checked by list lengths, never per cell, except
    for the per-Value kind check of MIXED columns."""
    kind = column.kind
    if kind == pb.Column.MIXED:
        for name in _LISTS[:-1]:
            if len(getattr(column, name)):
                raise WireError(
                    f"{field}: kind is MIXED (0, also when unset) but its values are in "
                    f"`{name}`; set kind to {_KIND_OF_LIST[name]}, or send one Value per row "
                    "in `values`"
                )
        if len(column.nulls):
            raise WireError(
                f"{field}: `nulls` is for typed kinds; a MIXED column sends NULL as a Value "
                "with null_value"
            )
        values = column.values
        if len(values) != num_rows:
            raise WireError(f"{field}: {len(values)} value(s) for {num_rows} rows")
        return list(decode_values(values, f"{field}.values"))
    list_name = _LIST_OF_KIND.get(kind)
    if list_name is None:
        raise WireError(f"{field}: unknown kind {kind}")
    for other in _LISTS:
        if other != list_name and len(getattr(column, other)):
            raise WireError(
                f"{field}: kind is {_NAMES_OF_KIND[kind]} but values are in `{other}`; "
                f"that kind sends its values in `{list_name}`"
            )
    values = list(getattr(column, list_name))
    nulls = column.nulls
    if not nulls:
        if len(values) != num_rows:
            raise WireError(f"{field}: {len(values)} value(s) for {num_rows} rows")
        return values
    if len(values) + len(nulls) != num_rows:
        raise WireError(
            f"{field}: {len(values)} value(s) and {len(nulls)} null(s) for {num_rows} rows"
        )
    _check_nulls(column, num_rows, field)
    if len(nulls) <= 64:  # a few NULLs: list.insert is a memmove each
        for i in sorted(nulls):
            values.insert(i, None)
        return values
    is_null = [False] * num_rows
    for i in nulls:
        is_null[i] = True
    it = iter(values)
    return [None if null else next(it) for null in is_null]


def decode_batch(batch: pb.RowBatch, field: str = "batch") -> list[tuple]:
    """The rows held by a ``RowBatch``, as a list of tuples. A malformed batch raises
    WireError naming ``field.columns[j]``: every column must hold exactly ``num_rows``
    values, in the list its kind names (typed kinds: non-NULL values plus ``nulls``
    positions, each in range and listed once; MIXED: one Value per row)."""
    num_rows = batch.num_rows
    if not batch.columns:
        return [()] * num_rows  # rows without columns (callers bound num_rows first)
    columns = [
        _decode_column(c, num_rows, f"{field}.columns[{j}]") for j, c in enumerate(batch.columns)
    ]
    return list(zip(*columns, strict=True))
