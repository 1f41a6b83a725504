"""The initial copy: every followed table read inside the slot's exported snapshot, then
through the bulk-load path (a Parquet file that Spark reads and checks against the table's
columns, with progress) as ``load`` does, so both vet rows alike.

The load path hands its rows to the caller instead of writing them: all tables then go in as
one write at the snapshot's upstream LSN (a reader never sees one table copied and another
not yet).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from partialflow.server.follow.typemap import UpstreamTable, copy_sql

log = logging.getLogger(__name__)
_FETCH = 50_000


def copy_tables(engine: Any, con: Any, tables: Sequence[UpstreamTable],
                progress: Callable[[str], None]) -> dict[str, list[tuple]]:
    """Rows of each table as of ``con``'s snapshot (a psycopg 3 connection inside it)."""
    out: dict[str, list[tuple]] = {}
    work = Path(tempfile.mkdtemp(prefix="follow-copy-", dir=engine.config.data_dir))
    try:
        for table in tables:
            rows: list[tuple] = []
            with con.cursor(name=f"copy_{table.name}") as cur:
                cur.itersize = _FETCH
                cur.execute(copy_sql(table))
                for row in cur:
                    rows.append(tuple(row))
                    if len(rows) % _FETCH == 0:
                        progress(f"{table.name}: read {len(rows)} rows")
            # An empty table has nothing for the load path to vet (and a Spark job each
            # would cost more than every other step of a small copy).
            out[table.name] = _through_load(engine, table, rows, work, progress) if rows else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _through_load(engine: Any, table: UpstreamTable, rows: list[tuple], work: Path,
                  progress: Callable[[str], None]) -> list[tuple]:
    schema = table.schema.arrow_schema()
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    path = work / f"{table.name}.parquet"
    pq.write_table(pa.table([pa.array(list(c), type=f.type) for c, f in zip(
        columns, schema, strict=True)], schema=schema), path)
    got: dict[str, list[tuple]] = {}

    def collect(name: str, loaded: list[tuple]) -> int:
        got[name] = loaded
        return 0

    for event in engine.loader.load(table.name, str(path), collect, force=True):
        text = f"{table.name}: {event.phase} {event.done}/{event.total}"
        progress(text)
        log.info("copy progress", extra={"table": table.name, "phase": event.phase,
                                         "done": event.done, "total": event.total})
    engine.loader.forget_table(table.name)  # its temporary file is no load to remember
    return [tuple(r) for r in got[table.name]]
