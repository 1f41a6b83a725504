"""``Client.transaction()``: changes to several tables sent as one write.

Nothing goes to the server until the ``with`` block ends without an exception: then every
change travels in one ``Transact`` call and is applied at one LSN, all or nothing (the
server checks the whole transaction; any error refuses all of it and raises here). An
exception inside the block sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from partialflow.client.errors import FailedPrecondition, InvalidArgument
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto.values import add_rows, fill_batch


def add_change_rows(rows_field: Any, batch: pb.RowBatch, rows: Iterable[Sequence[Any]]) -> None:
    """Rows into a write request: as a columnar batch when they are rectangular (about
    ten times cheaper on both ends), else as Row messages so the server names the bad one."""
    rows = rows if isinstance(rows, list) else list(rows)
    if rows and not fill_batch(batch, rows):
        add_rows(rows_field, rows)


class Transaction:
    """Changes to any tables, in order, sent as one write on ``commit()`` (or on leaving
    the ``with`` block). ``lsn`` is the transaction's LSN once committed."""

    def __init__(self, send: Callable[[pb.TransactRequest], int]) -> None:
        self._send = send
        self._request = pb.TransactRequest()
        self._state = "open"  # open -> committed | rolled back
        self.lsn: int | None = None

    def write(self, table: str, inserts: Iterable[Sequence[Any]] = (),
              deletes: Iterable[Sequence[Any]] = ()) -> None:
        """Add one change: ``table``'s ``deletes`` then its ``inserts``."""
        self._check_open()
        change = self._request.changes.add(table=table)
        try:
            add_change_rows(change.deletes, change.delete_batch, deletes)
            add_change_rows(change.inserts, change.insert_batch, inserts)
        except (TypeError, ValueError) as err:
            del self._request.changes[-1]
            raise InvalidArgument(f"table {table}: {err}") from None

    def insert(self, table: str, rows: Iterable[Sequence[Any]]) -> None:
        self.write(table, inserts=rows)

    def delete(self, table: str, rows: Iterable[Sequence[Any]]) -> None:
        """Delete one occurrence of each row (the server refuses the transaction if one
        is not there when it commits, after this transaction's earlier changes)."""
        self.write(table, deletes=rows)

    def update(self, table: str, old_rows: Sequence[Sequence[Any]],
               new_rows: Sequence[Sequence[Any]]) -> None:
        """Replace ``old_rows[i]`` by ``new_rows[i]``."""
        old_rows, new_rows = list(old_rows), list(new_rows)
        if len(old_rows) != len(new_rows):
            raise InvalidArgument(
                f"update of {table}: {len(old_rows)} old rows but {len(new_rows)} new rows"
            )
        self.write(table, inserts=new_rows, deletes=old_rows)

    def commit(self) -> int:
        """Send every change as one write; returns (and sets ``lsn`` to) its LSN."""
        self._check_open()
        self._state = "committed"
        self.lsn = self._send(self._request)
        return self.lsn

    def rollback(self) -> None:
        """Forget the changes; nothing was sent."""
        self._check_open()
        self._state = "rolled back"

    def _check_open(self) -> None:
        if self._state != "open":
            raise FailedPrecondition(f"the transaction is {self._state}")

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._state != "open":
            return
        if kind is not None:
            self._state = "rolled back"  # nothing was sent
            return
        self.commit()
