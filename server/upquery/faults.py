"""Test-only faults for upquery scans (off unless PARTIALFLOW_FAULTS is set or a test sets
``mode``), so fault tests can make Spark fail, hang or slow down on demand."""

from __future__ import annotations

import os
import threading

from partialflow.server.errors import InvalidArgument


class FaultInjector:
    """Modes: "" (none), "fail" (raise), "hang" (block past any deadline), "slow:SECONDS".

    A hang or slow scan waits on a condition, so changing the mode wakes it at once: lifting
    a hang lets stuck upquery workers finish instead of piling up for an hour.
    """

    MODES = ("", "fail", "hang", "slow:SECONDS")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._mode = ""
        self.mode = os.environ.get("PARTIALFLOW_FAULTS", "")

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        mode = (mode or "").strip()
        if mode not in ("", "fail", "hang") and not _slow_seconds(mode):
            raise InvalidArgument(
                f"unknown fault mode {mode!r}; modes are {', '.join(repr(m) for m in self.MODES)}"
            )
        with self._changed:
            self._mode = mode
            self._changed.notify_all()

    def before_scan(self) -> None:
        mode = self._mode
        if not mode:
            return
        if mode == "fail":
            raise RuntimeError("injected fault: Spark scan failed")
        seconds = 3600.0 if mode == "hang" else _slow_seconds(mode)
        with self._changed:
            self._changed.wait_for(lambda: self._mode != mode, timeout=seconds)


def _slow_seconds(mode: str) -> float:
    """The delay of a "slow:SECONDS" mode (0.0 if ``mode`` is not one)."""
    if not mode.startswith("slow:"):
        return 0.0
    try:
        seconds = float(mode.split(":", 1)[1])
    except ValueError:
        return 0.0
    return seconds if 0 < seconds < 86400 else 0.0
