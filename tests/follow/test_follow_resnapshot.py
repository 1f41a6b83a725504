"""Restarts of a following server (in process, on one data directory): a plain restart
resumes from the stored upstream commit; a slot dropped while it was down, or lost past
max_slot_wal_keep_size, makes it copy the tables again (and say so), with views over
them still correct."""

from __future__ import annotations

import time

from follow_helpers import catch_up, our_rows, pg_exec, pg_rows, wait_streaming

DB = "fl_resnap"
DDL = [
    "CREATE TABLE kv (k bigint PRIMARY KEY, v text NOT NULL)",
    "INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 100) g",
]
SQL = "SELECT k, v FROM kv"


def _start(spark, data, url):
    from helpers import InProcessServer

    srv = InProcessServer(data, spark, follow=url).start()
    wait_streaming(srv.engine.follower)
    return srv


def _same(srv, dsn, at: str) -> None:
    lsn = catch_up(srv.engine.follower, at)
    assert our_rows(srv.engine, SQL, as_of=lsn) == pg_rows(dsn, SQL)
    client = srv.client()
    got = client.lookup("rs_v", ("v7",), min_upstream_lsn=at)
    assert sorted(got.rows) == pg_rows(dsn, "SELECT k FROM kv WHERE v = 'v7'")


def _wait_slot(dsn: str, slot: str, status: str | None) -> None:
    deadline = time.monotonic() + 30
    while True:
        rows = pg_rows(dsn, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                       (slot,))
        if (rows[0][0] if rows else None) == status:
            return
        assert time.monotonic() < deadline, f"slot {slot}: {rows}, wanted {status}"
        time.sleep(0.2)


def test_restart_resumes_then_dropped_and_lost_slots_resnapshot(pgup, spark, tmp_path):
    dsn = pgup.database(DB, DDL)
    url = pgup.url(DB)
    data = tmp_path / "data"
    srv = _start(spark, data, url)
    srv.client().execute("CREATE VIEW rs_v AS SELECT k FROM kv WHERE v = ?")
    slot = srv.engine.follower.slot
    _same(srv, dsn, pg_exec(dsn, "UPDATE kv SET v = 'v7' WHERE k < 5"))
    srv.stop()

    # 1. Down while the upstream changes; a restart resumes from the stored commit.
    pg_exec(dsn, "DELETE FROM kv WHERE k = 1", "INSERT INTO kv VALUES (500, 'v7')")
    srv = _start(spark, data, url)
    _same(srv, dsn, pg_exec(dsn, "UPDATE kv SET v = 'v7' WHERE k = 50"))
    assert srv.engine.follower.stats()["resnapshots"] == 0
    srv.stop()

    # 2. The slot dropped while we were down: copy again.
    pg_exec(dsn, f"SELECT pg_drop_replication_slot('{slot}')")
    pg_exec(dsn, "DELETE FROM kv WHERE k = 2", "INSERT INTO kv VALUES (501, 'v7')")
    srv = _start(spark, data, url)
    _same(srv, dsn, pg_exec(dsn, "UPDATE kv SET v = 'x' WHERE k = 3"))
    assert srv.engine.follower.stats()["resnapshots"] == 1
    srv.stop()

    # 3. The slot lost: more WAL than max_slot_wal_keep_size while we were down.
    pg_exec(dsn, "DELETE FROM kv WHERE k = 4", "INSERT INTO kv VALUES (502, 'v7')")
    try:
        with_autocommit(dsn, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'",
                        "SELECT pg_reload_conf()")
        for _ in range(4):
            pg_exec(dsn, "CREATE TEMP TABLE pad AS SELECT g FROM generate_series(1, 2000) g")
            with_autocommit(dsn, "SELECT pg_switch_wal()")
        with_autocommit(dsn, "CHECKPOINT")
        _wait_slot(dsn, slot, "lost")
    finally:
        with_autocommit(dsn, "ALTER SYSTEM RESET max_slot_wal_keep_size",
                        "SELECT pg_reload_conf()")
    srv = _start(spark, data, url)
    try:
        _same(srv, dsn, pg_exec(dsn, "UPDATE kv SET v = 'v7' WHERE k = 60"))
        follow = srv.engine.follower.stats()
        assert follow["resnapshots"] == 1 and follow["slot_status"] in ("reserved", "extended")
    finally:
        srv.stop()


def with_autocommit(dsn: str, *stmts: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        for s in stmts:
            con.execute(s)
