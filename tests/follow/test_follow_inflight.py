"""Unit tests of the follower's pure logic around pipelined commits: InFlight settles
upstream commits in order and stops at the first refused one; Position maps our LSNs to
upstream positions, counting only durable commits (stand-in tickets: the real storage
path is exercised by the other tests of tests/follow)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from partialflow.server.errors import ResourceExhausted
from partialflow.server.follow.inflight import Entry, InFlight
from partialflow.server.follow.position import Position

NOW = datetime.now(timezone.utc)


class Ticket:
    """A write that becomes durable (or is refused) when the test says so."""

    def __init__(self, lsn: int) -> None:
        self.lsn = lsn
        self.done = threading.Event()
        self.error: BaseException | None = None

    def settle(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()

    def wait(self) -> int:
        assert self.done.wait(10)
        if self.error is not None:
            raise self.error
        return self.lsn


def _pipe(limit: int = 8) -> tuple[InFlight, list[tuple[int, int | None]], list[int]]:
    durable: list[tuple[int, int | None]] = []
    reordered: list[int] = []
    pipe = InFlight(limit, lambda e, lsn: durable.append((e.end, lsn)),
                    lambda e: reordered.append(e.end))
    return pipe, durable, reordered


def test_commits_settle_in_order_even_when_later_ones_are_durable_first() -> None:
    pipe, durable, _ = _pipe()
    tickets = [Ticket(lsn) for lsn in (10, 11, 12)]
    for i, t in enumerate(tickets):
        pipe.room()
        pipe.put(Entry(t, 100 + i, 1, NOW))
    pipe.room()
    pipe.put(Entry(None, 103, 0, NOW))  # an upstream commit with nothing for us
    tickets[2].settle()
    tickets[1].settle()
    assert durable == []  # the first is not durable yet: nothing counts
    tickets[0].settle()
    pipe.drain()
    assert durable == [(100, 10), (101, 11), (102, 12), (103, None)]
    pipe.close()


def test_a_refused_commit_stops_everything_after_it() -> None:
    pipe, durable, reordered = _pipe()
    tickets = [Ticket(lsn) for lsn in (10, 11, 12)]
    for i, t in enumerate(tickets):
        pipe.room()
        pipe.put(Entry(t, 100 + i, 1, NOW))
    tickets[0].settle()
    tickets[1].settle(ResourceExhausted("disk full"))
    tickets[2].settle(ResourceExhausted("disk full"))
    with pytest.raises(ResourceExhausted, match="disk full"):
        pipe.drain()
    assert durable == [(100, 10)] and reordered == []
    with pytest.raises(ResourceExhausted):
        pipe.room()  # nothing may be submitted after a refused commit
    pipe.close()


def test_a_commit_stored_after_a_refused_one_is_reported() -> None:
    pipe, durable, reordered = _pipe()
    first, second = Ticket(10), Ticket(10)  # storage handed the refused LSN on
    pipe.room()
    pipe.put(Entry(first, 100, 1, NOW))
    pipe.room()
    pipe.put(Entry(second, 101, 1, NOW))
    first.settle(ResourceExhausted("disk full"))
    second.settle()
    pipe.close()
    assert isinstance(pipe.error, ResourceExhausted)
    assert durable == [] and reordered == [101]


def test_room_blocks_at_the_limit() -> None:
    pipe, durable, _ = _pipe(limit=2)
    tickets = [Ticket(1), Ticket(2)]
    for i, t in enumerate(tickets):
        pipe.room()
        pipe.put(Entry(t, 100 + i, 1, NOW))
    entered = threading.Event()

    def third() -> None:
        pipe.room()
        entered.set()

    thread = threading.Thread(target=third)
    thread.start()
    assert not entered.wait(0.3)  # two in flight: the third waits
    tickets[0].settle()
    assert entered.wait(10)
    tickets[1].settle()
    thread.join()
    pipe.close()
    assert [end for end, _ in durable] == [100, 101]


def test_position_counts_durable_commits_and_maps_submitted_ones() -> None:
    pos = Position(applied=500, last_write_lsn=5)
    assert pos.upstream_at(5) == 500 and pos.upstream_at(4) is None
    pos.submitted(6, 600)
    pos.submitted(8, 800)
    # Not durable: a reader waiting for them waits; a read at 6 (delivered, its settling
    # not seen yet) is at 600, not at the last durable position.
    with pytest.raises(Exception, match="not applied within"):
        pos.wait_for(600, 0.05, lambda: "test")
    assert pos.upstream_at(6) == 600 and pos.upstream_at(7) == 600
    pos.durable(6, 600)
    assert pos.wait_for(600, 1, lambda: "test") == 6
    pos.durable(8, 800)
    pos.durable(None, 900)  # idle: the walsender's position
    assert pos.upstream_at(9) == 900 and pos.upstream_at(8) == 900
    assert pos.upstream_at(7) == 600
    # Refused writes leave the map (their LSNs are handed back).
    pos.submitted(9, 1000)
    pos.failed()
    assert pos.upstream_at(9) == 900


def test_position_wait_ends_when_cancelled() -> None:
    pos = Position(applied=None, last_write_lsn=0)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert pos.wait_for(10**12, 30, lambda: "test", cancel.is_set) == 0
    assert cancel.is_set()
