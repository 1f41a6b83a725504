"""Sizing a state by counting (``SizeMeter``, owned by each ``State``).

A key's bytes are its rows (a rows state) or groups (a grouped state) times the state's
mean size of one, sampled as they are written (one in SAMPLE_EVERY: a row measured as
``row_size``, a group as its entry's ``entry_size`` plus its key's), plus the overhead of
a bucket per key. Measuring every row and entry was nearly half the cost of storing it;
the limit needs totals, not a byte-exact price per item.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from itertools import islice
from typing import Any

from partialflow.operators.base import Row

BUCKET_OVERHEAD = 240  # dict + bookkeeping per filled key, measured with sys.getsizeof

SAMPLE_EVERY = 16
# The mean is that of the first SAMPLE_WEIGHT samples, then moves 1/SAMPLE_WEIGHT of the
# way to each new one: it follows the rows as they change (a sample's weight halves
# after about 44 more).
SAMPLE_WEIGHT = 64


class SizeMeter:
    """Each filled (or blocked) key's rows or groups (``sizes``; the state's hot paths
    update them in place), their sum (``total``, kept as they change: the evictor reads
    every state's total at each packet's end instead of re-reading the size of each key a
    write changed), and the sampled mean size of one row or group."""

    __slots__ = ("sizes", "total", "_mean", "_samples", "until_sample")

    def __init__(self) -> None:
        self.sizes: dict[Row, int] = {}
        self.total = 0
        # The mean size of a row or group sampled, the samples taken (up to
        # SAMPLE_WEIGHT) and the rows or groups written until the next sample. The state's
        # hot paths count a write of fewer down themselves instead of calling ``sample``:
        # most small writes take no sample, and this runs per state per packet.
        self._mean = 0.0
        self._samples = 0
        self.until_sample = 0

    def clear(self) -> None:
        self.sizes.clear()
        self.total = 0

    def sample(self, pairs: Collection[tuple[Any, Any]],
               measure: Callable[[Any, Any], int | None]) -> None:
        """Take every SAMPLE_EVERY-th of the rows or groups written (``pairs``, the next
        part of the stream) into the mean size of one. ``measure`` gives its bytes, or
        None for one not stored (a deletion, a group removed): the mean is of what the
        state holds, and a write takes out old rows before it puts in new ones."""
        start = self.until_sample
        if len(pairs) > start:
            n, mean, taken = self._samples, self._mean, 0
            for a, b in islice(pairs, start, None, SAMPLE_EVERY):
                taken += 1
                size = measure(a, b)
                if size is not None:
                    n = min(n + 1, SAMPLE_WEIGHT)
                    mean += (size - mean) / n
            self._samples, self._mean = n, mean
            start += taken * SAMPLE_EVERY
        self.until_sample = start - len(pairs)

    def set_size(self, fk: Row, items: int) -> None:
        self.total += items - self.sizes.get(fk, 0)
        self.sizes[fk] = items

    def drop(self, fk: Row) -> int:
        """``fk`` holds nothing any more; returns the bytes it had (0 if none)."""
        items = self.sizes.pop(fk, None)
        if items is None:
            return 0
        self.total -= items
        return BUCKET_OVERHEAD + items * self.mean_item_size

    @property
    def mean_item_size(self) -> int:
        """Bytes per row (a rows state) or group (its entry and key), sampled; 0 before
        any."""
        return round(self._mean)

    def size_of(self, fk: Row) -> int:
        """A filled (or blocked) key's bytes; 0 for any other."""
        items = self.sizes.get(fk)
        return 0 if items is None else BUCKET_OVERHEAD + items * self.mean_item_size

    @property
    def memory_bytes(self) -> int:
        """Bytes of every filled and blocked key (O(1))."""
        return BUCKET_OVERHEAD * len(self.sizes) + self.total * self.mean_item_size

    def recounted_bytes(self) -> int:
        """``memory_bytes`` summed afresh from the keys' sizes (for checks)."""
        return sum([self.size_of(fk) for fk in self.sizes])

    def item_counts(self) -> dict[Row, int]:
        """Each filled (or blocked) key's rows or groups, as kept."""
        return dict(self.sizes)
