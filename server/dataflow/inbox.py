"""The executor's inbox: the queue of packets, the timer that pokes it, and write runs.

Anyone may put a packet in (any thread); only the executor takes them out. Writes to one
table queued back to back come out as one ``WriteRun`` (see ``packets.can_join``): per-key
work (aggregate folds, accounting, republishing) is then paid once per key per run rather
than once per write. An idle executor takes each write alone; a busy one, with writes
waiting, batches more, as a group commit does.

Read misses and fill replies go ahead of queued writes (``URGENT``). Neither depends on
where the executor is in the write stream: a fill is taken at the LSN the executor has
applied when it issues it, and its reply may land at any later position (updates in
between are held and replayed). A read with a floor waits for the floor before it misses
(``Dataflow.lookup``). Behind a backlog of writes, a FIFO made a read wait for every
queued write first, and kept keys gated on an index fill whose reply had already come.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from partialflow.server.dataflow.packets import (
    FillDone,
    Miss,
    Packet,
    Tick,
    Write,
    WriteRun,
    can_join,
)
from partialflow.server.storage.record import TxRecord

# The most rows one run may hold: a bigger run holds the executor's lock longer.
COALESCE_ROWS = 16384

# Packets taken before anything else queued (in their own arrival order).
URGENT = (Miss, FillDone)


class Inbox:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.coalesce_rows = COALESCE_ROWS  # 0: every write is its own packet
        self._urgent: deque[Packet] = deque()
        self._ordered: deque[Packet] = deque()  # everything else, in arrival order
        # Held by ``with self._lock`` (a C lock) rather than the Condition's own
        # __enter__/__exit__ (two Python calls, on every put and take: every write).
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        # When a timer will next poke the loop. Set by the executor thread, cleared by the
        # timer's thread: guarded by its own lock (the executor's may be held long).
        self._wake: float | None = None
        self._wake_lock = threading.Lock()
        self.timers = True  # False when stepped: ``take_nowait`` ticks once a wake is due

    def put(self, packet: Packet) -> None:
        with self._lock:
            (self._urgent if isinstance(packet, URGENT) else self._ordered).append(packet)
            self._ready.notify()

    def empty(self) -> bool:
        with self._lock:
            return not self._urgent and not self._ordered

    def take(self, timeout: float) -> Packet | None:
        """The next packet, waiting up to ``timeout`` seconds (None: nothing came)."""
        with self._lock:
            if not self._urgent and not self._ordered:
                self._ready.wait(timeout)
            return self._next()

    def take_nowait(self) -> Packet | None:
        """The next packet, or a tick if a wake time has passed, or None (stepped mode)."""
        with self._lock:
            packet = self._next()
        if packet is not None:
            return packet
        with self._wake_lock:
            due = self._wake is not None and self.clock() >= self._wake
            if due:
                self._wake = None
        return Tick() if due else None

    def more_misses(self) -> list[Miss]:
        """The read misses queued at the head of the urgent queue, taken now: the executor
        handles them in the packet of the Miss it is running (each a key or a few, from as
        many concurrent reads), so the end-of-packet work and the executor's wake-up are
        paid once per burst, not once per read. Nothing else is reordered: they were next
        anyway, and a miss does not depend on where the write stream is."""
        out: list[Miss] = []
        with self._lock:
            urgent = self._urgent
            while urgent and isinstance(head := urgent[0], Miss):
                urgent.popleft()
                out.append(head)
        return out

    def _next(self) -> Packet | None:
        """(Lock held.) An urgent packet, else the next in order: a write with the writes
        queued right behind it that can join it, as one run."""
        if self._urgent:
            return self._urgent.popleft()
        if not self._ordered:
            return None
        packet = self._ordered.popleft()
        if not isinstance(packet, Write) or isinstance(packet.record, TxRecord):
            return packet  # a transaction is applied alone, as it is
        queued = self._ordered
        run, rows = [packet.record], len(packet.record.rows)
        while queued:
            nxt = queued[0]
            if not (isinstance(nxt, Write) and not isinstance(nxt.record, TxRecord)
                    and can_join(run, rows, nxt.record, self.coalesce_rows)):
                break
            queued.popleft()
            run.append(nxt.record)
            rows += len(nxt.record.rows)
        return packet if len(run) == 1 else WriteRun(run)

    # -- waking an idle loop -------------------------------------------------------------
    def wake_at(self, when: float) -> None:
        """Have a tick come out at ``when`` even if no packet comes."""
        with self._wake_lock:
            if self._wake is not None and self._wake <= when:
                return
            self._wake = when
        if not self.timers:
            return  # take_nowait ticks once the clock has passed it
        t = threading.Timer(max(0.0, when - self.clock()), self._poke, args=(when,))
        t.daemon = True
        t.start()

    def next_wake(self) -> float | None:
        with self._wake_lock:
            return self._wake

    def _poke(self, when: float) -> None:
        with self._wake_lock:
            if self._wake == when:
                self._wake = None
        self.put(Tick())
