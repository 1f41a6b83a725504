"""A subscription stream as the client sees it: the events, and the iterator over them
(``Client.subscribe`` opens one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from partialflow.client.errors import error_from_rpc
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto.values import decode_rows, decode_values


@dataclass
class Snapshot:
    """The first event of a subscription: every key's rows (``rows[key]``) at ``lsn``."""

    rows: dict[tuple, list[tuple]]
    lsn: int
    columns: list[str] = field(default_factory=list)
    upstream_lsn: str = field(default="", repr=False)  # see Subscription.upstream_lsn


@dataclass
class Change:
    """Rows of ``key`` inserted and deleted (bags) at ``lsn``; every subscribed key is
    exact at ``lsn`` once all changes of that LSN are applied (they come together)."""

    key: tuple
    inserted: list[tuple]
    deleted: list[tuple]
    lsn: int
    upstream_lsn: str = field(default="", repr=False)


@dataclass
class Heartbeat:
    """Nothing changed: every subscribed key's rows as rebuilt are exact at ``lsn``."""

    lsn: int
    upstream_lsn: str = field(default="", repr=False)


@dataclass
class CaughtUp:
    """After a resume (``from_lsn``): the changes just before this brought every key from
    its rows at ``from_lsn`` to its rows at ``lsn`` (there may have been none)."""

    lsn: int
    columns: list[str] = field(default_factory=list)
    upstream_lsn: str = field(default="", repr=False)


SubscriptionEvent = Snapshot | Change | Heartbeat | CaughtUp


class Subscription:
    """An open Subscribe stream: iterate it for events; ``close()`` (or leaving a ``with``
    block, or dropping the iterator) cancels the stream. ``lsn`` is the last LSN at which
    every key's rows as rebuilt from the events are exact: the one to resume from."""

    def __init__(self, stream: Any, from_lsn: int | None = None) -> None:
        self._stream = stream
        self.lsn = from_lsn or 0  # a resumed stream's rows are exact at from_lsn until told more
        # On a server following a PostgreSQL: the upstream position ('X/Y') ``lsn`` is exact
        # at; every event carries its own as ``upstream_lsn`` too.
        self.upstream_lsn = ""
        self.columns: list[str] = []

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> SubscriptionEvent:
        return next(self._events)

    @property
    def _events(self) -> Any:
        gen = self.__dict__.get("_gen")
        if gen is None:
            gen = self.__dict__["_gen"] = self._run()
        return gen

    def _run(self) -> Any:
        try:
            for message in self._stream:
                if message.columns:
                    self.columns = list(message.columns)
                kind, lsn, up = message.kind, message.lsn, message.upstream_lsn
                if kind == pb.SubscribeEvent.SNAPSHOT:
                    rows = {decode_values(c.key.values, "key"): decode_rows(c.inserted, "inserted")
                            for c in message.changes}
                    self.lsn, self.upstream_lsn = lsn, up
                    yield Snapshot(rows, lsn, self.columns, up)
                    continue
                if kind == pb.SubscribeEvent.HEARTBEAT:
                    self.lsn, self.upstream_lsn = lsn, up
                    yield Heartbeat(lsn, up)
                    continue
                changes = [Change(decode_values(c.key.values, "key"),
                                  decode_rows(c.inserted, "inserted"),
                                  decode_rows(c.deleted, "deleted"), lsn, up)
                           for c in message.changes]
                # Set before yielding: a batch is applied as a whole.
                self.lsn, self.upstream_lsn = lsn, up
                yield from changes
                if message.columns:  # the first batch of a resumed stream
                    yield CaughtUp(lsn, self.columns, up)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            error = error_from_rpc(err)
            resume = _resume_lsn(err)
            error.resume_lsn = resume if resume is not None else self.lsn  # type: ignore[attr-defined]
            raise error from None
        finally:
            self._stream.cancel()

    _closed = False

    def close(self) -> None:
        """Cancel the stream (the server unpins the keys)."""
        self._closed = True
        self._stream.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stream.cancel()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _resume_lsn(err: Any) -> int | None:
    try:
        for k, v in err.trailing_metadata() or ():
            if k == "resume-lsn":
                return int(v)
    except Exception:  # noqa: BLE001 - not a call error
        return None
    return None
