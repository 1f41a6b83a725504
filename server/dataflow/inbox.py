"""The executor's inbox: the queue of packets, the timer that pokes it, and write runs.

Anyone may put a packet in (any thread); only the executor takes them out, in order.
Writes to one table queued back to back come out as one ``WriteRun`` (see
``packets.can_join``): per-key work (aggregate folds, accounting, republishing) is then
paid once per key per run rather than once per write. An idle executor takes each write
alone; a busy one, with writes waiting, batches more, as a group commit does.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from partialflow.server.dataflow.packets import Packet, Tick, Write, WriteRun, can_join

# The most rows one run may hold: a bigger run holds the executor's lock longer.
COALESCE_ROWS = 16384


class Inbox:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.coalesce_rows = COALESCE_ROWS  # 0: every write is its own packet
        self._queue: queue.Queue[Packet] = queue.Queue()
        # A packet taken out while building a run that could not join it: comes out next.
        self._carry: Packet | None = None
        # When a timer will next poke the loop. Set by the executor thread, cleared by the
        # timer's thread: guarded by its own lock (the executor's may be held long).
        self._wake: float | None = None
        self._wake_lock = threading.Lock()
        self.timers = True  # False when stepped: ``take_nowait`` ticks once a wake is due

    def put(self, packet: Packet) -> None:
        self._queue.put(packet)

    def empty(self) -> bool:
        return self._carry is None and self._queue.empty()

    def take(self, timeout: float) -> Packet | None:
        """The next packet, waiting up to ``timeout`` seconds (None: nothing came)."""
        if self._carry is not None:
            packet, self._carry = self._carry, None
        else:
            try:
                packet = self._queue.get(timeout=timeout)
            except queue.Empty:
                return None
        return self._runs(packet)

    def take_nowait(self) -> Packet | None:
        """The next packet, or a tick if a wake time has passed, or None (stepped mode)."""
        if self._carry is not None:
            packet, self._carry = self._carry, None
            return self._runs(packet)
        try:
            return self._runs(self._queue.get_nowait())
        except queue.Empty:
            with self._wake_lock:
                due = self._wake is not None and self.clock() >= self._wake
                if due:
                    self._wake = None
            return Tick() if due else None

    def _runs(self, packet: Packet) -> Packet:
        """``packet``, or if it is a write, it and the writes queued right behind it that
        can join it, as one run (the first that cannot is carried to the next take)."""
        if not isinstance(packet, Write):
            return packet
        run, rows = [packet.record], len(packet.record.rows)
        while True:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if not (isinstance(nxt, Write) and can_join(run, rows, nxt.record, self.coalesce_rows)):
                self._carry = nxt
                break
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
