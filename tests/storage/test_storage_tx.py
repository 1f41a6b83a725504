"""Transactions in storage: write_many over several tables at one LSN, checked as a whole,
durable as one unit (a torn transaction is absent after recovery), upstream LSN kept."""

from __future__ import annotations

import errno
from collections import Counter

import pytest
from conftest import BAG, KEYED

from partialflow.server.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from partialflow.server.storage import Storage, TableChange, TxRecord, WriteRecord
from partialflow.server.storage import wal as wal_mod
from partialflow.server.storage.wal import read_wal


def rows_at(st: Storage, table: str, lsn: int | None = None) -> Counter:
    return Counter(st.query(f"SELECT * FROM {table}", as_of=lsn)[1])


def test_one_lsn_for_all_tables_and_one_record(store: Storage) -> None:
    store.create_table(BAG)
    store.create_table(KEYED)
    seen: list = []
    store.subscribe(seen.append)
    before = store.write("u", [(1, "a")])
    lsn = store.write_many([
        TableChange("t", inserts=[(1, "x", 1.0, True)]),
        TableChange("u", inserts=[(2, "b")], deletes=[(1, "a")]),
    ])
    assert lsn == before + 1 == store.last_lsn
    assert seen[-1] == TxRecord(lsn, (
        WriteRecord(lsn, "t", ((1, "x", 1.0, True),), (1,)),
        WriteRecord(lsn, "u", ((1, "a"), (2, "b")), (-1, 1)),
    ))
    # Both tables change at that LSN and at no other.
    assert rows_at(store, "t", before) == Counter() and rows_at(store, "u", before) == {(1, "a"): 1}
    assert rows_at(store, "t", lsn) == {(1, "x", 1.0, True): 1}
    assert rows_at(store, "u", lsn) == {(2, "b"): 1}
    # A one-table write_many is a write: the same record kind.
    one = store.write_many([TableChange("t", inserts=[(2, "y", 2.0, False)])])
    assert seen[-1] == WriteRecord(one, "t", ((2, "y", 2.0, False),), (1,))


def test_changes_are_checked_in_order_against_each_other(store: Storage) -> None:
    store.create_table(KEYED)
    store.create_table(BAG)
    store.write("u", [(1, "a")])
    # Delete a key and insert it again; insert a row and delete it again: net effects.
    lsn = store.write_many([
        TableChange("u", deletes=[(1, "a")]),
        TableChange("t", inserts=[(5, "z", 0.0, None)]),
        TableChange("u", inserts=[(1, "A"), (3, "c")]),
        TableChange("u", deletes=[(3, "c")]),
        TableChange("t", deletes=[(5, "z", 0.0, None)], inserts=[(6, "w", 1.0, True)]),
    ])
    assert rows_at(store, "u", lsn) == {(1, "A"): 1}
    assert rows_at(store, "t", lsn) == {(6, "w", 1.0, True): 1}
    # The index saw the net effect: key 3 is free, key 1 held by (1, "A").
    store.write("u", [(3, "again")])
    with pytest.raises(AlreadyExists):
        store.write("u", [(1, "dup")])
    with pytest.raises(NotFound):
        store.write("t", deletes=[(5, "z", 0.0, None)])


@pytest.mark.parametrize("changes, error, match", [
    # a key inserted by two changes of one transaction
    ([TableChange("t", inserts=[(9, "q", 0.0, True)]),
      TableChange("u", inserts=[(7, "a")]), TableChange("u", inserts=[(7, "b")])],
     AlreadyExists, r"change 2: table 'u' row 0: primary key \(id\)=\(7\) already exists"),
    # a delete of a row an earlier change deleted already
    ([TableChange("u", deletes=[(1, "a")]), TableChange("u", deletes=[(1, "a")])],
     NotFound, r"change 1: table 'u' delete row 0: row \(1, 'a'\) is not in the table"),
    # a bad value in the second table: names change, table, row and column
    ([TableChange("u", inserts=[(8, "h")]), TableChange("t", inserts=[(1, "x", "NaN?", True)])],
     InvalidArgument, r"change 1: table 't' row 0.*column 'x'"),
    ([TableChange("u", inserts=[(8, "h")]), TableChange("nope", inserts=[(1,)])],
     NotFound, r"unknown table 'nope'"),
    ([("u", [(8, "h")])], InvalidArgument, r"change 0: expected a TableChange"),
])
def test_a_refused_transaction_writes_nothing(
    store: Storage, changes: list, error: type, match: str
) -> None:
    store.create_table(KEYED)
    store.create_table(BAG)
    lsn = store.write("u", [(1, "a")])
    with pytest.raises(error, match=match):
        store.write_many(changes)
    assert store.last_lsn == lsn
    assert rows_at(store, "u") == {(1, "a"): 1} and rows_at(store, "t") == Counter()
    assert store.write("u", [(8, "h"), (7, "g")]) == lsn + 1  # no LSN consumed, no key taken


def test_upstream_lsn_survives_crash_and_flush(make_store) -> None:
    st = make_store()
    st.create_table(KEYED)
    st.create_table(BAG)
    assert st.upstream_lsn is None
    st.write_many([TableChange("u", inserts=[(1, "a")])], upstream_lsn=(5 << 32) | 16)
    st.write("t", [(1, "x", 1.0, True)])  # a write without one keeps the largest
    assert st.upstream_lsn == (5 << 32) | 16
    st.flush()
    empty = st.write_many([], upstream_lsn=(5 << 32) | 40)  # an empty upstream transaction
    assert empty == st.last_lsn and st.upstream_lsn == (5 << 32) | 40
    st._halt()
    st2 = make_store()
    assert st2.upstream_lsn == (5 << 32) | 40 and st2.last_lsn == empty  # from the log
    st2.flush()
    st2.close()
    st3 = make_store()
    assert st3.upstream_lsn == (5 << 32) | 40  # from the manifest
    with pytest.raises(InvalidArgument, match="upstream_lsn"):
        st3.write_many([], upstream_lsn=-1)


def test_log_records_give_transactions_whole(store: Storage) -> None:
    store.create_table(KEYED)
    store.create_table(BAG)
    seen: list = []
    store.subscribe(seen.append)
    a = store.write_many([TableChange("u", inserts=[(1, "a")]),
                          TableChange("t", inserts=[(1, "x", 1.0, True)])], upstream_lsn=7)
    store.write_many([])
    store.write("u", [(2, "b")])
    assert list(store.log_records(a - 1, store.last_lsn)) == seen[-3:]
    assert seen[-2] == TxRecord(a + 1, ())


@pytest.mark.parametrize("cut", ["inside the second frame", "after the first frame"])
def test_torn_transaction_is_absent_after_recovery(make_store, cut: str) -> None:
    """A crash in the middle of a transaction's log write: whatever part of it reached the
    disk, recovery drops all of it (it was never acknowledged) and keeps what came before."""
    st = make_store()
    st.create_table(KEYED)
    st.create_table(BAG)
    before = st.write("u", [(1, "a")])
    big = [(i, "x" * 50, float(i), True) for i in range(2000)]
    tx = st.write_many([TableChange("u", inserts=[(2, "b")], deletes=[(1, "a")]),
                        TableChange("t", inserts=big)])
    st._halt()
    wal = max((st.data_dir / "wal").glob("*.log"))
    frames = [e for e in read_wal(st.data_dir / "wal", repair=False) if e.lsn == tx]
    assert [f.more for f in frames] == [True, False]
    data = wal.read_bytes()
    start = data.index(bytes(frames[0].body)) - 24  # frame header + payload header
    second = data.index(bytes(frames[1].body))
    end = second if cut == "after the first frame" else second + len(frames[1].body) // 2
    wal.write_bytes(data[:end])
    st2 = make_store()
    assert st2.last_lsn == before
    assert wal.stat().st_size == start  # the whole transaction cut off, not just its tail
    assert rows_at(st2, "u") == {(1, "a"): 1} and rows_at(st2, "t") == Counter()
    # The index agrees: key 2 is free, (1, "a") still there; LSNs continue after `before`.
    assert st2.write_many([TableChange("u", inserts=[(2, "b2")], deletes=[(1, "a")])]) == tx


def test_a_write_submitted_after_a_refused_one_is_refused_not_stored_in_its_place(
        make_store, monkeypatch):
    """The follower submits upstream commits in order, each ``after`` the one before. When
    the log refuses one (here: out of space) its LSN is handed back; a write that must follow
    it is refused too, so no later commit is ever stored where the refused one should be.
    A write that follows nothing takes the LSN as before."""
    st = make_store()
    st.create_table(KEYED)
    real = wal_mod.Wal.append
    full = {"left": 1}

    def append(self, data, next_lsn):
        if full["left"]:
            full["left"] -= 1
            raise wal_mod.WalFull(errno.ENOSPC, "No space left on device")
        real(self, data, next_lsn)

    monkeypatch.setattr(wal_mod.Wal, "append", append)
    first = st.submit_many([TableChange("u", [(1, "a")], [])])
    with pytest.raises(ResourceExhausted):
        first.wait()
    with pytest.raises(FailedPrecondition, match=f"LSN {first.lsn}.*refused"):
        st.submit_many([TableChange("u", [(2, "b")], [])], after=first)
    ok = st.submit_many([TableChange("u", [(3, "c")], [])])
    assert ok.wait() == first.lsn  # the handed-back LSN, taken by a write that follows nothing
    chained = st.submit_many([TableChange("u", [(4, "d")], [])], after=ok)
    assert chained.wait() == ok.lsn + 1
    assert sorted(st.query("SELECT * FROM u")[1]) == [(3, "c"), (4, "d")]


def test_a_transaction_that_cancels_out_hides_no_later_write(store: Storage) -> None:
    """Changes to a table that cancel out leave nothing to read, and the writes after them
    are all read before a flush (they once were lost: an empty batch among the unflushed
    rows made Spark drop every row after it)."""
    store.create_table(KEYED)
    store.write("u", [(1, "a")])
    store.write_many([TableChange("u", inserts=[(2, "b")]), TableChange("u", deletes=[(2, "b")])])
    lsn = store.write("u", [(3, "c")])
    store.write_many([TableChange("u", deletes=[(1, "a")]), TableChange("u", inserts=[(1, "a")])])
    last = store.write("u", [(4, "d")], [(3, "c")])
    assert store.stats()["flushed_lsn"] == 0  # every write above is still unflushed
    assert rows_at(store, "u", lsn) == {(1, "a"): 1, (3, "c"): 1}
    assert rows_at(store, "u") == {(1, "a"): 1, (4, "d"): 1}
    store.flush()
    assert rows_at(store, "u", lsn) == {(1, "a"): 1, (3, "c"): 1}
    assert rows_at(store, "u", last) == {(1, "a"): 1, (4, "d"): 1}


def test_spark_frame_keeps_the_rows_after_an_empty_batch(spark) -> None:
    """Arrow tables reach Spark through ``spark_frame``: PySpark's own conversion drops
    every row after an empty record batch."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from partialflow.server.storage.segments import spark_frame

    schema = pa.schema([("k", pa.int64())])
    sizes = [2, 0, 1, 0, 3]
    batches, start = [], 0
    for n in sizes:
        batches.append(pa.RecordBatch.from_arrays([pa.array(range(start, start + n),
                                                             pa.int64())], schema=schema))
        start += n
    table = pa.Table.from_batches(batches, schema=schema)
    assert [b.num_rows for b in table.to_batches()] == sizes
    df = spark_frame(spark, table, StructType([StructField("k", LongType())]))
    assert sorted(r.k for r in df.collect()) == list(range(sum(sizes)))
    empty = spark_frame(spark, pa.Table.from_batches([batches[1]], schema=schema),
                        StructType([StructField("k", LongType())]))
    assert empty.collect() == []
