"""Type OIDs and value codecs, through psycopg 3's own adapters (no connection needed).

Our four column types map onto PostgreSQL's: BIGINT -> int8, DOUBLE -> float8, TEXT -> text,
BOOLEAN -> bool. Values are encoded (DataRow) and decoded (Bind) by psycopg's dumpers and
loaders in text or binary, so the byte-level formats are those a real driver reads.
"""

from __future__ import annotations

import math
from decimal import Decimal
from functools import lru_cache
from typing import Any

from psycopg import adapters
from psycopg.adapt import Transformer
from psycopg.errors import DataError
from psycopg.pq import Format

from partialflow.server.pgwire.catalog import OID_BOOL, OID_FLOAT8, OID_INT8, OID_TEXT
from partialflow.server.pgwire.errors import INVALID_TEXT, NUMERIC_OUT_OF_RANGE, PgError

OID_UNKNOWN = 0
OID_INT2, OID_INT4, OID_FLOAT4, OID_NUMERIC, OID_VARCHAR = 21, 23, 700, 1700, 1043

BY_COLUMN_TYPE = {"BIGINT": OID_INT8, "DOUBLE": OID_FLOAT8, "TEXT": OID_TEXT,
                  "BOOLEAN": OID_BOOL}
NAMES = {OID_INT8: "bigint", OID_FLOAT8: "double precision", OID_TEXT: "text",
         OID_BOOL: "boolean"}
_INTS = (OID_INT2, OID_INT4, OID_INT8)
_FLOATS = (OID_FLOAT4, OID_FLOAT8, OID_NUMERIC)
_TEXTS = (OID_TEXT, OID_VARCHAR, 1042, 19)  # text, varchar, bpchar, name


def oid_of_type(column_type: str | None) -> int:
    """The OID of one of our column types (text for anything else)."""
    return BY_COLUMN_TYPE.get((column_type or "").upper(), OID_TEXT)


def oid_of_value(value: Any) -> int | None:
    """The OID a value would have in one of our columns (None for NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return OID_BOOL
    if isinstance(value, int):
        return OID_INT8
    if isinstance(value, (float, Decimal)):
        return OID_FLOAT8
    return OID_TEXT


def column_oids(rows: list[tuple], n: int, known: list[int | None] | None = None) -> list[int]:
    """Each column's OID: ``known`` where given, else from its values (int8 and float8
    mixed is float8; no values at all is text)."""
    out = []
    for i in range(n):
        if known is not None and known[i]:
            out.append(int(known[i] or 0))
            continue
        seen = {o for r in rows if (o := oid_of_value(r[i])) is not None}
        if seen == {OID_INT8, OID_FLOAT8}:
            seen = {OID_FLOAT8}
        out.append(seen.pop() if len(seen) == 1 else OID_TEXT)
    return out


@lru_cache(maxsize=256)
def _dumper(oid: int, fmt: int, cls: Any) -> Any:
    try:
        return adapters.get_dumper_by_oid(oid, Format(fmt))(cls)
    except Exception:  # an OID psycopg has no dumper for: send text
        return None


def _coerce(value: Any, oid: int) -> Any:
    if oid in _INTS:
        return int(value)
    if oid in (OID_FLOAT8, OID_FLOAT4):
        return float(value)
    if oid == OID_BOOL:
        return bool(value)
    if oid in _TEXTS:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return _float_text(value)
        return value if isinstance(value, str) else str(value)
    return value


def _float_text(v: float) -> str:
    """float8 as PostgreSQL prints it (shortest exact digits, ``100`` not ``100.0``)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    text = repr(v)
    return text.removesuffix(".0")


def encode(value: Any, oid: int, fmt: int) -> bytes | None:
    """One value in a DataRow, as column ``oid`` in format ``fmt`` (0 text, 1 binary)."""
    if value is None:
        return None
    try:
        v = _coerce(value, oid)
    except (TypeError, ValueError):
        v, oid = str(value), OID_TEXT
    if oid == OID_FLOAT8 and fmt == 0:  # psycopg's dumper writes 100.0; PostgreSQL 100
        return _float_text(v).encode()
    cls: Any = type(v)
    dumper = _dumper(oid, fmt, cls)
    if dumper is None:
        dumper = _dumper(OID_TEXT, fmt, str)
        v = str(v)
    try:
        return bytes(dumper.dump(v))
    except Exception:
        return bytes(_dumper(OID_TEXT, fmt, str).dump(str(v)))


_TRANSFORMER = Transformer()


@lru_cache(maxsize=64)
def _loader(oid: int, fmt: int) -> Any:
    return _TRANSFORMER.get_loader(oid, Format(fmt))


def decode(data: bytes | None, oid: int, fmt: int, target: int | None = None) -> Any:
    """A Bind parameter as a Python value of the column type ``target`` (its OID), decoded
    as ``oid`` (0: the client left it to us, so as ``target``) in format ``fmt``.
    A value that does not read as its type raises PgError 22P02."""
    if data is None:
        return None
    as_oid = oid or target or OID_TEXT
    if fmt == 0 and as_oid in _INTS + _FLOATS + (OID_BOOL,):
        _check_text(data, as_oid)
    try:
        value = _loader(as_oid, fmt).load(data)
    except (DataError, ValueError, UnicodeDecodeError, OverflowError) as err:
        raise PgError(INVALID_TEXT, f"invalid input syntax for type {NAMES.get(as_oid, as_oid)}: "
                      f"{data[:60]!r} ({err})") from None
    except Exception as err:  # psycopg's struct errors on short binary values, and the like
        raise PgError(INVALID_TEXT, f"invalid binary value for type "
                      f"{NAMES.get(as_oid, as_oid)}: {err}") from None
    if isinstance(value, memoryview):
        value = bytes(value).decode(errors="replace")
    return convert(value, target)


def _check_text(data: bytes, oid: int) -> None:
    text = data.decode(errors="replace").strip()
    if oid in _INTS:
        try:
            int(text)
        except ValueError:
            raise PgError(INVALID_TEXT,
                          f'invalid input syntax for type bigint: "{text[:60]}"') from None
    elif oid == OID_BOOL:
        if text.lower() not in ("t", "f", "true", "false", "1", "0", "yes", "no", "on", "off",
                                "y", "n"):
            raise PgError(INVALID_TEXT, f'invalid input syntax for type boolean: "{text[:60]}"')
    else:
        try:
            float(text)
        except ValueError:
            raise PgError(INVALID_TEXT, f'invalid input syntax for type double precision: '
                          f'"{text[:60]}"') from None


def convert(value: Any, target: int | None) -> Any:
    """A decoded value as our column type ``target`` (None: as it came)."""
    if value is None or target is None:
        return value
    if target == OID_INT8:
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
            raise PgError(INVALID_TEXT, f"expected a bigint, got {value!r}")
        try:
            out = int(value) if not isinstance(value, str) else int(value.strip())
        except ValueError:
            raise PgError(INVALID_TEXT,
                          f'invalid input syntax for type bigint: "{value}"') from None
        if isinstance(value, (float, Decimal)) and out != value:
            raise PgError(INVALID_TEXT, f"expected a bigint, got {value}")
        if not -(2**63) <= out < 2**63:
            raise PgError(NUMERIC_OUT_OF_RANGE, f"value {out} is out of range for type bigint")
        return out
    if target == OID_FLOAT8:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise PgError(INVALID_TEXT, f'invalid input syntax for type double precision: '
                          f'"{value}"') from None
    if target == OID_BOOL:
        if isinstance(value, bool):
            return value
        raise PgError(INVALID_TEXT, f'invalid input syntax for type boolean: "{value}"')
    if target == OID_TEXT:
        return value if isinstance(value, str) else _coerce(value, OID_TEXT)
    return value
