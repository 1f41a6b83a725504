"""Upstream tables as ours: PostgreSQL types mapped onto the four column types, and the
text values pgoutput sends decoded with psycopg's own loaders.

Types with an exact home map to it (integers to BIGINT, float4/8 to DOUBLE, boolean to
BOOLEAN). Types whose text form is the value a reader compares (text, varchar, char, uuid,
dates and times, json) map to TEXT holding PostgreSQL's text form (both sessions run with
TimeZone=UTC and DateStyle=ISO, so the copy and the stream print them alike). Anything
else (numeric, arrays, bytea, enums, ...) has no column type here that keeps it exactly:
the table is refused, naming the column and its type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.adapt import Transformer
from psycopg.pq import Format

from partialflow.server.errors import FailedPrecondition
from partialflow.server.follow.pgoutput import UNCHANGED, Unchanged, Value
from partialflow.server.storage import Column, TableSchema, check_identifier

# pg_type OIDs (stable across releases: pg_type.dat).
_MAP: dict[int, str] = {
    20: "BIGINT", 21: "BIGINT", 23: "BIGINT", 26: "BIGINT",
    700: "DOUBLE", 701: "DOUBLE",
    16: "BOOLEAN",
    25: "TEXT", 1043: "TEXT", 1042: "TEXT", 19: "TEXT", 18: "TEXT", 2950: "TEXT",
    114: "TEXT", 3802: "TEXT", 1082: "TEXT", 1114: "TEXT", 1184: "TEXT", 1083: "TEXT",
    1266: "TEXT", 1186: "TEXT", 869: "TEXT", 650: "TEXT", 829: "TEXT",
}

TABLES_SQL = """
SELECT c.oid, c.relname, c.relreplident,
       COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum)
                 FROM pg_index i JOIN pg_attribute a
                   ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                 WHERE i.indrelid = c.oid AND i.indisprimary), '{}') AS pk
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
ORDER BY c.relname
"""

COLUMNS_SQL = """
SELECT attname::text, atttypid::int, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum
"""


@dataclass(frozen=True)
class UpstreamTable:
    """One followed table: our schema, the upstream column types, and how to read rows."""

    schema: TableSchema
    type_oids: tuple[int, ...]
    replica_full: bool

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def key(self) -> tuple[int, ...]:
        return self.schema.primary_key


class Refused(Exception):
    """A table that cannot be followed, and why (said at start, shown in the status)."""


def map_table(name: str, replident: str, pk: Sequence[str],
              columns: Sequence[tuple[str, int, str]]) -> UpstreamTable:
    """Our schema for an upstream table; Refused naming what does not map."""
    try:
        check_identifier(name, "table")
    except Exception as err:  # noqa: BLE001 - InvalidArgument's message says why
        raise Refused(str(err)) from None
    cols = []
    for cname, oid, spelled in columns:
        ctype = _MAP.get(oid)
        if ctype is None:
            raise Refused(
                f"column {cname} has type {spelled}, which no column type here keeps exactly "
                "(BIGINT, DOUBLE, TEXT, BOOLEAN); leave the table out with --follow-tables")
        try:
            check_identifier(cname, "column")
        except Exception as err:  # noqa: BLE001
            raise Refused(str(err)) from None
        cols.append(Column(cname, ctype, cname in pk))  # type: ignore[arg-type]
    if not pk and replident != "f":
        raise Refused(
            "it has no primary key, so its updates and deletes name no row; run "
            f"ALTER TABLE {name} REPLICA IDENTITY FULL upstream to follow it")
    return UpstreamTable(TableSchema(name, tuple(cols)), tuple(o for _, o, _ in columns),
                         replident == "f")


def same_shape(ours: TableSchema, theirs: TableSchema) -> bool:
    return [(c.name, c.type) for c in ours.columns] == [(c.name, c.type) for c in theirs.columns]


def relation_check(table: UpstreamTable, replident: str,
                   columns: Sequence[tuple[str, int]], applied: str) -> UpstreamTable | str:
    """A Relation message for a followed table: its table as now described (to decode its
    rows with), or why it is no longer followed (its columns changed upstream; ``applied``
    is the upstream position up to which it was)."""
    keys = [c.name for c in table.schema.columns if c.primary_key]
    try:
        now = map_table(table.name, replident, keys,
                        [(n, oid, f"type oid {oid}") for n, oid in columns])
    except Refused as err:
        now, why = None, f" ({err})"
    if now is not None and same_shape(table.schema, now.schema):
        return now
    cols = ", ".join(f"{c.name} {c.type}" for c in table.schema.columns)
    return (f"its columns changed upstream (now {', '.join(n for n, _ in columns)}; followed "
            f"as {cols}); not applied from upstream LSN {applied} on: drop the views over it "
            "and the table here, then restart to copy it again" + (why if now is None else ""))


def read_tables(con: Any, wanted: Sequence[str] | None) -> tuple[
        dict[str, UpstreamTable], dict[str, str], dict[str, int]]:
    """The public schema's tables (or ``wanted``) through a psycopg 3 connection: the
    followable ones, the refused ones with why, and every table's oid."""
    rows = con.execute(TABLES_SQL).fetchall()
    found = {r[1]: r for r in rows}
    if wanted:
        missing = [t for t in wanted if t not in found]
        if missing:
            raise FailedPrecondition(
                f"--follow-tables: no table {', '.join(missing)} in the upstream's public "
                f"schema (it has {', '.join(found) or 'none'})")
        rows = [found[t] for t in wanted]
    tables: dict[str, UpstreamTable] = {}
    refused: dict[str, str] = {}
    oids: dict[str, int] = {}
    for oid, name, replident, pk in rows:
        oids[name] = int(oid)
        cols = con.execute(COLUMNS_SQL, (oid,)).fetchall()
        try:
            tables[name] = map_table(name, replident, list(pk or []), cols)
        except Refused as err:
            refused[name] = str(err)
    return tables, refused, oids


def copy_sql(table: UpstreamTable) -> str:
    """The SELECT that reads a table in the snapshot, TEXT columns in their text form."""
    parts = [f'"{c.name}"::text' if c.type == "TEXT" else f'"{c.name}"'
             for c in table.schema.columns]
    return f'SELECT {", ".join(parts)} FROM public."{table.name}"'


class RowDecoder:
    """Turns a pgoutput tuple (text bytes) into a row of Python values of our types."""

    def __init__(self, table: UpstreamTable) -> None:
        tx = Transformer()
        self._load: list[Callable[[bytes], Any]] = []
        for col, oid in zip(table.schema.columns, table.type_oids, strict=True):
            if col.type == "TEXT":
                self._load.append(lambda b: bytes(b).decode("utf-8"))
            else:
                self._load.append(tx.get_loader(oid, Format.TEXT).load)

    def __call__(self, values: Sequence[Value]) -> list[Any]:
        if len(values) != len(self._load):
            raise ValueError(f"{len(values)} values for {len(self._load)} columns")
        out: list[Any] = []
        for v, load in zip(values, self._load, strict=True):
            if v is None or isinstance(v, Unchanged):
                out.append(v)
            else:
                out.append(load(v))
        return out


__all__ = [
    "UNCHANGED",
    "Refused",
    "RowDecoder",
    "UpstreamTable",
    "copy_sql",
    "map_table",
    "read_tables",
    "same_shape",
]
