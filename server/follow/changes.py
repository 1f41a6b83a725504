"""One upstream transaction, gathered message by message into net changes per table.

Our writes delete whole rows, but pgoutput names an updated or deleted row by its key only
(unless REPLICA IDENTITY FULL), and leaves unchanged TOAST values out of an update. So the
follower keeps every followed keyed table's rows by key (``Shadow``): the old row of an
update or delete comes from there, and so do the unchanged values. Tables without a key are
followed only under REPLICA IDENTITY FULL, whose old tuples carry every value.

Changes are netted per key (or per row, for tables without a key): a row inserted and then
updated in one transaction is one insert of its last version, as our write applies deletes
before inserts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from partialflow.server.follow.pgoutput import Unchanged
from partialflow.server.follow.typemap import UpstreamTable

Row = tuple[Any, ...]
Key = tuple[Any, ...]


class Inconsistent(Exception):
    """A change that names a row we do not have: the copy here no longer matches upstream."""


class Shadow:
    """The current rows of one keyed followed table, by key (what our storage holds)."""

    def __init__(self, table: UpstreamTable, rows: Iterable[Row] = ()) -> None:
        self.key_idx = table.key
        self.rows: dict[Key, Row] = {self.key(r): r for r in rows}

    def key(self, row: Sequence[Any]) -> Key:
        return tuple(row[i] for i in self.key_idx)


def _fill(new: list[Any], old: Row | None, table: str) -> Row:
    """The new row with unchanged TOAST values taken from the old one."""
    if any(isinstance(v, Unchanged) for v in new):
        if old is None:
            raise Inconsistent(f"{table}: an update left a TOAST value out and no old row is known")
        new = [o if isinstance(v, Unchanged) else v for v, o in zip(new, old, strict=True)]
    return tuple(new)


class TableTxn:
    """The net effect of one transaction on one table."""

    def __init__(self, table: UpstreamTable, shadow: Shadow | None,
                 current_rows: Callable[[], list[Row]]) -> None:
        self.table = table
        self.shadow = shadow
        self._current_rows = current_rows
        self.overlay: dict[Key, Row | None] = {}  # keyed: final version per touched key
        self.net: Counter[Row] = Counter()  # keyless: copies added (+) or removed (-)
        self.messages = 0

    def _get(self, key: Key) -> Row | None:
        if key in self.overlay:
            return self.overlay[key]
        assert self.shadow is not None
        return self.shadow.rows.get(key)

    def insert(self, new: list[Any]) -> None:
        self.messages += 1
        row = _fill(new, None, self.table.name)
        if self.shadow is None:
            self.net[row] += 1
        else:
            self.overlay[self.shadow.key(row)] = row

    def update(self, new: list[Any], old: list[Any] | None, full_old: bool) -> None:
        self.messages += 1
        name = self.table.name
        if self.shadow is None:
            if old is None or not full_old:
                raise Inconsistent(f"{name}: an update without its old row (not REPLICA "
                                   "IDENTITY FULL upstream)")
            old_row = tuple(old)
            self.net[old_row] -= 1
            self.net[_fill(new, old_row, name)] += 1
            return
        old_key = self.shadow.key(old) if old is not None else self.shadow.key(new)
        before = self._get(old_key)
        if before is None:
            raise Inconsistent(f"{name}: an update of key {old_key!r}, which is not here")
        row = _fill(new, before, name)
        self.overlay[old_key] = None
        self.overlay[self.shadow.key(row)] = row

    def delete(self, old: list[Any], full_old: bool) -> None:
        self.messages += 1
        name = self.table.name
        if self.shadow is None:
            if not full_old:
                raise Inconsistent(f"{name}: a delete without its old row")
            self.net[tuple(old)] -= 1
            return
        key = self.shadow.key(old)
        if self._get(key) is None:
            raise Inconsistent(f"{name}: a delete of key {key!r}, which is not here")
        self.overlay[key] = None

    def truncate(self) -> None:
        self.messages += 1
        if self.shadow is None:
            have = Counter(self._current_rows())
            for row in set(have) | set(self.net):
                self.net[row] = -have[row]
            return
        for key in list(self.shadow.rows) + list(self.overlay):
            self.overlay[key] = None

    def changes(self) -> tuple[list[Row], list[Row]]:
        """(deletes, inserts) against what storage holds before the transaction."""
        deletes: list[Row] = []
        inserts: list[Row] = []
        if self.shadow is None:
            for row, n in self.net.items():
                if n < 0:
                    deletes.extend([row] * -n)
                elif n > 0:
                    inserts.extend([row] * n)
            return deletes, inserts
        for key, final in self.overlay.items():
            before = self.shadow.rows.get(key)
            if before == final:
                continue
            if before is not None:
                deletes.append(before)
            if final is not None:
                inserts.append(final)
        return deletes, inserts

    def commit_shadow(self) -> None:
        """Once the write is durable: the shadow takes the transaction's rows."""
        if self.shadow is None:
            return
        for key, row in self.overlay.items():
            if row is None:
                self.shadow.rows.pop(key, None)
            else:
                self.shadow.rows[key] = row


def multiset_diff(current: Iterable[Row], wanted: Iterable[Row]) -> tuple[list[Row], list[Row]]:
    """(deletes, inserts) that turn the rows ``current`` into ``wanted``: a resnapshot
    writes only what changed, so views over the table see a plain update."""
    have, want = Counter(current), Counter(wanted)
    deletes = list((have - want).elements())
    inserts = list((want - have).elements())
    return deletes, inserts
