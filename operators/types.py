"""Column type names: the one module every layer reads them from.

Two vocabularies meet here. A table's columns have a *column type* (``ColumnType``: what
storage keeps, what CREATE TABLE and the wire name); the expression compiler types values
by Spark's simple type names (``int``, ``bigint``, ``double``, ``string``, ``boolean``,
``null``), which tell ``int`` from ``bigint`` as Spark's implicit casts do.
``normalize_type`` maps any accepted spelling of a column type to its ``ColumnType``;
``spark_type`` maps a SQL or Spark spelling to the compiler's name.
"""

from __future__ import annotations

import re
from typing import Literal

# Spark's simple type names, as the expression compiler (operators/expressions.py) and
# the value rules (operators/values.py) name types.
INT, BIGINT, DOUBLE, STRING, BOOLEAN, NULL = "int", "bigint", "double", "string", "boolean", "null"

ColumnType = Literal["BIGINT", "DOUBLE", "TEXT", "BOOLEAN"]

#: The column types, in the order error messages list them.
COLUMN_TYPES: tuple[ColumnType, ...] = ("BIGINT", "DOUBLE", "TEXT", "BOOLEAN")

# Every spelling CREATE TABLE accepts (any case, as sqlglot or a user writes it) -> the
# column type. Storage, the engine's DDL and error messages all read it.
TYPE_SPELLINGS: dict[str, ColumnType] = {
    "BIGINT": "BIGINT", "INT": "BIGINT", "INTEGER": "BIGINT", "LONG": "BIGINT",
    "DOUBLE": "DOUBLE", "FLOAT": "DOUBLE", "REAL": "DOUBLE",
    "TEXT": "TEXT", "VARCHAR": "TEXT", "STRING": "TEXT",
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
}

_SPARK_SPELLINGS = {
    "int": INT, "integer": INT, "bigint": BIGINT, "long": BIGINT,
    "double": DOUBLE, "float": DOUBLE, "real": DOUBLE,
    "string": STRING, "text": STRING, "varchar": STRING,
    "boolean": BOOLEAN, "bool": BOOLEAN, "null": NULL, "void": NULL,
}


def column_type_names() -> str:
    """The accepted spellings grouped by column type, for error messages."""
    groups: dict[str, list[str]] = {}
    for name, column_type in TYPE_SPELLINGS.items():
        groups.setdefault(column_type, []).append(name)
    return ", ".join("/".join(names) for names in groups.values())


def normalize_type(name: object) -> ColumnType | None:
    """The column type a spelling names (any case; ``VARCHAR(255)``'s length is dropped,
    it is irrelevant to storage), or None when it names none."""
    if not isinstance(name, str):
        return None
    key = re.sub(r"\s*\(.*\)$", "", name.strip().upper())
    return TYPE_SPELLINGS.get(key)


def spark_type(name: str | None) -> str | None:
    """A type name (SQL, column or Spark spelling) as the expression compiler's name."""
    return None if name is None else _SPARK_SPELLINGS.get(name.lower())
