"""Snapshot queries over the wire: as_of across flushes and a compaction, the retention
horizon, value types, and statements through ``execute``."""

from __future__ import annotations

import pytest
from helpers import InProcessServer

from partialflow.client import FailedPrecondition, InvalidArgument, PartialflowError


def _keys(client, as_of=None) -> list[int]:
    result = client.query("SELECT k FROM hist ORDER BY k", as_of=as_of)
    if as_of is not None:
        assert result.lsn == as_of
    return [r[0] for r in result.rows]


def test_as_of_across_flushes_and_a_compaction(server):
    with server.client(timeout=120) as c:
        c.execute("CREATE TABLE hist (k BIGINT, v TEXT)")
        l1 = c.insert("hist", [(k, f"v{k}") for k in range(10)])
        c.flush()
        l2 = c.delete("hist", [(k, f"v{k}") for k in range(5)])
        l3 = c.insert("hist", [(k, f"v{k}") for k in range(10, 15)])
        c.flush()
        report = c.compact("hist")
        assert isinstance(report, dict)
        l4 = c.update("hist", [(14, "v14")], [(14, "changed")])  # stays in the log, unflushed
        assert l1 < l2 < l3 < l4

        expected = {
            l1: list(range(10)),
            l2: list(range(5, 10)),
            l3: list(range(5, 15)),
            l4: list(range(5, 15)),
        }
        for lsn, keys in expected.items():
            assert _keys(c, as_of=lsn) == keys, f"as_of {lsn}"
        assert c.query("SELECT v FROM hist WHERE k = 14", as_of=l3).rows == [("v14",)]
        assert c.query("SELECT v FROM hist WHERE k = 14", as_of=l4).rows == [("changed",)]

        latest = c.query("SELECT COUNT(*) AS n FROM hist")
        assert latest.columns == ["n"] and latest.rows == [(10,)] and latest.lsn >= l4


def test_as_of_in_the_future_or_negative_is_refused(server):
    with server.client() as c:
        c.execute("CREATE TABLE future_t (a BIGINT)")
        lsn = c.insert("future_t", [(1,)])
        with pytest.raises(PartialflowError):
            c.query("SELECT a FROM future_t", as_of=lsn + 1_000_000)
        with pytest.raises(InvalidArgument):
            c.query("SELECT a FROM future_t", as_of=-1)


def test_as_of_older_than_retention_is_refused_after_compaction(spark, tmp_path):
    with InProcessServer(tmp_path / "data", spark, retention_lsns=3) as srv, srv.client() as c:
        c.execute("CREATE TABLE short (a BIGINT)")
        first = c.insert("short", [(0,)])
        for i in range(1, 10):
            c.delete("short", [(i - 1,)])
            c.insert("short", [(i,)])
        c.flush()
        c.compact("short")
        with pytest.raises(FailedPrecondition):
            c.query("SELECT a FROM short", as_of=first)
        assert c.query("SELECT a FROM short").rows == [(9,)]


def test_values_of_every_type_round_trip(server):
    with server.client() as c:
        c.execute(
            "CREATE TABLE typed (i BIGINT PRIMARY KEY, n INT, d DOUBLE, f FLOAT, r REAL, "
            "t TEXT, v VARCHAR(20), s STRING, b BOOLEAN)"
        )
        rows = [
            (1, -5, 1.25, 2.5, -0.5, "ünï", "", "x" * 1000, True),
            (2, None, None, None, None, None, None, None, None),
            (3, 2**62, 1e300, 0.0, 3.0, "a'b", 'quote"', "tab\t", False),
        ]
        c.insert("typed", rows)
        got = c.query("SELECT * FROM typed ORDER BY i")
        assert got.columns == ["i", "n", "d", "f", "r", "t", "v", "s", "b"]
        assert got.rows == rows
        assert [type(v) for v in got.rows[0]] == [
            int,
            int,
            float,
            float,
            float,
            str,
            str,
            str,
            bool,
        ]


def test_execute_create_forms_insert_and_drop(server):
    with server.client() as c:
        c.execute("CREATE TABLE pk2 (a BIGINT, b TEXT, c DOUBLE, PRIMARY KEY (a, b))")
        lsn = c.execute("INSERT INTO pk2 (b, a) VALUES ('x', 1), ('y', -2)").lsn
        assert c.query("SELECT a, b, c FROM pk2 ORDER BY a").rows == [
            (-2, "y", None),
            (1, "x", None),
        ]
        assert c.query("SELECT a FROM pk2").lsn >= lsn
        c.insert("pk2", [(1, "other", 0.0)])  # same a, different b: a different key
        with pytest.raises(PartialflowError):
            c.insert("pk2", [(1, "x", 9.0)])
        selected = c.execute("SELECT COUNT(*) AS n FROM pk2")
        assert selected.rows == [(3,)] and selected.columns == ["n"]
        c.execute("DROP TABLE pk2")
        with pytest.raises(PartialflowError):
            c.query("SELECT * FROM pk2")
        c.execute("CREATE TABLE pk2 (z BOOLEAN)")  # the name is free again
        assert c.query("SELECT * FROM pk2").rows == []
        c.execute("DROP TABLE pk2")


def test_a_large_result_fits_through(server):
    with server.client(timeout=120) as c:
        c.execute("CREATE TABLE big_result (k BIGINT, t TEXT)")
        c.insert("big_result", [(i, "x" * 50) for i in range(100_000)])
        got = c.query("SELECT k, t FROM big_result")
        assert len(got.rows) == 100_000  # ~7 MB, over gRPC's 4 MB default
