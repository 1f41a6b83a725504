"""Malformed requests on the raw wire (no Python client in between), as any gRPC client
could send them: each is refused with the right status and a message naming the field,
row and column; nothing is written and no LSN is used; the server keeps serving."""

from __future__ import annotations

import math
import struct
import time

import grpc
import pytest
from google.protobuf import json_format

from partialflow.client import InvalidArgument, OutOfRange
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc

C = pb.Column
V = pb.Value
TABLE = "wv_people"  # (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE)
PEOPLE = [(1, "ann", 1.0), (2, "bob", None)]  # its rows, all along: every write is refused


@pytest.fixture(scope="module")
def db(server):
    with server.client(timeout=60) as client:
        client.execute(f"CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE)")
        client.execute("CREATE TABLE wv_bag (x BIGINT, score DOUBLE)")
        client.execute(f"CREATE VIEW wv_by_id AS SELECT id, name FROM {TABLE} WHERE id = ?")
        client.insert(TABLE, PEOPLE)
        yield client


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.PartialflowStub(channel)


def _people(db) -> list[tuple]:
    return sorted(db.query(f"SELECT id, name, score FROM {TABLE}").rows)


class Unchanged:
    """Asserts that the block wrote nothing: same last LSN, same rows, still serving."""

    def __init__(self, db, stub) -> None:
        self.db, self.stub = db, stub

    def __enter__(self) -> Unchanged:
        self.lsn = self.db.stats()["lsn"]
        self.rows = PEOPLE  # no test writes to it (a Spark query less per test)
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert self.db.stats()["lsn"] == self.lsn, "an LSN was used"
            assert _people(self.db) == self.rows
            self.stub.Ping(pb.PingRequest(), timeout=5)


def refused(call, request, code=grpc.StatusCode.INVALID_ARGUMENT, timeout=10) -> str:
    """Make the call, expect it to fail with ``code``; returns the details."""
    with pytest.raises(grpc.RpcError) as info:
        result = call(request, timeout=timeout)
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)  # a stream: its error comes while reading
    assert info.value.code() == code, info.value.details()
    return info.value.details()


def batch(num_rows: int, *columns: pb.Column) -> pb.RowBatch:
    return pb.RowBatch(num_rows=num_rows, columns=list(columns))


def ids(*v: int) -> pb.Column:
    return C(kind=C.INT, ints=list(v))


def names(*v: str) -> pb.Column:
    return C(kind=C.STRING, strings=list(v))


def scores(*v: float) -> pb.Column:
    return C(kind=C.DOUBLE, doubles=list(v))


# Each case: the insert_batch and the words the message must contain.
BAD_BATCHES = {
    "kind-unset-values-in-strings": (
        batch(2, ids(10, 11), C(strings=["x", "y"]), scores(1.0, 2.0)),
        ["insert_batch.columns[1]", "MIXED", "strings"],
    ),
    "kind-unset-values-in-ints": (
        batch(2, C(ints=[10, 11]), names("x", "y"), scores(1.0, 2.0)),
        ["insert_batch.columns[0]", "MIXED", "ints"],
    ),
    "mixed-one-value-for-two-rows": (
        batch(2, ids(10, 11), C(kind=C.MIXED, values=[V(string_value="x")]), scores(1.0, 2.0)),
        ["insert_batch.columns[1]: 1 value(s) for 2 rows"],
    ),
    "typed-too-many-values-plus-nulls": (
        batch(2, ids(10, 11), names("x", "y"), C(kind=C.DOUBLE, doubles=[1, 2, 3], nulls=[0])),
        ["insert_batch.columns[2]: 3 value(s) and 1 null(s) for 2 rows"],
    ),
    "typed-too-few-values-plus-nulls": (
        batch(3, ids(10, 11, 12), names("x", "y", "z"), C(kind=C.DOUBLE, doubles=[1], nulls=[0])),
        ["insert_batch.columns[2]: 1 value(s) and 1 null(s) for 3 rows"],
    ),
    "typed-too-few-values": (
        batch(2, ids(10), names("x", "y"), scores(1.0, 2.0)),
        ["insert_batch.columns[0]: 1 value(s) for 2 rows"],
    ),
    "nulls-out-of-range": (
        batch(2, ids(10, 11), names("x", "y"), C(kind=C.DOUBLE, doubles=[1.0], nulls=[5])),
        ["insert_batch.columns[2].nulls[0]", "row 5", "out of range"],
    ),
    "duplicate-nulls": (
        batch(3, ids(10, 11, 12), names("x", "y", "z"),
              C(kind=C.DOUBLE, doubles=[1.0], nulls=[1, 1])),
        ["insert_batch.columns[2].nulls[1]", "row 1", "twice"],
    ),
    "typed-kind-values-in-another-list": (
        batch(2, ids(10, 11), C(kind=C.STRING, ints=[1, 2]), scores(1.0, 2.0)),
        ["insert_batch.columns[1]", "STRING", "ints"],
    ),
    "typed-kind-plus-values": (
        batch(1, ids(10), C(kind=C.STRING, strings=["x"], values=[V(string_value="x")]), scores(1)),
        ["insert_batch.columns[1]", "values"],
    ),
    "mixed-with-nulls": (
        batch(1, ids(10), C(values=[V(string_value="x")], nulls=[0]), scores(1.0)),
        ["insert_batch.columns[1]", "nulls"],
    ),
    "unknown-kind": (
        batch(1, ids(10), C(kind=9, strings=["x"]), scores(1.0)),
        ["insert_batch.columns[1]", "unknown kind 9"],
    ),
    "unset-value-in-mixed-column": (
        batch(2, ids(10, 11), C(values=[V(string_value="x"), V()]), scores(1.0, 2.0)),
        ["insert_batch.columns[1].values[1]", "no kind set"],
    ),
    "rows-but-no-columns": (
        batch(4_000_000_000),
        ["insert_batch", "num_rows is 4000000000", "no columns"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_a_malformed_batch_is_refused_naming_the_column(db, stub, case):
    bad, words = BAD_BATCHES[case]
    with Unchanged(db, stub):
        message = refused(stub.Write, pb.WriteRequest(table=TABLE, insert_batch=bad))
        for word in words:
            assert word in message, message
        # The same next to good Row messages: the whole write is refused.
        good = pb.Row(values=[V(int_value=20), V(string_value="ok"), V(double_value=1.0)])
        refused(stub.Write, pb.WriteRequest(table=TABLE, inserts=[good], insert_batch=bad))


def test_a_malformed_delete_batch_is_refused(db, stub):
    with Unchanged(db, stub):
        bad = batch(1, ids(1), C(strings=["ann"]), scores(1.0))
        message = refused(stub.Write, pb.WriteRequest(table=TABLE, delete_batch=bad))
        assert "delete_batch.columns[1]" in message


def _row(*values: pb.Value) -> pb.Row:
    return pb.Row(values=list(values))


def test_an_unset_value_in_a_row_is_refused(db, stub):
    good = _row(V(int_value=30), V(string_value="x"), V(double_value=1.0))
    bad = _row(V(int_value=31), V(), V(double_value=1.0))
    with Unchanged(db, stub):
        message = refused(stub.Write, pb.WriteRequest(table=TABLE, inserts=[good, good, bad]))
        assert message.startswith("inserts[2].values[1]: Value has no kind set"), message
        assert "null_value" in message
        message = refused(stub.Write, pb.WriteRequest(table=TABLE, deletes=[bad]))
        assert message.startswith("deletes[0].values[1]:"), message


def test_a_misspelled_value_field_is_an_unset_value(db, stub):
    # What a JSON or reflection client that drops unknown names sends for {"int_val": 7}.
    row = json_format.ParseDict(
        {"values": [{"int_val": 7}, {"string_value": "x"}, {"double_value": 1}]},
        pb.Row(),
        ignore_unknown_fields=True,
    )
    # And a binary one: field 9 (unknown to this proto) holding 7.
    unknown = pb.Row.FromString(
        _row(V(int_value=8), V(string_value="x"), V(double_value=1)).SerializeToString()
    )
    unknown.values[0].Clear()
    unknown.values[0].MergeFromString(b"\x48\x07")
    with Unchanged(db, stub):
        assert "inserts[0].values[0]: Value has no kind set" in refused(
            stub.Write, pb.WriteRequest(table=TABLE, inserts=[row])
        )
        assert "inserts[0].values[0]" in refused(
            stub.Write, pb.WriteRequest(table=TABLE, inserts=[unknown])
        )


def test_an_unset_value_in_a_key_is_refused(db, stub):
    with Unchanged(db, stub):
        request = pb.LookupRequest(view="wv_by_id", keys=[pb.Key(values=[V(int_value=1)])])
        request.keys.add()  # a second key
        request.keys[1].values.add()  # whose only value has no kind
        message = refused(stub.Lookup, request)
        assert message.startswith("keys[1].values[0]: Value has no kind set"), message
        message = refused(
            stub.Evict, pb.EvictRequest(view="wv_by_id", key=pb.Key(values=[V()]))
        )
        assert message.startswith("key.values[0]: Value has no kind set"), message


def test_min_lsn_beyond_the_last_write_is_out_of_range_at_once(db, stub):
    with Unchanged(db, stub) as before:
        beyond = before.lsn + 1
        started = time.monotonic()
        message = refused(
            stub.Lookup,
            pb.LookupRequest(
                view="wv_by_id", keys=[pb.Key(values=[V(int_value=1)])], min_lsn=beyond
            ),
            code=grpc.StatusCode.OUT_OF_RANGE,
            timeout=30,
        )
        assert time.monotonic() - started < 5
        assert f"min_lsn {beyond}" in message and f"LSN {before.lsn}" in message, message
        with pytest.raises(OutOfRange):
            db.lookup("wv_by_id", 1, min_lsn=2**63 - 1)
        # min_lsn at the last write is fine.
        assert db.lookup("wv_by_id", 1, min_lsn=before.lsn).rows == [(1, "ann")]


def test_negative_lsns_are_refused(db, stub):
    with Unchanged(db, stub):
        message = refused(
            stub.Lookup,
            pb.LookupRequest(view="wv_by_id", keys=[pb.Key(values=[V(int_value=1)])], min_lsn=-1),
        )
        assert "min_lsn" in message
        message = refused(stub.Query, pb.QueryRequest(sql=f"SELECT * FROM {TABLE}", as_of=-1))
        assert "as_of" in message


@pytest.mark.parametrize(
    "request_",
    [
        pb.WriteRequest(table=TABLE),
        pb.WriteRequest(table=TABLE, insert_batch=pb.RowBatch()),
        pb.WriteRequest(table=TABLE, insert_batch=batch(0, ids(), names(), scores())),
        pb.WriteRequest(table=TABLE, delete_batch=pb.RowBatch()),
    ],
    ids=["nothing", "empty-batch", "zero-row-batch", "empty-delete-batch"],
)
def test_an_empty_write_is_refused_without_an_lsn(db, stub, request_):
    with Unchanged(db, stub):
        assert "a write needs at least one row" in refused(stub.Write, request_)
        with pytest.raises(InvalidArgument, match="at least one row"):
            db.insert(TABLE, [])


def _raw(server_address: str, method: str, body: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(server_address) as channel:
        call = channel.unary_unary(f"/partialflow.v1.Partialflow/{method}")
        with pytest.raises(grpc.RpcError) as info:
            call(body, timeout=10)
        return info.value


@pytest.mark.parametrize("method", ["Write", "Lookup", "Execute", "Query", "Evict", "Explain"])
def test_bytes_that_do_not_parse_are_invalid_argument(server, db, stub, method):
    # Field 1 (a string in each of these requests) holding bytes that are not UTF-8.
    with Unchanged(db, stub):
        err = _raw(server.address, method, b"\x0a\x02\xff\xfe")
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
        assert "malformed partialflow.v1." in err.details()
        err = _raw(server.address, method, b"\x0a\x05ab")  # truncated
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()


def test_a_load_path_the_os_cannot_take_is_invalid_argument(db, stub):
    for path, word in [("data\x00.parquet", "NUL"), ("http://[::1/x.parquet", "path")]:
        with Unchanged(db, stub):
            message = refused(stub.Load, pb.LoadRequest(table=TABLE, path=path))
            assert word in message, message


def _bits(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


def test_nan_and_infinities_round_trip_exactly(db, stub):
    values = [math.nan, math.inf, -math.inf, 5e-324, -1.5e308, 0.1]
    rows = [(100 + i, v) for i, v in enumerate(values)]
    request = pb.WriteRequest(
        table="wv_bag", insert_batch=batch(len(rows), ids(*(r[0] for r in rows)), scores(*values))
    )
    stub.Write(request, timeout=10)
    got = db.query("SELECT x, score FROM wv_bag WHERE x >= 100").rows
    assert sorted((x, _bits(s)) for x, s in got) == sorted((x, _bits(s)) for x, s in rows)
    # A NaN row can be deleted like any other (one occurrence, bag semantics).
    db.delete("wv_bag", [(100, math.nan)])
    got = db.query("SELECT x, score FROM wv_bag WHERE x = 100").rows
    assert got == []


@pytest.mark.parametrize("method", ["Ping", "Stats", "Flush", "Compact", "Load"])
def test_truncated_bytes_are_invalid_argument_for_every_method(server, db, stub, method):
    with Unchanged(db, stub):
        err = _raw(server.address, method, b"\x0a\x05ab")
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
        assert "malformed partialflow.v1." in err.details()


@pytest.mark.parametrize(
    "nulls", [[2, 0], [5], list(range(199, -1, -2))], ids=["few", "one", "many"]
)
def test_nulls_in_any_order_decode_to_their_rows(nulls):
    from partialflow.proto.values import decode_batch

    n = 200 if len(nulls) > 2 else 6
    values = [i for i in range(n) if i not in set(nulls)]
    column = C(kind=C.INT, ints=values, nulls=nulls)
    rows = decode_batch(batch(n, column))
    assert rows == [(None if i in set(nulls) else i,) for i in range(n)]
