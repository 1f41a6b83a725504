"""Bounded best-first candidate lists for MIN/MAX and top-k.

A partial MIN/MAX or top-k state can't keep every value of a group, so it keeps the best
``cap`` distinct items with their multiplicities plus ``total``, the number of items in the
group (kept or not). Invariant: every item not kept is worse than every kept item. An
insert better than the worst kept item enters (pushing the worst out beyond ``cap``);
a worse one only counts in ``total`` once the list is truncated. Deletions of kept items
shrink the list; when it no longer holds what the output needs while ``total`` says
items remain unseen, the group is exhausted and must be recomputed (by upquery).

Items are ordered by a key function (best first); equal keys mean equal items.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from partialflow.operators.sizes import list_size, value_size

KeyFn = Callable[[Any], Any]

# Counts up to this are CPython's cached small ints: they own no bytes (sizes.value_size).
_SMALL_INT = 256


class Candidates:
    """A group's kept items (best first, distinct, with counts) and its total item count."""

    # ``_payload``: bytes of the items and counts themselves (``size`` adds the two lists),
    # kept up to date by ``insert``/``delete`` once known, so ``size`` (called for every
    # entry the executor writes and again when it is replaced) never walks the items.
    # ``_isize``: the item size function it was measured with (one per instance).
    # ``_bytes``: the whole ``size`` while the lists are unchanged (an entry is sized when
    # it is written and again when it is replaced).
    __slots__ = ("items", "counts", "kept", "total", "_payload", "_isize", "_bytes")

    def __init__(self, items: list[Any] | None = None, counts: list[int] | None = None,
                 total: int | None = None) -> None:
        self.items: list[Any] = items if items is not None else []
        self.counts: list[int] = counts if counts is not None else [1] * len(self.items)
        self.kept = sum(self.counts)
        self.total = self.kept if total is None else total
        self._payload: int | None = None
        self._isize: Callable[[Any], int] = value_size
        self._bytes: int | None = None

    def __getstate__(self) -> tuple[list[Any], list[int], int, int]:
        return (self.items, self.counts, self.kept, self.total)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # the default slots form
            state = tuple(state[1][k] for k in ("items", "counts", "kept", "total"))
        self.items, self.counts, self.kept, self.total = state
        self._payload = None
        self._isize = value_size
        self._bytes = None

    @classmethod
    def loaded(cls, pairs: list[tuple[Any, int]], total: int, key: KeyFn) -> Candidates:
        """From (item, count) pairs in any order, e.g. rows of a Spark state."""
        pairs = sorted(pairs, key=lambda p: key(p[0]))
        return cls([p[0] for p in pairs], [int(p[1]) for p in pairs], int(total))

    def copy(self) -> Candidates:
        twin = Candidates.__new__(Candidates)
        twin.items, twin.counts = self.items[:], self.counts[:]
        twin.kept, twin.total = self.kept, self.total
        twin._payload, twin._isize = self._payload, self._isize
        twin._bytes = None  # new lists: their allocations may differ
        return twin

    def counted(self, n: int) -> Candidates:
        """A twin that counts ``n`` more unseen items (each ``beneath`` the kept ones).
        It shares the item lists: a stored entry's lists are never changed in place
        (``insert`` and ``delete`` run on a ``copy``), so sharing them is safe."""
        twin = Candidates.__new__(Candidates)
        twin.items, twin.counts = self.items, self.counts
        twin.kept, twin.total = self.kept, self.total + n
        twin._payload, twin._isize, twin._bytes = self._payload, self._isize, self._bytes
        return twin

    def beneath(self, item: Any, key: KeyFn, cap: int | None) -> bool:
        """Inserting ``item`` would only count it in ``total``: it is strictly worse
        than every kept item and the list has no room for it (``insert``'s rule)."""
        items = self.items
        if not items or not key(items[-1]) < key(item):  # keys define only <
            return False
        # Past the worst kept item: kept only while untruncated with room.
        return self.total > self.kept or (cap is not None and len(items) >= cap)

    @property
    def truncated(self) -> bool:
        """Some items of the group are not kept."""
        return self.total > self.kept

    def insert(self, item: Any, key: KeyFn, cap: int | None) -> None:
        """Count one more ``item``; keep it if it belongs among the best ``cap``."""
        items, counts = self.items, self.counts
        k = key(item)
        i = bisect_left(items, k, key=key)
        self.total += 1
        self._bytes = None
        if i < len(items) and key(items[i]) == k:
            c = counts[i]
            counts[i] = c + 1
            self.kept += 1
            if c >= _SMALL_INT and self._payload is not None:
                self._payload += value_size(c + 1) - value_size(c)
            return
        room = cap is None or len(items) < cap
        # Untruncated with room: every item is kept. Otherwise only items better than
        # the worst kept one may enter (unseen items are all worse than that one).
        if (room and self.total - 1 == self.kept) or i < len(items):
            items.insert(i, item)
            counts.insert(i, 1)  # a count of 1 owns no bytes (a cached small int)
            self.kept += 1
            if self._payload is not None:
                self._payload += self._isize(item)
            if cap is not None and len(items) > cap:
                gone, c = items.pop(), counts.pop()
                self.kept -= c
                if self._payload is not None:
                    self._payload -= self._isize(gone) + value_size(c)

    def delete(self, item: Any, key: KeyFn) -> None:
        """Count one less ``item`` (kept or unseen)."""
        items, counts = self.items, self.counts
        k = key(item)
        i = bisect_left(items, k, key=key)
        self.total -= 1
        self._bytes = None
        if i < len(items) and key(items[i]) == k:
            self.kept -= 1
            c = counts[i]
            counts[i] = c - 1
            if c > _SMALL_INT and self._payload is not None:
                self._payload += value_size(c - 1) - value_size(c)
            if c == 1:
                if self._payload is not None:
                    self._payload -= self._isize(items[i])
                del items[i]
                del counts[i]

    def best(self, n: int) -> list[Any]:
        """The first ``n`` kept items, repeated by multiplicity."""
        out: list[Any] = []
        for item, count in zip(self.items, self.counts, strict=True):
            out.extend([item] * min(count, n - len(out)))
            if len(out) >= n:
                break
        return out

    def size(self, item_size: Callable[[Any], int] = value_size) -> int:
        """Approximate bytes held (lists, items and counts). One instance is always
        sized with the same ``item_size`` (MIN/MAX values, or top-k rows)."""
        if self._bytes is not None:
            return self._bytes
        if self._payload is None:
            self._isize = item_size
            self._payload = (sum([item_size(x) for x in self.items])
                             + sum([value_size(c) for c in self.counts]))
        self._bytes = 64 + list_size(self.items) + list_size(self.counts) + self._payload
        return self._bytes

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Candidates) and self.items == other.items
                and self.counts == other.counts and self.total == other.total)

    __hash__ = None  # type: ignore[assignment]  # mutable: compared, never a dict key

    def __repr__(self) -> str:
        pairs = ", ".join(f"{x!r}×{c}" for x, c in zip(self.items, self.counts, strict=True))
        return f"Candidates([{pairs}], total={self.total})"


class Descending:
    """Sort key wrapper that reverses the order of any comparable value (e.g. strings)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return other.value < self.value

    def __gt__(self, other: Descending) -> bool:
        return other.value > self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def descending(v: Any) -> Any:
    """A key that sorts ``v`` in descending order (numbers negate; others are wrapped)."""
    if v.__class__ is int or v.__class__ is float or v.__class__ is bool:
        return -v
    return Descending(v)


def ascending(v: Any) -> Any:
    """Identity key, for symmetry with ``descending``."""
    return v
