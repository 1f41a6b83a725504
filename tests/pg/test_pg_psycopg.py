"""psycopg 3 against the PostgreSQL listener: text and binary, server-side prepared
statements, typed parameters, writes with read-your-writes, transactions, errors with their
SQLSTATEs, cancel, and SUBSCRIBE through stream(), copy() and DECLARE/FETCH. Every answer is
compared with Spark SQL over the base tables at the LSN the session reports."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from pg_helpers import canon, lsn_of, spark_rows
from psycopg import errors as pgerr


@pytest.fixture
def db(pg_dsn, server, uniq):
    """A connection and a table t(id, cat, x, ok) with two views: by_cat (aggregates per
    category) and by_id (rows by primary key)."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
    t, by_cat, by_id = f"{uniq}t", f"{uniq}by_cat", f"{uniq}by_id"
    conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, cat TEXT, x DOUBLE, ok BOOLEAN)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a', 1.5, true), (2, 'a', 2.25, false), "
                 f"(3, 'b', -4.0, NULL), (4, 'it''s', 0.5, true)")
    conn.execute(f"CREATE VIEW {by_cat} AS SELECT cat, COUNT(*) AS n, SUM(x) AS s FROM {t} "
                 "WHERE cat = ? GROUP BY cat")
    conn.execute(f"CREATE VIEW {by_id} AS SELECT id, cat, x, ok FROM {t} WHERE id = ?")
    yield conn, t, by_cat, by_id
    conn.close()


def agg_sql(t: str, cat: str) -> str:
    quoted = cat.replace("'", "\\'")  # Spark's escape (the oracle speaks Spark SQL)
    return f"SELECT cat, COUNT(*), SUM(x) FROM {t} WHERE cat = '{quoted}' GROUP BY cat"


@pytest.mark.parametrize("binary", [False, True])
def test_lookups_text_and_binary_match_spark_at_their_lsn(db, server, binary):
    conn, t, by_cat, by_id = db
    cur = conn.cursor(binary=binary)
    for cat in ("a", "b", "it's", "none"):
        cur.execute(f"SELECT * FROM {by_cat} WHERE cat = %s", [cat])
        rows = cur.fetchall()
        assert [d.type_code for d in cur.description] == [25, 20, 701]  # text, int8, float8
        assert canon(rows) == spark_rows(server, agg_sql(t, cat), lsn_of(conn))
    cur.execute(f"SELECT id, ok, x FROM {by_id} WHERE id = %s", [2])
    assert cur.fetchall() == [(2, False, 2.25)]
    assert [d.type_code for d in cur.description] == [20, 16, 701]
    # A literal key is the same lookup; a key IN (...) reads several keys.
    cur.execute(f"SELECT cat, n FROM {by_cat} WHERE cat IN ('a', 'b')")
    assert canon(cur.fetchall()) == [("a", 2), ("b", 1)]


def test_prepared_statements_are_kept_and_typed(pg_dsn, db, server):
    conn, t, by_cat, by_id = db
    with psycopg.connect(pg_dsn, autocommit=True, prepare_threshold=0) as prep:
        for i in range(4):  # prepared on the first run, then executed by name
            rows = prep.execute(f"SELECT x FROM {by_id} WHERE id = %s", [1 + i % 2]).fetchall()
            want = spark_rows(server, f"SELECT x FROM {t} WHERE id = {1 + i % 2}",
                              lsn_of(prep))
            assert canon(rows) == want
        # The parameter's type is the key column's: a string that is no bigint is refused.
        with pytest.raises(pgerr.InvalidTextRepresentation):
            prep.execute(f"SELECT * FROM {by_id} WHERE id = %s", ["x1"])
        # So is an INSERT's literal that is no bigint (storage refuses it), and nothing is
        # written: the view's rows below are Spark's over the table.
        with pytest.raises(pgerr.InvalidTextRepresentation):
            prep.execute(f"INSERT INTO {t} (id, cat, x, ok) VALUES ('x9', 'a', 0.5, true)")
        prep.execute(f"INSERT INTO {t} (id, cat, x, ok) VALUES (%s, %s, %s, %s)",
                     [10, "a", 0.25, None])
        rows = prep.execute(f"SELECT * FROM {by_cat} WHERE cat = %s", ["a"]).fetchall()
        assert canon(rows) == spark_rows(server, agg_sql(t, "a"), lsn_of(prep))
        assert rows[0][1] == 3  # its own write, read back at once


def test_writes_read_your_writes_and_monotonic_lsn(db, server):
    conn, t, by_cat, by_id = db
    conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'a'").fetchall()  # filled
    before = lsn_of(conn)
    conn.execute(f"UPDATE {t} SET x = x * 10, ok = NOT ok WHERE id = 1")
    after_update = lsn_of(conn)
    assert after_update > before
    rows = conn.execute(f"SELECT * FROM {by_id} WHERE id = 1").fetchall()
    assert rows == [(1, "a", 15.0, False)]
    assert lsn_of(conn) >= after_update
    conn.execute(f"DELETE FROM {t} WHERE x < 1")  # not the key: picked by a snapshot query
    rows = conn.execute(f"SELECT * FROM {by_cat} WHERE cat = %s", ["b"]).fetchall()
    assert rows == [] == spark_rows(server, agg_sql(t, "b"), lsn_of(conn))
    cur = conn.execute(f"UPDATE {t} SET cat = 'z' WHERE id = 999")
    assert cur.rowcount == 0
    # A Spark query over the base tables answers at a snapshot no older than the session's.
    floor = lsn_of(conn)
    got = conn.execute(f"SELECT id, cat FROM {t} ORDER BY id").fetchall()
    assert lsn_of(conn) >= floor
    assert canon(got) == spark_rows(server, f"SELECT id, cat FROM {t}", lsn_of(conn))


def test_transactions_apply_as_one_write(pg_dsn, db, server):
    conn, t, by_cat, _ = db
    with psycopg.connect(pg_dsn) as tx:  # not autocommit: psycopg sends BEGIN
        tx.execute(f"INSERT INTO {t} VALUES (20, 'c', 1.0, true)")
        tx.execute(f"INSERT INTO {t} VALUES (21, 'c', 2.0, true)")
        tx.execute(f"DELETE FROM {t} WHERE id = 1")
        assert conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'c'").fetchall() == []
        start = lsn_of(conn)
        tx.commit()
        lsn = lsn_of(tx)
        assert lsn == start + 1  # one write
        rows = tx.execute(f"SELECT cat, n, s FROM {by_cat} WHERE cat = 'c'").fetchall()
        assert rows == [("c", 2, 3.0)]
        tx.rollback()
        # Rolled back: nothing written.
        tx.execute(f"INSERT INTO {t} VALUES (22, 'c', 1.0, true)")
        tx.rollback()
        assert lsn_of(conn) <= lsn_of(tx) and conn.execute(
            f"SELECT n FROM {by_cat} WHERE cat = 'c'").fetchall() == [(2,)]
        # DDL after writes in a transaction is refused, and the transaction fails.
        tx.execute(f"INSERT INTO {t} VALUES (23, 'c', 1.0, true)")
        with pytest.raises(pgerr.FeatureNotSupported):
            tx.execute(f"CREATE TABLE {t}_other (id BIGINT)")
        with pytest.raises(pgerr.InFailedSqlTransaction):
            tx.execute("SELECT 1")
        tx.rollback()
    assert spark_rows(server, f"SELECT id FROM {t} WHERE id >= 20", lsn_of(conn)) == \
        [(20,), (21,)]


def test_errors_carry_sqlstates_and_change_nothing(db, server):
    conn, t, by_cat, by_id = db
    lsn = server.engine.storage.last_lsn
    cases = [
        (f"SELECT * FROM {t}_nope", pgerr.UndefinedTable),
        (f"INSERT INTO {t} VALUES (1, 'a', 1.0, true)", pgerr.UniqueViolation),
        ("SELEC 1", pgerr.SyntaxError),
        (f"SELECT * FROM {by_cat}", pgerr.FeatureNotSupported),  # a keyed view without key
        (f"SELECT * FROM {by_cat} WHERE n = 1", pgerr.FeatureNotSupported),
        ("LISTEN x", pgerr.FeatureNotSupported),
        (f"CREATE TABLE {t} (id BIGINT)", pgerr.DuplicateTable),
    ]
    for sql, cls in cases:
        with pytest.raises(cls):
            conn.execute(sql)
    with pytest.raises(pgerr.InvalidTextRepresentation):  # a bigint key given as 'nan-id'
        conn.execute(f"SELECT * FROM {by_id} WHERE id = %s", ["nan-id"])
    with pytest.raises(pgerr.InvalidTextRepresentation):
        conn.execute(f"INSERT INTO {t} VALUES (%s, 'a', 1.0, true)", ["x"])
    assert server.engine.storage.last_lsn == lsn


def test_settings_and_min_lsn(db, server):
    conn, t, by_cat, _ = db
    conn.execute("SET application_name = 'pgtest'")
    assert conn.info.parameter_status("application_name") == "pgtest"
    assert conn.execute("SHOW application_name").fetchone() == ("pgtest",)
    conn.execute("SET extra_float_digits = 3")
    last = server.engine.storage.last_lsn
    conn.execute(f"SET partialflow.min_lsn = {last}")
    conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'a'").fetchall()
    assert lsn_of(conn) >= last
    with pytest.raises(pgerr.InvalidParameterValue):
        conn.execute(f"SET partialflow.min_lsn = {last + 1000}")
        conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'a'")


def test_cancel_ends_a_slow_miss(db, server):
    conn, t, by_cat, _ = db
    faults = server.engine.dataflow.runner.faults
    faults.mode = "hang"
    try:
        # cancel_safe: libpq's blocking PQcancel holds the GIL, and the server runs in this
        # process (psql's Ctrl-C is tested against it in test_pg_psql.py).
        threading.Timer(1.0, conn.cancel_safe).start()
        start = time.monotonic()
        with pytest.raises(pgerr.QueryCanceled):
            conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'never-read'")
        assert time.monotonic() - start < 30
    finally:
        faults.mode = ""
    # The session goes on.
    rows = conn.execute(f"SELECT * FROM {by_cat} WHERE cat = 'a'").fetchall()
    assert canon(rows) == spark_rows(server, agg_sql(t, "a"), lsn_of(conn))


def _write_later(pg_dsn: str, sql: str, delay: float) -> threading.Thread:
    def go() -> None:
        time.sleep(delay)
        with psycopg.connect(pg_dsn, autocommit=True) as w:
            w.execute(sql)
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


def fetch_data(sub, cursor: str) -> list[tuple]:
    """FETCH until rows that are not progress rows come (a fill may take a while)."""
    deadline = time.monotonic() + 90
    while True:
        rows = sub.execute(f"FETCH ALL {cursor} WITH (timeout = '2s')").fetchall()
        data = [r for r in rows if r[1] is False]
        if data:
            return data
        assert all(r[1] is True and r[2] is None for r in rows)  # progress rows only
        assert time.monotonic() < deadline, "no rows from the subscription"


def test_subscribe_through_declare_fetch(pg_dsn, db, server):
    conn, t, by_cat, _ = db
    with psycopg.connect(pg_dsn) as sub:
        sub.execute(f"DECLARE c CURSOR FOR SUBSCRIBE TO {by_cat} WHERE cat = 'a'")
        snap = fetch_data(sub, "c")
        lsn0 = snap[0][0]
        assert [r[2:] for r in snap] == [(1, "a", 2, 3.75)]
        assert [(r[0], r[1]) for r in snap] == [(lsn0, False)]
        idle = sub.execute("FETCH ALL c WITH (timeout = '0.3s')").fetchall()
        assert len(idle) == 1 and idle[0][1] is True and idle[0][2] is None  # progress
        th = _write_later(pg_dsn, f"INSERT INTO {t} VALUES (30, 'a', 1.0, true)", 0.2)
        changes = fetch_data(sub, "c")
        th.join()
        lsn1 = changes[0][0]
        assert lsn1 > lsn0
        assert sorted(r[2:] for r in changes) == [(-1, "a", 2, 3.75), (1, "a", 3, 4.75)]
        assert spark_rows(server, agg_sql(t, "a"), lsn1) == [("a", 3, 4.75)]
        sub.execute("CLOSE c")
        # Resumed from the snapshot's LSN: the first rows are the change since then.
        sub.execute(f"DECLARE r CURSOR FOR SUBSCRIBE {by_cat} WHERE cat = 'a' AS OF {lsn0}")
        data = fetch_data(sub, "r")
        assert sorted(r[2:] for r in data) == [(-1, "a", 2, 3.75), (1, "a", 3, 4.75)]
        assert data[0][0] >= lsn1
        sub.execute("CLOSE r")


def _subscriptions(server) -> int:
    return server.engine.dataflow.stats().subscriptions


def _wait_no_subscriptions(server) -> None:
    deadline = time.monotonic() + 20
    while _subscriptions(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _subscriptions(server) == 0, "a subscription outlived its client"


def test_subscribe_through_copy_and_stream(pg_dsn, db, server):
    conn, t, by_cat, by_id = db
    sub = psycopg.connect(pg_dsn, autocommit=True)
    got: list[tuple] = []
    th = _write_later(pg_dsn, f"UPDATE {t} SET x = 9.5 WHERE id = 2", 0.5)
    try:  # the stream ends when the client cancels it (psycopg may swallow the 57014)
        with sub.cursor().copy(f"COPY (SUBSCRIBE {by_id} WHERE id = 2) TO STDOUT") as copy:
            for row in copy.rows():
                got.append(row)
                if len([r for r in got if r[1] == "f"]) == 3:
                    break
            sub.cancel_safe()
    except pgerr.QueryCanceled:
        pass
    _wait_no_subscriptions(server)  # the cancel ended it (unsubscribing is queued)
    sub.close()
    th.join()
    data = [r for r in got if r[1] == "f"]
    # COPY's text format: lsn, progressed, diff, then the view's columns.
    assert [r[2:] for r in data] == [("1", "2", "a", "2.25", "f"),
                                     ("-1", "2", "a", "2.25", "f"),
                                     ("1", "2", "a", "9.5", "f")]
    lsn = int(data[-1][0])
    assert spark_rows(server, f"SELECT id, x FROM {t} WHERE id = 2", lsn) == [(2, 9.5)]
    # psycopg's stream() of a bare SUBSCRIBE: rows as they come; a disconnect ends it.
    sub = psycopg.connect(pg_dsn, autocommit=True)
    seen = []
    for row in sub.cursor().stream(f"SUBSCRIBE TO {by_cat} WHERE cat = 'b'"):
        seen.append(row)
        if row[1] is False:
            break
    assert seen[-1][2:] == (1, "b", 1, -4.0)
    sub.close()
    _wait_no_subscriptions(server)
