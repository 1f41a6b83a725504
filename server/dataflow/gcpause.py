"""Cyclic garbage collection put off for the length of one executor packet.

A packet's deltas live until it ends. With the collector on, a collection ran every few
hundred allocations in the middle of a batch: each walked the batch's live deltas again
and promoted them to older generations, whose growth then set off full collections of
every state (hundreds of ms with millions of filled keys). Reference counting still frees
everything at once; dataflow code makes no cycles of its own, so the collector only has
to see what is still young when the packet ends, once.
"""

from __future__ import annotations

import gc


def pause() -> bool:
    """Pause the collector for one packet; returns whether it was on (for ``resume``).
    Two plain calls rather than a context manager: they run once per packet, and so once
    per write at one row per write."""
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    return collecting


def resume(collecting: bool) -> None:
    """End ``pause``: when it was on, run the collection the packet put off, if one became
    due, so its cost counts where it was incurred."""
    if collecting:
        gc.enable()
        # The first container allocated with the collector on runs the put-off
        # collection, with CPython's own choice of generation (a forced gen-0 one
        # each time would leave the older generations to allocations between
        # packets, which a busy executor barely leaves room for).
        _ = []
