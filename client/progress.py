"""The bulk-load progress bar: one tqdm bar per phase, on stderr.

tqdm turns itself off when stderr is not a terminal, so scripts and logs only get the
final ``loaded N rows`` line.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from partialflow.client.client import LoadProgress

_LABELS = {
    "scan": ("reading", "task"),
    "convert": ("converting", "row"),
    "write": ("", None),  # one storage call: no steps to count, so a label and the time
}


class LoadBar:
    """Feeds LoadProgress events to tqdm bars; use as the ``progress`` callback."""

    def __init__(self, stream: TextIO | None = None, disable: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.disable = disable  # None: on only when the stream is a terminal
        self._bar: Any = None
        self._phase = ""

    def __call__(self, event: LoadProgress) -> None:
        if event.phase != self._phase:
            self.close()
            self._phase = event.phase
            if event.phase in _LABELS:
                self._open(event)
        if self._bar is not None:
            if event.total and self._bar.total != event.total:
                self._bar.total = event.total
            self._bar.n = event.done
            self._bar.refresh()

    def _open(self, event: LoadProgress) -> None:
        from tqdm import tqdm  # imported on first use: only `load` needs it

        label, unit = _LABELS[event.phase]
        self._bar = tqdm(
            total=(event.total or None) if unit else None,
            desc=f"{label:<10}" if label else f"{event.message} ",
            unit=unit or "it",
            unit_scale=event.phase != "scan",
            file=self.stream,
            disable=self.disable,
            leave=True,
            dynamic_ncols=True,
            bar_format=None if unit else "{desc}{elapsed}",
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> LoadBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
