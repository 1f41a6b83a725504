"""What changed in a state, for those who follow it (``ChangeLog``, owned by each
``State``): incremental checkpoints (checkpointer.py) take the keys changed since their
last capture; subscriptions (subscriptions.py) take the net change of the keys they
watch."""

from __future__ import annotations

from collections import Counter

from partialflow.operators.base import Row


class ChangeLog:
    """``dirty_fk``/``dirty_ik``: what changed since the last checkpoint capture, None
    while checkpoints are off: fill keys that became filled or stopped being filled, and
    index keys (group keys) whose contents changed. ``watched``: keys a subscription
    watches, each one's net change of rows since ``take_watched``, or None when it must
    be compared whole (it moved: filled, blocked, evicted; or the state had an anomaly,
    whose negative count a read hides). The state's hot paths update them in place."""

    __slots__ = ("dirty_fk", "dirty_ik", "watched", "fresh")

    def __init__(self) -> None:
        self.dirty_fk: set[Row] | None = None
        self.dirty_ik: set[Row] | None = None
        self.watched: dict[Row, Counter[Row] | None] = {}
        # Not yet captured since the state was created: its next capture starts from
        # nothing.
        self.fresh = True

    # -- checkpoints -------------------------------------------------------------------
    def track(self) -> None:
        """Start recording what changes, for incremental checkpoints."""
        if self.dirty_fk is None:
            self.dirty_fk, self.dirty_ik = set(), set()

    def untrack(self) -> None:
        self.dirty_fk = self.dirty_ik = None

    def take(self) -> tuple[set[Row], set[Row]]:
        """(fill keys, index keys) changed since the last call; tracking goes on."""
        fks, iks = self.dirty_fk or set(), self.dirty_ik or set()
        if self.dirty_fk is not None:
            self.dirty_fk, self.dirty_ik = set(), set()
        return fks, iks

    def moved(self, fk: Row) -> None:
        """``fk`` became filled, or stopped being filled (or was blocked)."""
        if self.dirty_fk is not None:
            self.dirty_fk.add(fk)
        if fk in self.watched:
            self.watched[fk] = None

    # -- subscribed keys ---------------------------------------------------------------
    def watch(self, fk: Row) -> None:
        """Log the changes of rows key ``fk`` (compared whole at the first take)."""
        self.watched[fk] = None

    def unwatch(self, fk: Row) -> None:
        self.watched.pop(fk, None)

    def watched_keys(self) -> list[Row]:
        return list(self.watched)

    def take_watched(self, fk: Row, exact: bool) -> Counter[Row] | None:
        """Watched ``fk``'s net change of rows since the last take (row -> count), or
        None: compare it whole. The log starts again from here; ``exact``: the state
        had no anomaly (else every take compares whole)."""
        if fk not in self.watched:
            return None
        change = self.watched[fk]
        self.watched[fk] = Counter() if exact else None
        return change
