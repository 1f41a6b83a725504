"""TEMPORARY stand-in for the transactions API (``Engine.write_many``), until it is merged.

The follower calls only ``write_many`` and ``stored_upstream_lsn`` below. At the merge:

* ``write_many(engine, changes, upstream_lsn=...)`` becomes
  ``engine.write_many(changes, upstream_lsn=..., origin="follow")`` (one LSN, one durable
  commit, through the dataflow as one packet; ``origin`` passes the read-only check of
  followed tables, see ``Engine.check_writable``);
* ``stored_upstream_lsn(engine)`` becomes ``engine.storage.upstream_lsn``;
* ``TableChange`` is imported from ``partialflow.server.storage.record``;
* this file is deleted.

What the stand-in does NOT give: one write per upstream transaction (it makes one write
per table, so a reader may see a multi-table transaction half applied), and atomicity of the
rows with the upstream LSN (the LSN goes to a side file after the writes: a crash between
them replays the transaction, which then fails on its duplicate keys).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIDE_FILE = "follow_upstream_lsn.json"


@dataclass(frozen=True, slots=True)
class TableChange:
    table: str
    inserts: Sequence[Sequence[Any]] = ()
    deletes: Sequence[Sequence[Any]] = ()  # deletes apply before inserts, as in write()


def _side(engine: Any) -> Path:
    return Path(engine.config.data_dir) / SIDE_FILE


def write_many(engine: Any, changes: Sequence[TableChange], *, upstream_lsn: int) -> int:
    lsn = int(engine.storage.last_lsn)
    for change in changes:
        if change.inserts or change.deletes:
            lsn = engine._write(change.table, change.inserts, change.deletes)
    path = _side(engine)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"upstream_lsn": upstream_lsn}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return lsn


def stored_upstream_lsn(engine: Any) -> int | None:
    try:
        return int(json.loads(_side(engine).read_text())["upstream_lsn"])
    except FileNotFoundError:
        return None
