"""``lookup_many`` answers all keys of a call in one columnar block.

Against a real server: the block's answers equal single lookups and Spark SQL over the
base tables at the LSN reported, for every column type, NULLs, keys that hit, miss or
have no rows, duplicate keys, an empty list of keys, and keys of mixed value types. Bad
keys (wrong arity or type) are refused with INVALID_ARGUMENT naming the key, and change
nothing; so are malformed key batches sent on the raw wire.
"""

from __future__ import annotations

import grpc
import pytest
from oracle import check_results, norm

from partialflow.client import InvalidArgument, NotFound
from partialflow.client.answers import results_of as _results_of
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc
from partialflow.server.app.answers import lookup_message

# (k, name, score, flag, n): every column type, a NULL in every non-key column, keys with
# several rows (k=1, k=4), and ints past 2^53.
ROWS = [
    (1, "a", 1.5, True, 10),
    (1, "b", None, False, 2**62),
    (1, None, -0.25, None, None),
    (2, "a", 2.0, True, -(2**63)),
    (3, "c", float("inf"), False, 7),
    (4, "b", 0.5, True, 1),
    (4, "b", 0.5, True, 1),
    (5, "ünï", 3.0, None, 0),
]
ABSENT = [6, 7]  # keys without rows


def _typed(rows: list[tuple]) -> list[tuple]:
    """Rows with each value's type beside it (1 == True == 1.0 in Python), in one order."""
    return sorted((tuple((type(v).__name__, v) for v in r) for r in rows), key=repr)


@pytest.fixture
def views(server, uniq):
    """A table of every column type and four views over it; keys 1 and 2 already filled."""
    t = f"{uniq}t"
    sql = {
        "rows": f"SELECT k, name, score, flag, n FROM {t} WHERE k = ?",
        "agg": f"SELECT name, COUNT(*) AS c, SUM(score) AS total, MIN(n) AS lo "
        f"FROM {t} WHERE name = ? GROUP BY name",
        "two": f"SELECT k, score FROM {t} WHERE flag = ? AND name = ?",
        "top": f"SELECT k, name, score FROM {t} WHERE k = ? ORDER BY score DESC LIMIT 2",
        "by_score": f"SELECT k, score FROM {t} WHERE score = ?",
    }
    with server.client(timeout=180) as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, name TEXT, score DOUBLE, flag BOOLEAN, n BIGINT)")
        c.insert(t, ROWS)
        for name, text in sql.items():
            c.execute(f"CREATE VIEW {uniq}{name} AS {text}")
        c.lookup_many(f"{uniq}rows", [1, 2])  # hits among the misses below
    return {f"{uniq}{name}": text for name, text in sql.items()}


def _check(c, view: str, sql: str, keys: list, ordered: bool = False) -> dict:
    """lookup_many(keys) against single lookups and Spark at the reported LSN."""
    got = c.lookup_many(view, keys)
    assert list(got) == list(dict.fromkeys(keys)), "one Result per distinct key, in order"
    for key, res in got.items():
        single = c.lookup(view, key)
        assert single.columns == res.columns
        assert single.lsn == res.lsn, "no write ran: both answers are at one LSN"
        if ordered:
            assert single.rows == res.rows, key
        else:
            assert _typed(single.rows) == _typed(res.rows), key
    bad = check_results(c, sql, got)
    assert not bad, "\n".join(bad)
    return got


def test_batch_answers_equal_single_lookups_and_spark(server, views, uniq):
    keys = [3, 1, *ABSENT, 2, 1, None, 5, 4, 3]  # misses, hits, no rows, NULL, duplicates
    with server.client(timeout=180) as c:
        before = c.stats()["views"][f"{uniq}rows"]
        got = _check(c, f"{uniq}rows", views[f"{uniq}rows"], keys)
        after = c.stats()["views"][f"{uniq}rows"]
        assert after["misses"] > before["misses"], "the batch had misses to fill"
        assert after["hits"] > before["hits"], "and hits"
        assert got[None].rows == [] and got[6].rows == [] and got[7].rows == []
        assert len(got[4].rows) == 2, "a duplicated row stays two rows"
        assert len({r.lsn for r in got.values()}) == 1, "one LSN for the whole batch"
        # Exact values and types, against Spark's own rows for the same keys.
        spark = c.query(f"SELECT k, name, score, flag, n FROM {uniq}t", as_of=got[1].lsn).rows
        want = [r for r in spark if r[0] in {1, 2, 3, 5, 4}]
        assert _typed([r for k in (1, 2, 3, 4, 5) for r in got[k].rows]) == _typed(want)


def test_aggregates_text_and_two_parameter_keys(server, views, uniq):
    with server.client(timeout=180) as c:
        _check(c, f"{uniq}agg", views[f"{uniq}agg"], ["a", "b", "zz", "ünï", "a", None])
        _check(c, f"{uniq}two", views[f"{uniq}two"],
               [(True, "a"), (False, "b"), (True, "b"), (None, "a"), (True, "a")])


def test_ordered_limited_views_keep_their_order(server, views, uniq):
    with server.client(timeout=180) as c:
        got = _check(c, f"{uniq}top", views[f"{uniq}top"], [1, 4, 2, 6, 1], ordered=True)
        assert [r[2] for r in got[1].rows] == [1.5, -0.25]  # DESC, NULL last, LIMIT 2


def test_keys_of_mixed_value_types_for_a_double_parameter(server, views, uniq):
    # Ints and floats in one key column travel as a MIXED column; an int fits a DOUBLE.
    with server.client(timeout=180) as c:
        got = _check(c, f"{uniq}by_score", views[f"{uniq}by_score"], [2, 0.5, 9.0, None, 3])
        assert norm(got[2].rows) == norm([(2, 2.0)])


def test_empty_keys_and_views_without_parameters(server, views, uniq):
    with server.client(timeout=180) as c:
        assert c.lookup_many(f"{uniq}rows", []) == {}
        with pytest.raises(NotFound, match="unknown view"):
            c.lookup_many(f"{uniq}nope", [])
        c.execute(f"CREATE VIEW {uniq}all AS SELECT COUNT(*) AS c FROM {uniq}t")
        got = c.lookup_many(f"{uniq}all", [(), ()])
        assert list(got) == [()]
        assert got[()].rows == c.query(f"SELECT COUNT(*) FROM {uniq}t", as_of=got[()].lsn).rows


def test_bad_keys_are_refused_naming_the_key_and_change_nothing(server, views, uniq):
    view = f"{uniq}rows"
    with server.client(timeout=180) as c:
        before = c.stats()
        with pytest.raises(InvalidArgument, match=rf"key 2 of 4: view '{view}' takes 1 "
                           r"parameter\(s\), got a key of 2: \(3, 4\)"):
            c.lookup_many(view, [5, 6, (3, 4), 7])
        with pytest.raises(InvalidArgument, match=r"key 1 of 3: .*parameter 1 \(k\) is BIGINT, "
                           r"got 'x' \(str\)"):
            c.lookup_many(view, [5, "x", 7])
        with pytest.raises(InvalidArgument, match=r"key 3 of 4: .*is BIGINT, got 2\.5"):
            c.lookup_many(view, [5, 6, 7, 2.5])
        with pytest.raises(InvalidArgument, match=r"9223372036854775808"):
            c.lookup_many(view, [1, 2**63])  # outside int64: refused by the client already
        after = c.stats()
        assert after["spark_jobs"] == before["spark_jobs"]
        assert after["views"][view]["misses"] == before["views"][view]["misses"]


def _raw(server, request: pb.LookupRequest) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.PartialflowStub(channel).Lookup(request, timeout=30)
    return err.value


def test_malformed_key_batches_are_refused_on_the_wire(server, views, uniq):
    view = f"{uniq}rows"
    short = pb.LookupRequest(view=view, key_batch=pb.RowBatch(num_rows=2))
    short.key_batch.columns.add(kind=pb.Column.INT, ints=[1])
    err = _raw(server, short)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "key_batch.columns[0]: 1 value(s) for 2 rows"
    empty = pb.LookupRequest(view=view, key_batch=pb.RowBatch(num_rows=2**32 - 1))
    err = _raw(server, empty)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("key_batch: num_rows is 4294967295 but the batch has no")
    # Keys as Key messages then the batch: errors count keys across both.
    both = pb.LookupRequest(view=view, keys=[pb.Key(values=[pb.Value(int_value=1)])])
    both.key_batch.num_rows = 2
    both.key_batch.columns.add(kind=pb.Column.STRING, strings=["x", "y"])
    err = _raw(server, both)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("key 1 of 3: ")


def test_block_round_trip_with_keys_at_different_lsns():
    """The block's own contract, encoder to decoder: per-key runs (empty ones included)
    and per-key LSNs when the keys' LSNs differ (a key gated by index fills keeps the LSN
    it was last exact at)."""
    results = [
        ([(1, "a", 1.5, True, None)], 7),
        ([], 9),
        ([(2, None, None, False, -(2**63)), (2, "b", 0.0, None, 2**63 - 1)], 9),
        ([], 9),
    ]
    wire = pb.LookupResponse.FromString(
        lookup_message(["k", "name", "score", "flag", "n"], results).SerializeToString()
    )
    assert list(wire.offsets) == [0, 1, 1, 3] and wire.lsn == 9
    assert list(wire.key_lsns) == [7, 9, 9, 9]
    got = _results_of(wire, 4)
    assert [(r.rows, r.lsn) for r in got] == results
    assert [[type(v) for v in row] for row in got[2].rows] == [
        [int, type(None), type(None), bool, int], [int, str, float, type(None), int]
    ]
    same = pb.LookupResponse.FromString(lookup_message(["c"], [([(1,)], 5), ([(2,)], 5)])
                                        .SerializeToString())
    assert not same.key_lsns and same.lsn == 5, "one LSN for all: no per-key list"
    assert _results_of(pb.LookupResponse.FromString(
        lookup_message(["c"], []).SerializeToString()), 0) == []
