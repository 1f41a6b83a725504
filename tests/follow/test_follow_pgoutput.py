"""The pgoutput decoder against the layouts of PostgreSQL's "Logical Replication Message
Formats" (protocol version 1), messages built byte by byte here; LSN text forms; the
netting of one transaction's changes. Pure logic: no server."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pytest

from partialflow.server.errors import InvalidArgument
from partialflow.server.follow import format_lsn, parse_lsn
from partialflow.server.follow.changes import Inconsistent, Shadow, TableTxn, multiset_diff
from partialflow.server.follow.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    DecodeError,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    Relation,
    Truncate,
    Type,
    Update,
    decode,
)
from partialflow.server.follow.typemap import Refused, RowDecoder, map_table

# 2025-01-01 00:00 UTC in microseconds since 2000-01-01 (PostgreSQL's epoch).
T0 = (9_132 * 86_400) * 1_000_000


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tup(*cols: bytes | str | None) -> bytes:
    out = struct.pack(">h", len(cols))
    for c in cols:
        if c is None:
            out += b"n"
        elif c == "u":
            out += b"u"
        else:
            assert isinstance(c, bytes)
            out += b"t" + struct.pack(">i", len(c)) + c
    return out


def test_begin_commit_origin():
    assert decode(b"B" + struct.pack(">QqI", 0x1_0000_00A0, T0, 742)) == Begin(
        0x1_0000_00A0, datetime(2025, 1, 1, tzinfo=timezone.utc), 742)
    assert decode(b"C" + struct.pack(">bQQq", 0, 0x10, 0x38, T0)) == Commit(
        0, 0x10, 0x38, datetime(2025, 1, 1, tzinfo=timezone.utc))
    assert decode(b"O" + struct.pack(">Q", 99) + s("node_a")) == Origin(99, "node_a")


def test_relation_and_type():
    body = (struct.pack(">I", 16384) + s("public") + s("acct") + b"d" + struct.pack(">h", 2)
            + struct.pack(">b", 1) + s("id") + struct.pack(">Ii", 20, -1)
            + struct.pack(">b", 0) + s("owner") + struct.pack(">Ii", 25, -1))
    rel = decode(b"R" + body)
    assert isinstance(rel, Relation)
    assert (rel.oid, rel.namespace, rel.name, rel.replica_identity) == (16384, "public",
                                                                        "acct", "d")
    assert [(c.is_key, c.name, c.type_oid) for c in rel.columns] == [(True, "id", 20),
                                                                     (False, "owner", 25)]
    assert decode(b"Y" + struct.pack(">I", 70000) + s("public") + s("mood")) == Type(
        70000, "public", "mood")


def test_insert_update_delete_truncate_message():
    assert decode(b"I" + struct.pack(">I", 7) + b"N" + tup(b"1", None, b"x")) == Insert(
        7, (b"1", None, b"x"))
    # No old tuple (key unchanged), an unchanged TOAST value.
    assert decode(b"U" + struct.pack(">I", 7) + b"N" + tup(b"1", "u")) == Update(
        7, (b"1", UNCHANGED))
    # Key changed ('K': key columns only) and REPLICA IDENTITY FULL ('O').
    for kind in ("K", "O"):
        msg = decode(b"U" + struct.pack(">I", 7) + kind.encode() + tup(b"1", None) + b"N"
                     + tup(b"2", b"y"))
        assert msg == Update(7, (b"2", b"y"), (b"1", None), kind)
    assert decode(b"D" + struct.pack(">I", 7) + b"K" + tup(b"1", None)) == Delete(
        7, (b"1", None), "K")
    assert decode(b"T" + struct.pack(">ibII", 2, 3, 7, 8)) == Truncate((7, 8), True, True)
    assert decode(b"M" + struct.pack(">bQ", 1, 0x40) + s("app") + struct.pack(">i", 2)
                  + b"hi") == LogicalMessage(True, 0x40, "app", b"hi")


@pytest.mark.parametrize("raw", [
    b"", b"Z", b"B" + b"\0" * 5, b"I" + struct.pack(">I", 7) + b"X" + tup(b"1"),
    b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 9)
    + b"ab", b"C" + struct.pack(">bQQq", 0, 1, 2, 3) + b"extra",
    b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"q",
])
def test_malformed_messages_refused(raw):
    with pytest.raises(DecodeError):
        decode(raw)


def test_lsn_text_form():
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    assert format_lsn(0x16_B374D848) == "16/B374D848"
    assert format_lsn(parse_lsn("0/0")) == "0/0"
    for bad in ("", "16", "x/1", "1/2/3", "123456789/0"):
        with pytest.raises(InvalidArgument, match="pg_lsn"):
            parse_lsn(bad)


def _table(pk: bool = True, replident: str = "d"):
    cols = [("id", 20, "bigint"), ("body", 25, "text"), ("n", 23, "integer")]
    return map_table("t", replident, ["id"] if pk else [], cols)


def test_type_mapping_refuses_what_does_not_map():
    t = _table()
    assert [(c.name, c.type, c.primary_key) for c in t.schema.columns] == [
        ("id", "BIGINT", True), ("body", "TEXT", False), ("n", "BIGINT", False)]
    with pytest.raises(Refused, match="numeric"):
        map_table("t", "d", ["id"], [("id", 20, "bigint"), ("x", 1700, "numeric")])
    with pytest.raises(Refused, match="REPLICA IDENTITY FULL"):
        _table(pk=False)
    assert RowDecoder(t)([b"5", b"abc", None]) == [5, "abc", None]


def test_one_transaction_nets_to_deletes_and_inserts():
    t = _table()
    shadow = Shadow(t, [(1, "a", 1), (2, "b", 2)])
    txn = TableTxn(t, shadow, list)
    txn.insert([3, "c", 3])
    txn.update([3, "c", 4], None, False)  # inserted then updated: one insert
    txn.update([1, UNCHANGED, 9], None, False)  # TOAST value kept from the row here
    txn.delete([2, None, None], False)
    deletes, inserts = txn.changes()
    assert sorted(deletes) == [(1, "a", 1), (2, "b", 2)]
    assert sorted(inserts) == [(1, "a", 9), (3, "c", 4)]
    txn.commit_shadow()
    assert shadow.rows == {(1,): (1, "a", 9), (3,): (3, "c", 4)}
    with pytest.raises(Inconsistent):
        TableTxn(t, shadow, list).delete([2, None, None], False)


def test_keyless_table_under_replica_identity_full():
    t = _table(pk=False, replident="f")
    txn = TableTxn(t, None, lambda: [(1, "a", 1), (1, "a", 1)])
    txn.update([1, UNCHANGED, 2], [1, "a", 1], True)
    assert txn.changes() == ([(1, "a", 1)], [(1, "a", 2)])
    txn.truncate()
    deletes, inserts = txn.changes()
    assert sorted(deletes) == [(1, "a", 1), (1, "a", 1)] and inserts == []
    assert multiset_diff([(1,), (1,), (2,)], [(1,), (3,)]) == ([(1,), (2,)], [(3,)])
