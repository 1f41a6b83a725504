"""The engine's lookup answers, statistics and compaction reports as typed wire messages.

A lookup's answer is one columnar block for all of its keys (``LookupResponse``): every
key's rows in one RowBatch, key after key, with the offset where each key's rows start,
so encoding costs per column, not one message per key. The engine reports statistics as
plain dicts (also read by the metrics collector and the tests); this module is the one
place that maps them onto ``StatsResponse`` and ``CompactResponse``.
Every counter travels as an int64, so LSNs and byte counts stay exact in any client
(a ``google.protobuf.Struct`` would have made each of them a double).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any

from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto.values import add_rows, fill_batch, fill_key, set_value

# Top-level keys of ``Engine.stats()`` that have a field of their own; every other
# integral top-level figure is an executor counter and goes to ``counters``.
_OWN_FIELDS = frozenset(pb.StatsResponse.DESCRIPTOR.fields_by_name) - {"counters"}


def lookup_message(
    columns: Sequence[str], results: Sequence[tuple[list[tuple], int]]
) -> pb.LookupResponse:
    """A lookup's answer (per key, in the order asked: its rows and the LSN they are exact
    at) as one columnar block. ``key_lsns`` is only sent when the keys' LSNs differ.

    Built with C-level passes only (map, chain, zip, packed extends): a lookup_many of
    thousands of keys must not run Python code per key or per cell."""
    out = pb.LookupResponse(columns=columns)
    if not results:
        return out
    per_key = list(map(itemgetter(0), results))
    out.offsets.extend(accumulate(map(len, per_key[:-1]), initial=0))
    if not fill_batch(out.rows, list(chain.from_iterable(per_key)), lenient=True):
        # A view's rows all have its width; anything else is a bug in the engine.
        raise RuntimeError(f"rows of unequal width in a lookup answer of columns {columns}")
    lsns = list(map(itemgetter(1), results))
    out.lsn = max(lsns)
    if lsns.count(out.lsn) != len(lsns):
        out.key_lsns.extend(lsns)
    return out


_EVENT_KINDS = {
    "snapshot": pb.SubscribeEvent.SNAPSHOT,
    "changes": pb.SubscribeEvent.CHANGES,
    "heartbeat": pb.SubscribeEvent.HEARTBEAT,
}


def subscribe_event(event: Any, columns: Sequence[str] | None) -> pb.SubscribeEvent:
    """A subscription's event (subscriptions.Event) as its wire message; ``columns`` on
    the first one."""
    out = pb.SubscribeEvent(kind=_EVENT_KINDS[event.kind], lsn=event.lsn)
    if columns is not None:
        out.columns.extend(columns)
    for key, inserted, deleted in event.changes:
        change = out.changes.add()
        fill_key(change.key, key)
        add_rows(change.inserted, inserted, lenient=True)
        add_rows(change.deleted, deleted, lenient=True)
    return out


def _scalars(message: Any, data: Mapping[str, Any]) -> None:
    """Copy the keys of ``data`` that name scalar fields of ``message``."""
    fields = message.DESCRIPTOR.fields_by_name
    for name, value in data.items():
        field = fields.get(name)
        if field is None or field.message_type is not None or value is None:
            continue
        if field.is_repeated:
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def stats_message(stats: Mapping[str, Any]) -> pb.StatsResponse:
    """``Engine.stats()`` as a ``StatsResponse``."""
    out = pb.StatsResponse()
    _scalars(out, {k: v for k, v in stats.items() if k in _OWN_FIELDS})
    for name, figures in (stats.get("views") or {}).items():
        _scalars(out.views[name], figures)
    _scalars(out.upquery_ms, stats.get("upquery_ms") or {})
    storage = stats.get("storage") or {}
    _scalars(out.storage, storage)
    for table, horizon in (storage.get("horizon") or {}).items():
        out.storage.horizon[table] = horizon
    for table, count in (storage.get("segments") or {}).items():
        out.storage.segments[table] = count
    for table, columns in (storage.get("clustering") or {}).items():
        out.storage.clustering[table].columns.extend(columns)
    scan = stats.get("upquery_scan") or {}
    _scalars(out.upquery_scan, scan)
    _scalars(out.upquery_scan.last, scan.get("last") or {})
    _scalars(out.writes, stats.get("writes") or {})
    verifier = stats.get("verifier")
    if verifier is not None:
        _scalars(out.verifier, verifier)
        last = verifier.get("last_mismatch")
        if last is not None:
            _scalars(out.verifier.last_mismatch, {k: v for k, v in last.items() if k != "key"})
            for value in last.get("key") or ():
                set_value(out.verifier.last_mismatch.key.add(), value, lenient=True)
    checkpoint = stats.get("checkpoint")
    if checkpoint is not None:
        _scalars(out.checkpoint, checkpoint)
    spark = stats.get("spark") or {}
    _scalars(out.spark, spark)
    if spark.get("last_outage"):
        _scalars(out.spark.last_outage, spark["last_outage"])
    follow = stats.get("follow")
    if follow is not None:
        _scalars(out.follow, {k: v for k, v in follow.items() if k not in ("tables", "refused")})
        out.follow.tables.extend(follow.get("tables") or ())
        out.follow.refused.update(follow.get("refused") or {})
    for name, value in stats.items():
        # bool is an int too, but no counter is a flag; floats are not counters.
        if name not in _OWN_FIELDS and type(value) is int:
            out.counters[name] = value
    if "tier_broken" in stats:  # why the disk tier failed, "" if it did not: the log says
        out.counters["tier_broken"] = int(bool(stats["tier_broken"]))  # why; clients see 0/1
    return out


def compact_message(report: Mapping[str, Any]) -> pb.CompactResponse:
    """``Engine.compact()``'s report as a ``CompactResponse``."""
    out = pb.CompactResponse()
    _scalars(out.total, report)
    for table, figures in (report.get("tables") or {}).items():
        _scalars(out.tables[table], figures)
    return out
