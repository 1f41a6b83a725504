"""The service and client wiring on a stand-in engine: conversions both ways, the one
error mapping, INTERNAL for bugs, the client's LSN floor. No Spark needed."""

from __future__ import annotations

import grpc
import pytest

from partialflow.client import (
    AlreadyExists,
    Client,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PartialflowError,
    ResourceExhausted,
    Unavailable,
)
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc
from partialflow.server import errors
from partialflow.server.app.main import create_server, stop_server
from partialflow.server.config import Config
from partialflow.server.engine import ResultSet


class FakeEngine:
    """Answers like the engine and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.raise_next: BaseException | None = None
        self.lsn = 10
        self.follower = None  # not following an upstream PostgreSQL

    def _record(self, *call) -> None:
        self.calls.append(call)
        if self.raise_next is not None:
            err, self.raise_next = self.raise_next, None
            raise err

    def execute(self, sql):
        self._record("execute", sql)
        return ResultSet(["a", "b"], [(1, "x"), (None, 2.5)], self.lsn)

    def write(self, table, inserts=(), deletes=()):
        self._record("write", table, list(inserts), list(deletes))
        self.lsn += 1
        return self.lsn

    def lookup(self, view, keys, *, min_lsn, timeout):
        self._record("lookup", view, keys, min_lsn, timeout)
        return ["k", "n"], [([(k[0] if k else None, 7)], self.lsn + i) for i, k in enumerate(keys)]

    def query(self, sql, as_of=None):
        self._record("query", sql, as_of)
        return ResultSet(["n"], [(as_of,)], as_of if as_of is not None else self.lsn)

    def evict(self, view, key):
        self._record("evict", view, key)
        return 3

    def explain(self, view):
        self._record("explain", view)
        return "γ count", "digraph {}"

    def flush(self):
        self._record("flush")
        return self.lsn

    def compact(self, table=None):
        self._record("compact", table)
        return {
            "segments_before": 4,
            "segments_after": 1,
            "seconds": 0.25,
            "tables": {table or "all": {"segments_before": 4, "segments_after": 1, "horizon": 9}},
        }

    def stats(self):
        self._record("stats")
        return {
            "views": {"v": {"keys_filled": 2, "hits": 5, "memory_bytes": 1024}},
            "lsn": 2**53 + 1,  # a double would round this to 2**53
            "memory_limit": None,
            "upquery_ms": {"p50": 1.5, "p90": 2.0, "p99": 7.25, "count": 3},
            "join_misses": 4,  # an executor counter
            "storage": {"lsn": 2**53 + 1, "segments": {"t": 3}},
            "verifier": {"enabled": True, "sample": 0.5, "checks": 2,
                         "last_mismatch": {"view": "v", "key": ["Fruit", 3], "lsn": 7,
                                           "served": ["(1,)"], "expected": []}},
        }

    def close(self):
        pass


@pytest.fixture(scope="module")
def fake():
    engine = FakeEngine()
    # gRPC wiring only: the PostgreSQL listener (off here) reads a real engine's catalog.
    server, port = create_server(Config(data_dir="unused", port=0, pg_port=None), engine=engine)
    server.start()
    yield engine, f"127.0.0.1:{port}"
    stop_server(server, grace=0)


@pytest.fixture
def client(fake):
    engine, address = fake
    engine.calls.clear()
    with Client(address, timeout=10) as c:
        yield c


def test_execute_round_trips_rows_columns_and_lsn(client, fake):
    result = client.execute("select 1")
    assert result.columns == ["a", "b"]
    assert result.rows == [(1, "x"), (None, 2.5)]
    assert result.lsn == fake[0].lsn


def test_insert_delete_update_send_one_write_each(client, fake):
    engine = fake[0]
    lsn = client.insert("t", [(1, "a", 1.5, True, None)])
    assert engine.calls[-1] == ("write", "t", [(1, "a", 1.5, True, None)], [])
    assert client.delete("t", [(1, "a", 1.5, True, None)]) == lsn + 1
    assert engine.calls[-1] == ("write", "t", [], [(1, "a", 1.5, True, None)])
    client.update("t", [(1,)], [(2,)])
    assert engine.calls[-1] == ("write", "t", [(2,)], [(1,)])


def test_update_with_unequal_lengths_is_refused_before_sending(client, fake):
    with pytest.raises(InvalidArgument, match="1 old rows but 2 new rows"):
        client.update("t", [(1,)], [(2,), (3,)])
    assert fake[0].calls == []


def test_unsupported_python_value_is_invalid_argument(client, fake):
    with pytest.raises(InvalidArgument, match="unsupported value"):
        client.insert("t", [(object(),)])
    with pytest.raises(InvalidArgument):
        client.insert("t", [(2**64,)])
    with pytest.raises(InvalidArgument, match="sequence"):
        client.insert("t", [5])
    assert fake[0].calls == []


def test_lookup_scalar_tuple_and_empty_keys(client, fake):
    engine = fake[0]
    result = client.lookup("v", "Fruit")
    assert engine.calls[-1][2] == [("Fruit",)]
    assert result.columns == ["k", "n"] and result.rows == [("Fruit", 7)]
    client.lookup("v", ("a", 2))
    assert engine.calls[-1][2] == [("a", 2)]
    client.lookup("v")
    assert engine.calls[-1][2] == [()]


def test_lookup_many_is_keyed_by_the_keys_as_given(client, fake):
    results = client.lookup_many("v", ["x", ("y",), ["z", 1]])
    assert set(results) == {"x", ("y",), ("z", 1)}
    assert results["x"].rows == [("x", 7)]
    assert fake[0].calls[-1][2] == [("x",), ("y",), ("z", 1)]


def test_lookup_passes_a_deadline_to_the_engine(client, fake):
    client.lookup("v", 1)
    timeout = fake[0].calls[-1][4]
    assert timeout is not None and 0 < timeout <= 11  # the 10 s client deadline, give or take


def test_reads_never_go_back_the_floor_is_sent_as_min_lsn(fake):
    engine, address = fake
    engine.calls.clear()
    with Client(address) as c:
        c.lookup("v", 1)
        assert engine.calls[-1][3] is None  # nothing read yet: no floor
        seen = c.lsn_floor
        assert seen == engine.lsn
        engine.lsn += 5
        c.lookup("v", 1)
        assert engine.calls[-1][3] == seen
        c.lookup("v", 1, min_lsn=seen + 100)
        assert engine.calls[-1][3] == seen + 100
        # a historical query neither uses nor raises the floor
        floor = c.lsn_floor
        assert c.query("select 1", as_of=3).lsn == 3
        assert c.lsn_floor == floor


def test_query_as_of_and_latest(client, fake):
    assert client.query("select n", as_of=4).rows == [(4,)]
    assert fake[0].calls[-1] == ("query", "select n", 4)
    client.query("select n")
    assert fake[0].calls[-1] == ("query", "select n", None)


def test_evict_with_and_without_key(client, fake):
    assert client.evict("v", "Fruit") == 3
    assert fake[0].calls[-1] == ("evict", "v", ("Fruit",))
    client.evict("v")
    assert fake[0].calls[-1] == ("evict", "v", None)


def test_stats_are_typed_and_exact(client):
    stats = client.stats()
    view = stats["views"]["v"]
    assert view["keys_filled"] == 2 and isinstance(view["keys_filled"], int)
    assert view["misses"] == 0  # every per-view counter is there, unset ones as 0
    assert stats["lsn"] == 2**53 + 1 and stats["storage"]["lsn"] == 2**53 + 1
    assert stats["storage"]["segments"] == {"t": 3}
    assert stats["memory_limit"] is None  # no limit, as before the typed answer
    assert stats["upquery_ms"] == {"p50": 1.5, "p90": 2.0, "p99": 7.25, "count": 3}
    assert stats["join_misses"] == 4
    assert stats["verifier"]["checks"] == 2
    assert stats["verifier"]["last_mismatch"]["key"] == ["Fruit", 3]


def test_stats_on_the_wire_are_int64_not_doubles(fake):
    # What a non-Python client sees: the raw typed message, no Struct doubles.
    with grpc.insecure_channel(fake[1]) as channel:
        stub = pb_grpc.PartialflowStub(channel)
        reply = stub.Stats(pb.StatsRequest(), timeout=10)
    assert isinstance(reply, pb.StatsResponse)
    assert reply.lsn == 2**53 + 1
    assert reply.counters["join_misses"] == 4
    assert reply.views["v"].hits == 5
    assert reply.upquery_ms.count == 3 and reply.upquery_ms.p99 == 7.25


def test_explain_flush_compact_ping(client, fake):
    assert client.explain("v") == ("γ count", "digraph {}")
    assert client.flush() == fake[0].lsn
    report = client.compact("t")
    assert report["segments_before"] == 4 and report["seconds"] == 0.25
    assert report["tables"]["t"]["segments_after"] == 1 and report["tables"]["t"]["horizon"] == 9
    assert fake[0].calls[-1] == ("compact", "t")
    client.compact()
    assert fake[0].calls[-1] == ("compact", None)
    client.ping()


@pytest.mark.parametrize(
    "server_error, client_error",
    [
        (errors.InvalidArgument("bad arity"), InvalidArgument),
        (errors.NotFound("no table t"), NotFound),
        (errors.AlreadyExists("table t exists"), AlreadyExists),
        (errors.FailedPrecondition("as_of too old"), FailedPrecondition),
        (errors.Unavailable("spark down"), Unavailable),
        (errors.DeadlineExceeded("upquery too slow"), DeadlineExceeded),
        (errors.ResourceExhausted("too big"), ResourceExhausted),
    ],
)
def test_domain_errors_reach_the_client_as_their_class(client, fake, server_error, client_error):
    fake[0].raise_next = server_error
    with pytest.raises(client_error) as info:
        client.execute("select 1")
    assert str(info.value) == str(server_error)
    assert info.value.code == server_error.code
    assert isinstance(info.value, PartialflowError)


def test_a_bug_is_internal_and_the_server_keeps_serving(client, fake):
    fake[0].raise_next = ZeroDivisionError("boom")
    with pytest.raises(PartialflowError) as info:
        client.execute("select 1")
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "ZeroDivisionError: boom" in str(info.value)
    assert client.execute("select 1").rows


def test_unreachable_server_is_unavailable():
    with Client("127.0.0.1:1", timeout=2) as c, pytest.raises(Unavailable):
        c.ping()


def test_rows_travel_as_messages_unless_the_client_asks_for_columns(fake):
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto import partialflow_pb2_grpc as pb_grpc

    with grpc.insecure_channel(fake[1]) as channel:
        stub = pb_grpc.PartialflowStub(channel)
        plain = stub.Execute(pb.ExecuteRequest(sql="select 1"), timeout=5)
        assert len(plain.rows) == 2 and not plain.HasField("batch")
        packed = stub.Execute(pb.ExecuteRequest(sql="select 1", columnar=True), timeout=5)
        assert not packed.rows and packed.batch.num_rows == 2


def test_writes_may_mix_rows_and_batches(fake):
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto import partialflow_pb2_grpc as pb_grpc
    from partialflow.proto.values import add_rows, fill_batch

    request = pb.WriteRequest(table="t")
    add_rows(request.inserts, [(1, "a")])
    fill_batch(request.insert_batch, [(2, "b"), (3, None)])
    with grpc.insecure_channel(fake[1]) as channel:
        pb_grpc.PartialflowStub(channel).Write(request, timeout=5)
    assert fake[0].calls[-1] == ("write", "t", [(1, "a"), (2, "b"), (3, None)], [])
