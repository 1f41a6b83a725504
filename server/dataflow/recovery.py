"""Starting warm: load the newest valid checkpoint, replay the log after it, then serve.

1. The newest checkpoint that is intact, not ahead of storage, and whose LSN C the
   write-ahead log still covers from, is loaded (the store skips damaged ones, logging
   why, and falls back to the one before; with none, every view starts cold).
2. The executor restarts at C. Each persisted view is planned and installed as usual, but
   its states take their contents from the checkpoint instead of Spark: a state restores
   what the checkpoint holds under its signature (``checkpointer.state_signature``: the
   subgraph it materializes over the same table ids). A view whose full state is not in
   the checkpoint (created after C, or planned differently now) is left for step 4, with
   any view defined over it.
3. The writes after C are read back from the log and replayed through the dataflow, the
   same path live writes take, so every restored key is exact at the last durable LSN.
4. The views left over are created cold (full state from Spark at that LSN).

Keys the checkpoint has shelved in the disk tier are shelved again if the tier's store is
at the commit the manifest names, and start as holes otherwise (tier.py).

Keys pending at C are holes in the checkpoint; a restored key whose key below is not
restored (it can't have happened, but a hole is always safe) is evicted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from partialflow.operators.base import Row
from partialflow.server.checkpoint import Contents, Manifest
from partialflow.server.checkpoint.merge import Shelved
from partialflow.server.dataflow.packets import Packet, Write
from partialflow.server.dataflow.state import State

if TYPE_CHECKING:
    from partialflow.server.dataflow.checkpointer import Checkpointer
    from partialflow.server.dataflow.evictor import Evictor
    from partialflow.server.dataflow.tier import Tier

log = logging.getLogger("partialflow.checkpoint")

REPLAY_BATCH = 10_000  # log records queued before waiting for the executor to catch up


class RecoveryExecutor(Protocol):
    """What recovery needs from the executor."""

    @property
    def checkpointer(self) -> Checkpointer | None: ...
    @property
    def evictor(self) -> Evictor: ...
    @property
    def tier(self) -> Tier | None: ...
    def call(self, fn: Callable[[], Any]) -> Future: ...
    def restart_at(self, lsn: int) -> None: ...
    def submit(self, packet: Packet) -> None: ...
    def wait_for(self, lsn: int, deadline: float) -> None: ...


class RecoveryStorage(Protocol):
    """What recovery needs from storage: where the log starts and ends, and its records."""

    @property
    def last_lsn(self) -> int: ...
    def log_start(self) -> int: ...
    def log_records(self, after: int, upto: int) -> Iterator[Any]: ...


# adopt_view(name, sql, contents_for): install a persisted view with its states restored
# (the view catalog's ``Dataflow.adopt_view``); None if it must start cold.
AdoptView = Callable[
    [str, str, Callable[[State], dict[Row, Any] | None]], list[tuple[State, list[Row]]] | None
]


def recover(ex: RecoveryExecutor, storage: RecoveryStorage, adopt_view: AdoptView,
            views: list[tuple[str, str]], timeout: float) -> list[tuple[str, str]]:
    """Restore what the newest usable checkpoint holds; returns the views still to be
    created cold, in catalog order."""
    cp = ex.checkpointer
    assert cp is not None
    t0 = time.monotonic()
    last = storage.last_lsn
    loaded = cp.store.load(lambda m: _unusable(m, last, storage.log_start()))
    tier = ex.tier
    if loaded is None:
        if tier is not None:
            ex.call(tier.clear).result()
        ex.call(lambda: cp.start_tracking(set())).result()
        # A cold start restored nothing and replayed nothing: say so (0), so the metrics
        # and stats carry the same keys after every start.
        cp.recovery = {"recovered_from": None, "recovered_keys": 0, "replayed_writes": 0,
                       "recovery_s": round(time.monotonic() - t0, 3)}
        log.info("no usable checkpoint: views start cold")
        return views
    m, contents = loaded
    ex.call(lambda: ex.restart_at(m.lsn)).result()
    if tier is None or not ex.call(lambda: tier.usable_from(m.extra.get("tier"))).result():
        _unshelve_none(contents)
    restored: dict[int, tuple[State, list[Any]]] = {}  # sid -> the keys it restored
    cold: list[tuple[str, str]] = []
    keys = 0
    for name, sql in views:
        try:
            got = adopt_view(name, sql, lambda st: _contents_for(cp, st, contents))
        except Exception as e:  # e.g. defined over a view that is left cold
            log.info("view %s starts cold: %s", name, e)
            got = None
        if got is None:
            cold.append((name, sql))
            continue
        for st, fks in got:
            restored[st.sid] = (st, fks)
            keys += len(fks)

    def settle() -> None:
        cp.start_tracking(set(restored))
        # Keys restored but evicted since (over the memory limit) are holes that the
        # checkpoint chain holds as filled: the next checkpoint must say so.
        for st, fks in restored.values():
            for fk in fks:
                if not st.is_filled(fk):
                    st.changelog.moved(fk)
        _drop_orphans(ex)
        if tier is not None:
            tier.keep_only({ref for st in ex.evictor.states.values()
                            for fk in st.shelved_keys() if (ref := st.shelved(fk)) is not None})

    ex.call(settle).result()
    replayed = _replay(ex, storage, m.lsn, last, timeout)
    cp.recovery = {
        "recovered_from": m.seq, "recovered_lsn": m.lsn, "recovered_keys": keys,
        "replayed_writes": replayed, "cold_views": [n for n, _ in cold],
        "recovery_s": round(time.monotonic() - t0, 3),
    }
    log.info("recovered from checkpoint %d at LSN %d: %d keys in %d states, %d writes "
             "replayed, %d view(s) cold, in %.2f s", m.seq, m.lsn, keys, len(restored),
             replayed, len(cold), time.monotonic() - t0)
    return cold


def _unusable(m: Manifest, last: int, log_start: int) -> str | None:
    if m.lsn > last:
        return f"it is at LSN {m.lsn}, after the last durable write {last}"
    if m.lsn < last and log_start > m.lsn + 1:
        return f"the write-ahead log starts at LSN {log_start}, after it"
    return None


def _unshelve_none(contents: Contents) -> None:
    """The disk tier does not hold what the checkpoint's shelved keys refer to (or there
    is no tier now): those keys start as holes."""
    for state in contents.values():
        for fk in [fk for fk, b in state.items() if isinstance(b, Shelved)]:
            del state[fk]


def _contents_for(cp: Any, st: State, contents: Contents) -> dict[Any, dict[Any, Any]] | None:
    return contents.get(cp.signature(st))


def _drop_orphans(ex: RecoveryExecutor) -> None:
    """Evict restored keys whose same key below is not filled (see module docstring)."""
    for st in sorted(ex.evictor.states.values(), key=lambda s: s.node.nid):
        for fk in st.filled_keys():
            if any(not b.is_filled(fk) for b in st.below):
                log.warning("state %s: restored key %r has no key below; evicted", st.label, fk)
                ex.evictor.evict(st, fk)


def _replay(ex: RecoveryExecutor, storage: RecoveryStorage, after: int, last: int,
            timeout: float) -> int:
    """Replay the logged writes (after, last] through the executor; wait until applied."""
    n = 0
    for rec in storage.log_records(after, last):
        ex.submit(Write(rec))
        n += 1
        if n % REPLAY_BATCH == 0:
            ex.wait_for(rec.lsn, time.monotonic() + timeout)
    ex.wait_for(last, time.monotonic() + timeout)
    return n
