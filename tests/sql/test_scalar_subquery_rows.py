"""A scalar subquery that may return several rows (no aggregate) is accepted at CREATE
VIEW; a read that meets more than one row fails, as SQL says, with FailedPrecondition
naming the view and the subquery (SQLSTATE 21000 over the PostgreSQL protocol); once a
delete leaves one row the read succeeds and equals Spark at its LSN; with no row the
value is NULL."""

from __future__ import annotations

import pytest
from oracle import assert_matches, bind_params

from partialflow.client import FailedPrecondition, PartialflowError


def test_a_scalar_subquery_with_two_rows_fails_the_read_until_a_delete(server, uniq):
    t, u = f"{uniq}t", f"{uniq}u"
    with server.client(timeout=300) as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        c.execute(f"CREATE TABLE {u} (k BIGINT, w BIGINT, tag TEXT)")
        c.insert(t, [(1, 10), (2, 20), (3, 30)])
        c.insert(u, [(1, 5, "a"), (2, 6, "b"), (2, 7, "c")])
        views = {
            # correlated, in the SELECT list: key 2 has two rows in u, key 3 none
            "sel": (f"SELECT {t}.k, {t}.v, (SELECT {u}.tag FROM {u} WHERE {u}.k = {t}.k) "
                    f"AS tag FROM {t} WHERE {t}.k = ?"),
            # correlated, in WHERE inside arithmetic
            "whr": (f"SELECT {t}.k, {t}.v FROM {t} WHERE {t}.v > (SELECT {u}.w FROM {u} "
                    f"WHERE {u}.k = {t}.k) + 4 AND {t}.k = ?"),
            # uncorrelated: one value for every row, two rows fail every key
            "unc": (f"SELECT {t}.k, {t}.v - (SELECT {u}.w FROM {u} WHERE {u}.w > 5) AS d "
                    f"FROM {t} WHERE {t}.k = ?"),
        }
        for name, sql in views.items():
            c.execute(f"CREATE VIEW {uniq}{name} AS {sql}")
        # A key whose subquery has one row (or none) reads, and equals Spark.
        for name in ("sel", "whr"):
            for key in (1, 3):
                assert_matches(c, views[name], (key,), c.lookup(f"{uniq}{name}", key))
        assert c.lookup(f"{uniq}sel", 3).rows == [(3, 30, None)]  # no row: NULL
        assert c.lookup(f"{uniq}whr", 3).rows == []  # v > NULL is not true
        # Two rows: the read fails naming the view, the key and the subquery, and so does
        # Spark's own query of the same SQL.
        for name, key in (("sel", 2), ("whr", 2), ("unc", 1), ("unc", 3)):
            with pytest.raises(FailedPrecondition) as err:
                c.lookup(f"{uniq}{name}", key)
            text = str(err.value)
            assert "more than one row returned by a subquery used as an expression" in text
            assert f"{uniq}{name}" in text and f"({key},)" in text and u in text, text
            with pytest.raises(PartialflowError):
                c.query(bind_params(views[name], (key,)))
        # The other keys of a correlated view still read.
        assert sorted(c.lookup(f"{uniq}sel", 1).rows) == [(1, 10, "a")]
        # A delete leaves one row: every read succeeds and equals Spark at its LSN.
        lsn = c.delete(u, [(2, 7, "c")])
        for name, text in views.items():
            for key in (1, 2, 3):
                res = c.lookup(f"{uniq}{name}", key, min_lsn=lsn)
                assert_matches(c, text, (key,), res)
        assert c.lookup(f"{uniq}sel", 2, min_lsn=lsn).rows == [(2, 20, "b")]
        # A second row again: the read fails again; removing both rows gives NULL.
        lsn = c.insert(u, [(2, 9, "d")])
        with pytest.raises(FailedPrecondition):
            c.lookup(f"{uniq}sel", 2, min_lsn=lsn)
        lsn = c.delete(u, [(2, 6, "b"), (2, 9, "d")])
        assert c.lookup(f"{uniq}sel", 2, min_lsn=lsn).rows == [(2, 20, None)]
        assert_matches(c, views["unc"], (2,), c.lookup(f"{uniq}unc", 2, min_lsn=lsn))


def test_a_several_row_scalar_subquery_where_no_read_can_check_it_is_refused(server, uniq):
    t = f"{uniq}t"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        for sql, where in [
            (f"SELECT k, COUNT(*) AS n, (SELECT v FROM {t} x WHERE x.k = {t}.k) AS s FROM {t} "
             "GROUP BY k", "in an aggregate query"),
            (f"SELECT DISTINCT k, (SELECT v FROM {t} x WHERE x.k = {t}.k) AS s FROM {t}",
             "with DISTINCT or LIMIT"),
            (f"SELECT k FROM {t} WHERE k IN (SELECT k FROM {t} x WHERE x.v = "
             f"(SELECT v FROM {t} y WHERE y.k = 1))", "in a subquery"),
        ]:
            with pytest.raises(PartialflowError) as err:
                c.execute(f"CREATE VIEW {uniq}bad AS {sql}")
            assert "may return more than one row" in str(err.value), str(err.value)
            assert where in str(err.value), str(err.value)


def test_over_the_postgresql_protocol_the_error_is_sqlstate_21000(server, uniq):
    psycopg = pytest.importorskip("psycopg")
    from partialflow.server.app.main import pg_port_of

    t, u = f"{uniq}t", f"{uniq}u"
    dsn = f"host=127.0.0.1 port={pg_port_of(server.server)} user=tester dbname=partialflow"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        conn.execute(f"CREATE TABLE {u} (k BIGINT, w BIGINT)")
        conn.execute(f"INSERT INTO {t} VALUES (1, 10), (2, 20)")
        conn.execute(f"INSERT INTO {u} VALUES (1, 5), (2, 6), (2, 7)")
        conn.execute(f"CREATE VIEW {uniq}v AS SELECT {t}.k, (SELECT {u}.w FROM {u} WHERE "
                     f"{u}.k = {t}.k) AS w FROM {t} WHERE {t}.k = ?")
        assert conn.execute(f"SELECT * FROM {uniq}v WHERE k = 1").fetchall() == [(1, 5)]
        with pytest.raises(psycopg.Error) as err:
            conn.execute(f"SELECT * FROM {uniq}v WHERE k = 2").fetchall()
        assert err.value.sqlstate == "21000", err.value
        assert "more than one row returned by a subquery" in str(err.value)
