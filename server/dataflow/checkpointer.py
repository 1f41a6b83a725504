"""Taking checkpoints of the dataflow's state at consistent cuts, without stopping writes.

Every packet boundary is a consistent cut: every filled key of every state is exact at the
executor's ``applied_lsn`` (pending and blocked keys are not filled; a checkpoint records
them as holes). A checkpoint is captured over several packets, a fuzzy copy made exact at
its last one:

1. *start* (a boundary B0): take each state's changes since the last checkpoint (states
   track them: ``ChangeLog.take``), or all its filled keys for a full checkpoint or a
   state never captured; that is the work list.
2. *steps* (each later boundary, a few milliseconds each): copy part of the work list, by
   pickling it at once, so later packets can't change what was copied.
3. *finish* (the boundary Bf where the list runs out): copy, in one go, every key changed
   since B0. Each key is now either copied at Bf or copied earlier and unchanged since:
   the whole is exact at Bf's LSN. Then the writer thread commits the file and manifest.

A key shelved in the disk tier is recorded as where it is (``("T", fk, ref)``), not
copied: the tier's store commits at the finish, and the manifest names that commit
(``extra["tier"]``), so recovery knows the tier holds what the records refer to (tier.py).

So writes wait only for the copying of steps (bounded per packet) and of the keys changed
during one checkpoint, never for disk. Every checkpoint after the first holds only what
changed; the store merges the chain in the background.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from partialflow.operators.base import Row
from partialflow.server.checkpoint import CheckpointStore, Manifest, catalog_version
from partialflow.server.dataflow.packets import Packet, Tick
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.tier import Tier

if TYPE_CHECKING:
    from partialflow.server.dataflow.graph import Node

log = logging.getLogger("partialflow.checkpoint")

STEP_SECONDS = 0.005  # copying per packet while a checkpoint is captured...
IDLE_STEP_SECONDS = 0.05  # ...and at most this long when no packet waits: reads that need
# the executor's lock (misses, a publisher retry) wait for it without queueing a packet
SLICE = 2048  # index keys per record when a big bucket is copied
CHUNK_RECORDS = 4096  # index keys per pickled chunk

# Work: (state, fill key, None) copies the whole key (filled, or a hole); (state, fill key,
# [index keys]) copies those index keys of a filled key.
Work = tuple[State, Row, list[Row] | None]


def state_signature(st: State, table_ids: dict[str, int]) -> str:
    """What ``st`` materializes, independent of node ids and view creation order, with the
    catalog ids of the tables below: equal signatures hold equal contents at one LSN."""
    role = "own" if st.node.own is st else next(s for s, x in st.node.sides.items() if x is st)
    text = repr((_node_key(st.node, table_ids), role, st.kind, st.index_cols,
                 st.partial_cols, st.mode))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _node_key(n: Node, table_ids: dict[str, int]) -> Hashable:
    if n.table is not None:
        return ("base", n.table, table_ids.get(n.table))
    parents = tuple(_node_key(p, table_ids) for p in n.parents)
    if n.view is not None:
        return ("reader", n.view, parents)
    sig: Any = n.signature  # (operator signature, parent node ids, materialization)
    return (sig[0], parents, sig[2])


class CheckpointHost(Protocol):
    """What the checkpointer needs from the executor."""

    @property
    def applied_lsn(self) -> int: ...
    def submit(self, packet: Packet) -> None: ...
    def has_queued(self) -> bool: ...
    def live_states(self) -> list[State]: ...
    def view_sqls(self) -> list[tuple[str, str]]: ...


class Checkpointer:
    """Runs on the executor thread (``after_packet``), except ``request``/``stats``."""

    def __init__(self, executor: CheckpointHost, store: CheckpointStore, *, interval: float,
                 table_ids: Callable[[], dict[str, int]],
                 clock: Callable[[], float] = time.monotonic, tier: Tier | None = None
                 ) -> None:
        self.ex = executor
        self.tier = tier
        self.store = store
        self.interval = interval
        self.table_ids = table_ids
        self.clock = clock
        self.enabled = False  # taking checkpoints: set once recovery is over
        self.tracking = False  # states record their changes: set once restored
        self._sigs: dict[int, str] = {}  # sid -> signature
        self._tables: dict[str, int] = {}
        self._work: Iterator[None] | None = None  # the capture in progress
        self._chunk: list[tuple[str, list[tuple]]] = []
        self._chunk_n = 0
        self._seq = 0
        self._t0 = 0.0
        self._full = False
        self._need_full = store.head is None
        self._last_start = clock()
        self._requests: list[Future] = []  # taken by the next checkpoint to start
        self._waiting: list[Future] = []  # resolved when the one in progress commits
        self._lock = threading.Lock()  # guards the figures below (writer thread sets them)
        self.last: Manifest | None = store.head
        self.taken = 0
        self.skipped = 0  # due while nothing had changed (see _nothing_new)
        self.failed = 0
        self._streak = 0  # failures in a row (writer thread)
        self.last_error = ""
        self.recovery: dict[str, Any] = {}

    # -- states coming and going -----------------------------------------------------------
    def start_tracking(self, restored: set[int]) -> None:
        """From now on every state records its changes (recovery is over restoring);
        states in ``restored`` (sids) are in the checkpoint chain already."""
        self.tracking = True
        for st in self.ex.live_states():
            st.changelog.track()
            st.changelog.fresh = st.sid not in restored
        self._need_full = self.store.head is None

    def registered(self, states: list[State]) -> None:
        if self.tracking:
            for st in states:
                st.changelog.track()

    def signature(self, st: State) -> str:
        sig = self._sigs.get(st.sid)
        if sig is None:
            sig = self._sigs[st.sid] = state_signature(st, self._tables or self.table_ids())
        return sig

    # -- asking -----------------------------------------------------------------------------
    def request(self) -> Future:
        """A checkpoint started after now; the future gets its manifest (any thread)."""
        fut: Future = Future()
        with self._lock:
            self._requests.append(fut)
        self.ex.submit(Tick())
        return fut

    # -- the executor's hook ----------------------------------------------------------------
    def after_packet(self) -> None:
        if not self.enabled:
            return
        if self._work is None:
            # Read without the lock (this runs after every packet): a request appends
            # before it submits the Tick whose packet then sees it here.
            asked = bool(self._requests)
            # After failures in a row (a full disk, most likely), wait 2, 4, 8, 16 times
            # the interval: a failed one forces a full checkpoint next, the costliest kind.
            wait = self.interval * 2 ** min(self._streak, 4)
            due = self.interval > 0 and self.clock() - self._last_start >= wait
            if not (asked or due) or not self.store.writer.idle():
                return
            if not asked and self._nothing_new():
                # An idle server would otherwise write (and log) an empty checkpoint every
                # interval, forever, and compact chains of them.
                self._last_start = self.clock()
                self.skipped += 1
                return
            self._start()
        self._step()

    def _nothing_new(self) -> bool:
        """A checkpoint now would record nothing the last one does not: the same LSN, views
        and tables, and no state changed since (fills, evictions and new states all mark
        their state). A requested checkpoint is taken anyway."""
        last = self.last
        if last is None or self._need_full or last.lsn != self.ex.applied_lsn:
            return False
        if [tuple(v) for v in last.views] != [tuple(v) for v in self.ex.view_sqls()]:
            return False
        if dict(last.tables) != self.table_ids():
            return False
        return not any(
            st.changelog.fresh or st.changelog.dirty_fk or st.changelog.dirty_ik
            for st in self.ex.live_states()
        )

    def _start(self) -> None:
        self._last_start = self._t0 = self.clock()
        with self._lock:
            self._waiting, self._requests = self._requests, []
        self._tables = self.table_ids()
        self._sigs.clear()  # table ids may have changed (a table dropped and made again)
        self._full = self._need_full
        self._seq = self.store.next_seq()
        self.store.begin(self._seq)
        todo: deque[Work] = deque()
        for st in self._states():
            fks, iks = st.changelog.take()
            if st.changelog.fresh or self._full:
                st.changelog.fresh = False
                self._record(st, ("R",))
                todo.extend((st, fk, None) for fk in st.filled_keys())
            else:
                todo.extend(_work(st, fks, iks))
        self._work = self._copy(todo, final=False)

    def _step(self) -> None:
        """Copy for about STEP_SECONDS (up to IDLE_STEP_SECONDS when nothing is queued)."""
        assert self._work is not None
        start = time.perf_counter()
        end, idle_end = start + STEP_SECONDS, start + IDLE_STEP_SECONDS
        for _ in self._work:
            now = time.perf_counter()
            if now > end and (now > idle_end or self.ex.has_queued()):
                self._flush()
                self.ex.submit(Tick())  # come back after what is queued
                return
        self._finish()

    def _finish(self) -> None:
        for _ in self._copy(self._final_work(), final=True):
            pass
        self._flush()
        self._work = None
        extra = {}
        tier = self.tier
        if tier is not None and not tier.broken:
            # The records of shelved keys refer to what the tier holds now: commit it at
            # this cut. If it can't, the tier is broken for the rest of the run (tier.py)
            # and the checkpoint goes on without naming a commit: recovery then empties the
            # store and those keys start as holes, which is always safe. (Dropping the
            # checkpoint instead would drop every later one too, and leave a caller of
            # ``request`` waiting.)
            try:
                extra["tier"] = tier.commit()
            except Exception as e:
                log.error("checkpoint %d: the disk tier can't commit (%s); the keys shelved "
                          "there are holes in it", self._seq, e)
        tables = self._tables
        states = self._states()
        views = self.ex.view_sqls()
        template = Manifest(
            seq=self._seq, lsn=self.ex.applied_lsn, kind="full" if self._full else "incremental",
            files=[], views=views, tables=tables,
            states={self.signature(st): st.label for st in states},
            catalog_version=catalog_version(tables, views), duration_s=self.clock() - self._t0,
            extra=extra,
        )
        self.store.commit(template, incremental=not self._full, done=self._committed)
        self._need_full = False

    def _final_work(self) -> Iterator[Work]:
        for st in self._states():
            fks, iks = st.changelog.take()
            if st.changelog.fresh:  # created during this checkpoint
                st.changelog.fresh = False
                self._record(st, ("R",))
                yield from ((st, fk, None) for fk in st.filled_keys())
            else:
                yield from _work(st, fks, iks)

    def _committed(self, m: Manifest | None, error: BaseException | None) -> None:
        """On the writer thread: the checkpoint is published, or it failed."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            if m is not None:
                self.last = m
                self.taken += 1
                self._streak = 0
            else:
                self.failed += 1
                self._streak += 1
                self.last_error = str(error)
                # Its changes were taken from the states and are not on disk: only a full
                # checkpoint can be trusted next.
                self._need_full = True
        if m is not None:
            log.info("checkpoint %d (%s) at LSN %d: %d bytes in %.2f s", m.seq, m.kind, m.lsn,
                     m.bytes_written, m.duration_s)
        else:
            log.error("checkpoint %d failed: %s", self._seq, error)
        for fut in waiting:
            if m is not None:
                fut.set_result(m)
            else:
                fut.set_exception(error or RuntimeError("checkpoint failed"))

    def abort(self) -> None:
        """Drop the capture in progress (the dataflow is closing)."""
        if self._work is not None:
            self._work = None
            self.store.abort()
            self._need_full = True
        with self._lock:
            pending, self._waiting = self._waiting + self._requests, []
            self._requests = []
        for fut in pending:
            fut.set_exception(RuntimeError("the dataflow closed before the checkpoint was taken"))

    # -- copying ----------------------------------------------------------------------------
    def _states(self) -> list[State]:
        return sorted(self.ex.live_states(), key=lambda s: s.sid)

    def _copy(self, todo: Iterator[Work] | deque[Work], final: bool) -> Iterator[None]:
        """Copy the work list into records; yields between pieces (``final``: the caller
        runs it to the end within one packet)."""
        for st, fk, iks in todo:
            bucket = st.resident(fk)  # a shelved key is not brought back to be copied
            if iks is not None:  # index keys of a key filled before (a hole: copied whole)
                if bucket is not None:
                    self._record(st, ("I", fk, st.index_entries(fk, iks)), len(iks))
                    yield
                continue
            if bucket is None:
                ref = st.shelved(fk)
                self._record(st, ("H", fk) if ref is None else ("T", fk, ref))
                continue
            self._record(st, ("F", fk))
            keys = st.index_keys(fk)
            for i in range(0, len(keys), SLICE):
                if not final and st.resident(fk) is not bucket:
                    break  # filled anew or evicted since: it is copied again at the finish
                part = keys[i:i + SLICE]
                self._record(st, ("I", fk, st.index_entries(fk, part)), len(part))
                yield

    def _record(self, st: State, rec: tuple, weight: int = 1) -> None:
        sig = self.signature(st)
        if self._chunk and self._chunk[-1][0] == sig:
            self._chunk[-1][1].append(rec)
        else:
            self._chunk.append((sig, [rec]))
        self._chunk_n += weight
        if self._chunk_n >= CHUNK_RECORDS:
            self._flush()

    def _flush(self) -> None:
        """Pickle what was recorded now: later packets may change the objects in it."""
        if self._chunk:
            self.store.add(self._chunk)
        self._chunk, self._chunk_n = [], 0

    # -- figures ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            m = self.last
            out: dict[str, Any] = {
                "enabled": self.interval > 0, "interval_s": self.interval,
                "taken": self.taken, "failed": self.failed, "last_error": self.last_error,
                "compactions": self.store.compactions, **self.recovery,
            }
        if m is not None:
            out.update(last_seq=m.seq, last_lsn=m.lsn, last_kind=m.kind,
                       last_bytes=m.bytes_written, last_duration_s=round(m.duration_s, 3),
                       last_age_s=round(max(0.0, time.time() - m.created), 3),
                       chain_files=len(m.files), chain_bytes=sum(f.bytes for f in m.files))
        return out


def _work(st: State, fks: set[Row], iks: set[Row]) -> Iterator[Work]:
    """The work for a state's changes: whole fill keys, then the index keys changed in
    keys that stayed filled, grouped by fill key."""
    for fk in fks:
        yield (st, fk, None)
    by_fk: dict[Row, list[Row]] = {}
    for ik in iks:
        fk = st.fill_key_of_index(ik)
        if fk not in fks:
            by_fk.setdefault(fk, []).append(ik)
    for fk, keys in by_fk.items():
        for i in range(0, len(keys), SLICE):
            yield (st, fk, keys[i:i + SLICE])

