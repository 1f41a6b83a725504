"""Answers off the wire: a lookup's columnar block cut into one ``Result`` per key, a
ResultSet's rows, and the typed Stats and Compact answers as plain dicts."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto.values import WireError, decode_batch, decode_rows, decode_values


# slots: a lookup_many builds one Result per key, and a slotted instance is about a third
# cheaper to create.
@dataclass(slots=True)
class Result:
    """Rows with their column names and the LSN at which they are exact."""

    rows: list[tuple] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    lsn: int = 0
    # On a server following a PostgreSQL: the upstream WAL position ('X/Y') the rows are
    # exact at; '' otherwise.
    upstream_lsn: str = ""

    def __repr__(self) -> str:
        # The upstream position shows only where there is one (a server following a
        # PostgreSQL), so a plain server's answers read as they always have.
        tail = f", upstream_lsn={self.upstream_lsn!r}" if self.upstream_lsn else ""
        return f"Result(rows={self.rows!r}, columns={self.columns!r}, lsn={self.lsn!r}{tail})"

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def results_of(response: pb.LookupResponse, n: int) -> list[Result]:
    """A lookup's columnar answer as one Result per key. The block is decoded a column at
    a time (C loops over packed lists), then cut into keys by C-level passes (map over
    slices): no Python code runs per key or per cell but the Results' own creation."""
    offsets = list(response.offsets)
    if len(offsets) != n:
        raise WireError(f"the answer has {len(offsets)} offsets for {n} keys")
    rows = decode_batch(response.rows, "rows")
    columns = list(response.columns)
    ends = [*offsets[1:], len(rows)] if n else []
    if not all(map(operator.le, offsets, ends)):
        raise WireError(f"the answer's offsets are not in order: {offsets}")
    lsns: Iterable[int] = list(response.key_lsns) or repeat(response.lsn, n)
    if isinstance(lsns, list) and len(lsns) != n:
        raise WireError(f"the answer has {len(lsns)} LSNs for {n} keys")
    if len(rows) == n and offsets == list(range(n)):
        slices: Iterable[list[tuple]] = map(list, zip(rows))  # one row per key: [row]
    else:
        slices = map(rows.__getitem__, map(slice, offsets, ends))
    ups: Iterable[str] = list(response.key_upstream_lsns) or repeat(response.upstream_lsn, n)
    return list(map(Result, slices, repeat(columns), lsns, ups))


def rows_of(msg: Any) -> list[tuple]:
    """The rows of a ResultSet, whichever form the server used."""
    rows = decode_rows(msg.rows)
    if msg.HasField("batch"):
        rows.extend(decode_batch(msg.batch))
    return rows


def as_dict(message: Any) -> dict[str, Any]:
    """A typed answer (StatsResponse, CompactResponse and their parts) as plain Python:
    every field by its proto name, maps as dicts, unset optional messages left out."""
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is None:
            out[fd.name] = list(value) if fd.is_repeated else value
        elif fd.message_type.GetOptions().map_entry:
            entry = fd.message_type.fields_by_name["value"]
            out[fd.name] = {
                k: (as_dict(v) if entry.message_type is not None else v) for k, v in value.items()
            }
        elif fd.is_repeated:
            out[fd.name] = (
                list(decode_values(value)) if fd.message_type.name == "Value"
                else [as_dict(v) for v in value]
            )
        elif fd.containing_oneof is None or message.HasField(fd.name):
            # Only `optional` messages (a synthetic oneof) may be absent.
            out[fd.name] = as_dict(value)
    return out


def stats_dict(message: pb.StatsResponse) -> dict[str, Any]:
    """Stats in the shape this client has always returned: the executor's counters at
    the top level next to the named figures, and no latency figures before the first."""
    stats = as_dict(message)
    counters = stats.pop("counters")
    stats.update((k, v) for k, v in counters.items() if k not in stats)
    if not stats["upquery_ms"]["count"]:
        stats["upquery_ms"] = {}
    if not stats["memory_limit"]:
        stats["memory_limit"] = None  # 0 on the wire means no limit
    storage = stats.get("storage") or {}
    if "clustering" in storage:  # table -> its columns, as the server keeps them
        storage["clustering"] = {t: c["columns"] for t, c in storage["clustering"].items()}
    return stats


def compact_dict(message: pb.CompactResponse) -> dict[str, Any]:
    """Compaction figures: the totals at the top level, per table under ``tables``."""
    report = as_dict(message)
    total = report.pop("total", {})
    total.pop("horizon", None)  # only meaningful per table
    return {**total, "tables": report["tables"]}
