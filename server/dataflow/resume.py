"""A resuming subscriber's rows: each key's rows as of the LSN it resumes from, by Spark
(subscriptions.py registers them as the rows last sent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from partialflow.operators.base import Row
from partialflow.server.sql.oracle import oracle_sql

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Reader

RESUME_KEYS_PER_JOB = 200  # keys of a resume read as of from_lsn per Spark job


def rows_as_of(query: Callable[[str, int], list[Row]], reader: Reader, keys: list[Row],
               lsn: int, view_sql: Callable[[str], str | None]) -> dict[Row, list[Row]]:
    """Each key's rows (as a read presents them) as of ``lsn``, by Spark over the base
    tables' snapshot (what a resuming client holds): the view's SQL bound to each key,
    as the verifier runs it, with many keys per job as one UNION ALL tagged by key."""
    out: dict[Row, list[Row]] = {k: [] for k in keys}
    for i in range(0, len(keys), RESUME_KEYS_PER_JOB):
        chunk = keys[i:i + RESUME_KEYS_PER_JOB]
        parts = [
            f"SELECT {j} AS __pf_key, __pf_q.* FROM ({oracle_sql(reader.sql, k, view_sql)}) "
            "AS __pf_q" for j, k in enumerate(chunk)
        ]
        for row in query(" UNION ALL ".join(parts), lsn):
            out[chunk[row[0]]].append(tuple(row[1:]))
    return out
