"""Regression tests for the server bugs the protocol fuzz test (test_wire_fuzz.py) found."""

from __future__ import annotations

import grpc
import pytest

from partialflow.client import NotFound
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def db(server):
    with server.client(timeout=60) as client:
        client.execute("CREATE TABLE ff_bag (k BIGINT, s TEXT, d DOUBLE)")
        yield client


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.PartialflowStub(channel)


@pytest.mark.parametrize("text", ["x" * 100_000, "é" * 50_000, "😀" * 20_000])
def test_an_error_quoting_a_huge_value_keeps_its_status(db, stub, text):
    """The message of a refused delete quotes the row; a 100 KB value made the status
    details exceed gRPC's 16 KiB header limit, so the client saw RESOURCE_EXHAUSTED."""
    lsn = db.stats()["lsn"]
    row = pb.Row(values=[pb.Value(int_value=1), pb.Value(string_value=text),
                         pb.Value(null_value=True)])
    with pytest.raises(grpc.RpcError) as info:
        stub.Write(pb.WriteRequest(table="ff_bag", deletes=[row]), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()
    message = info.value.details()
    assert message.startswith("table 'ff_bag' delete row 0: row (1, ")
    assert message.endswith("more characters)") and len(message.encode()) < 2100
    # The same through the Python client, and a name as long as a value.
    with pytest.raises(NotFound, match="more characters"):
        db.delete("ff_bag", [(1, text, None)])
    with pytest.raises(grpc.RpcError) as info:
        stub.Write(pb.WriteRequest(table=text, inserts=[row]), timeout=10)
    assert info.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    assert db.stats()["lsn"] == lsn


def test_a_csv_with_doubled_quotes_loads_the_text_it_quotes(db, tmp_path):
    # RFC 4180 (Python's csv module, pandas, spreadsheets): a quote inside a quoted field
    # is doubled. Spark's default escape is a backslash, so a field with doubled quotes
    # loaded as its raw text until the loader set the escape to a quote.
    import csv

    rows = [(1, 'say "hi"', 0.5), (2, "a,b", 1.5), (3, "back\\slash", 2.5), (4, "x", None)]
    path = tmp_path / "quoted.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "s", "d"])
        writer.writerows(rows)
    result = db.load("ff_bag", str(path), format="csv", header=True)
    got = db.query("SELECT k, s, d FROM ff_bag", as_of=result.lsn).rows
    assert sorted(got) == rows


def test_nan_rows_leave_views_when_deleted(db):
    """Rows are bags keyed by equality and NaN != NaN: a deleted row holding a NaN stayed
    in the view ('count of row ... fell below zero'), and so did a NaN computed by an
    aggregate (SUM of inf and -inf), while storage was right. Checked against Spark."""
    import math

    db.execute("CREATE TABLE ff_nan (k BIGINT, d DOUBLE)")
    db.execute("CREATE VIEW ff_nan_by_k AS SELECT k, d FROM ff_nan WHERE k = ?")
    db.execute("CREATE VIEW ff_nan_sum AS SELECT k, SUM(d) AS s, COUNT(*) AS n FROM ff_nan "
               "WHERE k = ? GROUP BY k")
    db.execute("CREATE VIEW ff_nan_groups AS SELECT d, COUNT(*) AS n FROM ff_nan "
               "WHERE k = ? GROUP BY d")
    for view in ("ff_nan_by_k", "ff_nan_sum", "ff_nan_groups"):
        assert db.lookup(view, 1).rows == []  # filled (empty) before the writes

    def same(view, sql, lsn):
        # Kept up to date by the writes, then filled afresh from Spark's state plan.
        for fresh in (False, True):
            if fresh:
                db.evict(view, 1)
            got = db.lookup(view, 1, min_lsn=lsn)
            want = db.query(sql, as_of=got.lsn).rows
            assert sorted(map(repr, got.rows)) == sorted(map(repr, want)), (
                view, fresh, got.rows, want)

    steps = [
        ("insert", [(1, math.nan), (1, 2.0), (1, math.inf), (1, math.nan)]),
        ("insert", [(1, -math.inf)]),      # SUM becomes NaN (inf + -inf)
        ("delete", [(1, math.nan)]),       # one of two NaN rows
        ("delete", [(1, -math.inf)]),      # SUM back to inf: the NaN row is retracted
        ("delete", [(1, float("nan"))]),   # another NaN object than the one inserted
    ]
    for op, rows in steps:
        lsn = db.insert("ff_nan", rows) if op == "insert" else db.delete("ff_nan", rows)
        same("ff_nan_by_k", "SELECT k, d FROM ff_nan WHERE k = 1", lsn)
        same("ff_nan_sum", "SELECT k, SUM(d) AS s, COUNT(*) AS n FROM ff_nan WHERE k = 1 "
             "GROUP BY k", lsn)
        same("ff_nan_groups", "SELECT d, COUNT(*) AS n FROM ff_nan WHERE k = 1 GROUP BY d", lsn)
    assert db.stats()["state_anomalies"] == 0


DEEP = [
    ("Query", "SELECT " + "(" * 3000 + "1" + ")" * 3000),
    ("Execute", "SELECT " + "(" * 3000 + "1" + ")" * 3000),
    ("Execute", "CREATE VIEW ff_deep AS SELECT k FROM ff_bag WHERE " + "(" * 2000 + "k = ?"
     + ")" * 2000),
    ("Execute", "CREATE VIEW ff_deep AS SELECT k FROM ff_bag WHERE k = ? AND ("
     + " OR ".join(f"s = '{i}'" for i in range(3000)) + ")"),
]


@pytest.mark.parametrize("method, sql", DEEP, ids=["query", "execute", "view", "long-or"])
def test_a_statement_nested_too_deep_is_invalid_argument(db, stub, method, sql):
    """Python's recursion limit in the SQL parser or the planner answered INTERNAL."""
    request = pb.QueryRequest(sql=sql) if method == "Query" else pb.ExecuteRequest(sql=sql)
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, method)(request, timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "nests too deeply" in info.value.details()
    with pytest.raises(NotFound):
        db.execute("DROP VIEW ff_deep")  # nothing was made
    stub.Ping(pb.PingRequest(), timeout=5)


def test_insert_with_a_column_listed_twice_is_refused(db):
    """`INSERT INTO t (k, k) VALUES (1, 2)` was acknowledged and stored (1, NULL, NULL):
    the second value was dropped without a word."""
    from partialflow.client import InvalidArgument

    db.execute("CREATE TABLE ff_cols (k BIGINT, s TEXT)")
    with pytest.raises(InvalidArgument, match="column K is listed twice"):
        db.execute("INSERT INTO ff_cols (k, K) VALUES (1, 2)")
    lsn = db.execute("INSERT INTO ff_cols (S, k) VALUES ('a', 1)").lsn  # any case, any order
    assert db.query("SELECT k, s FROM ff_cols", as_of=lsn).rows == [(1, "a")]
