"""Copy then stream: one shared upstream database and one in-process server following it.

The upstream is written to while the server starts (the copy's snapshot and the stream
must meet with nothing lost or doubled), then each test changes its own rows upstream and
compares what is here with PostgreSQL's answer to the same SQL."""

from __future__ import annotations

import random
import threading
import time

import pytest
from follow_helpers import catch_up, our_rows, pg_exec, pg_rows, wait_streaming

DB = "fl_stream"
DDL = [
    "CREATE TABLE acct (id bigint PRIMARY KEY, owner text NOT NULL, bal int NOT NULL, "
    "seen timestamptz DEFAULT now(), vip boolean, score float8)",
    "INSERT INTO acct (id, owner, bal, vip, score) SELECT g, 'o' || (g % 7), 1000, g % 2 = 0, "
    "g / 3.0 FROM generate_series(1, 300) g",
    # The other half of each transfer (a cross-table invariant: bal + moved is constant).
    "CREATE TABLE moved (id bigint PRIMARY KEY, acct bigint NOT NULL, amount int NOT NULL)",
    "CREATE TABLE doc (id int PRIMARY KEY, n int NOT NULL, body text)",
    "CREATE TABLE events (kind text, n int)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
    "INSERT INTO events VALUES ('a', 1), ('a', 1), ('b', 2)",
    "CREATE TABLE nokey (a int, b text)",
    "CREATE TABLE shape (id int PRIMARY KEY, a text)",
    "CREATE TABLE wiped (id int PRIMARY KEY, v text)",
    "INSERT INTO wiped SELECT g, 'v' || g FROM generate_series(1, 50) g",
]


def _churn(dsn: str, stop: threading.Event, counts: list[int]) -> None:
    """Upstream writes while the copy runs: inserts, updates and deletes of acct."""
    import psycopg

    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as con:
        next_id = 10_000
        while not stop.is_set():
            with con.transaction():
                con.execute("INSERT INTO acct (id, owner, bal) VALUES (%s, 'churn', 1)",
                            (next_id,))
                con.execute("UPDATE acct SET bal = bal + 1 WHERE id = %s",
                            (rng.randint(1, 300),))
                con.execute("DELETE FROM acct WHERE id = %s", (next_id - 5,))
            next_id += 1
            counts[0] += 1
            time.sleep(0.05)  # well below what is applied per second here


@pytest.fixture(scope="module")
def fl(pgup, spark, tmp_path_factory):
    from helpers import InProcessServer

    dsn = pgup.database(DB, DDL)
    stop, counts = threading.Event(), [0]
    writer = threading.Thread(target=_churn, args=(dsn, stop, counts), daemon=True)
    writer.start()
    srv = InProcessServer(tmp_path_factory.mktemp("follow") / "data", spark,
                          follow=pgup.url(DB)).start()
    try:
        wait_streaming(srv.engine.follower)
        time.sleep(0.5)  # some writes after the copy too
        stop.set()
        writer.join(10)
        assert counts[0] > 0
        yield srv, dsn
    finally:
        stop.set()
        srv.stop()


def test_copy_with_writes_during_it_neither_loses_nor_doubles(fl):
    srv, dsn = fl
    f = srv.engine.follower
    lsn = catch_up(f, pg_exec(dsn, "SELECT 1"))
    sql = "SELECT id, owner, bal, vip, score FROM acct"
    assert our_rows(srv.engine, sql, as_of=lsn) == pg_rows(dsn, sql)
    # Timestamps keep PostgreSQL's text form (UTC).
    assert our_rows(srv.engine, "SELECT id, seen FROM acct WHERE id = 1") == \
        pg_rows(dsn, "SELECT id, seen::text FROM acct WHERE id = 1")
    stats = f.stats()
    assert stats["transactions_applied"] > 0 and stats["slot_status"] in ("reserved",
                                                                          "extended")


def test_stream_matches_upstream_views(fl):
    srv, dsn = fl
    client = srv.client()
    client.execute("CREATE VIEW fl_by_owner AS SELECT id, bal, vip FROM acct WHERE owner = ?")
    client.execute("CREATE VIEW fl_owner_total AS SELECT owner, SUM(bal) AS total, "
                   "COUNT(*) AS n FROM acct GROUP BY owner")
    for owner in ("o1", "o2"):  # fill the views' state before the changes
        client.lookup("fl_by_owner", (owner,))
    at = pg_exec(dsn,
                 "UPDATE acct SET bal = bal - 7, vip = NOT vip WHERE owner = 'o1' AND id < 100",
                 "DELETE FROM acct WHERE owner = 'o2' AND id > 250",
                 "INSERT INTO acct (id, owner, bal) VALUES (5001, 'o1', 5), (5002, 'o2', 6)",
                 "UPDATE acct SET id = 5003 WHERE id = 5002")  # a key change
    lsn = catch_up(srv.engine.follower, at)
    for owner in ("o1", "o2", "o3"):
        got = client.lookup("fl_by_owner", (owner,), min_lsn=lsn)
        assert sorted(got.rows) == pg_rows(
            dsn, "SELECT id, bal, vip FROM acct WHERE owner = %s", (owner,))
    got = client.lookup("fl_owner_total", (), min_lsn=lsn)
    assert sorted(got.rows) == pg_rows(
        dsn, "SELECT owner, SUM(bal), COUNT(*) FROM acct GROUP BY owner")


def test_multi_table_transactions_atomic_in_commit_order(fl):
    """Each upstream transfer moves an amount out of acct into moved in ONE transaction:
    at every LSN here, sum(bal) + sum(amount) is the same: it fails if an upstream
    transaction is applied as one write per table."""
    srv, dsn = fl
    total = "SELECT (SELECT SUM(bal) FROM acct) + (SELECT COALESCE(SUM(amount), 0) FROM moved)"
    base = pg_rows(dsn, total)[0][0]
    start = srv.engine.storage.last_lsn
    at = ""
    for i in range(3):
        at = pg_exec(dsn, f"UPDATE acct SET bal = bal - {i + 1} WHERE id = {i + 1}",
                     f"INSERT INTO moved VALUES ({i + 1}, {i + 1}, {i + 1})")
    end = catch_up(srv.engine.follower, at)
    assert end >= start + 3
    for lsn in range(start + 1, end + 1):
        assert our_rows(srv.engine, total, as_of=lsn) == \
            [(base,)], f"invariant broken at LSN {lsn}"


def test_followed_tables_are_read_only_here(fl):
    srv, _ = fl
    from partialflow.client.errors import PartialflowError

    client = srv.client()
    with pytest.raises(PartialflowError, match=r"read-only here: it follows postgresql://"):
        client.insert("acct", [(99999, "x", 1, None, None, None)])
    with pytest.raises(PartialflowError, match=r"read-only"):
        client.execute("INSERT INTO moved VALUES (99999, 1, 1)")


def test_unchanged_toast_value_kept(fl):
    """An update that leaves a large (out-of-line) value alone: pgoutput sends it as
    'unchanged'; the row here keeps it."""
    srv, dsn = fl
    body = "".join(random.Random(3).choice("abcdefghijklmnopqrstuvwxyz0123456789")
                   for _ in range(20_000))  # incompressible enough to be stored out of line
    pg_exec(dsn, f"INSERT INTO doc VALUES (1, 0, '{body}')")
    at = pg_exec(dsn, "UPDATE doc SET n = n + 1 WHERE id = 1")
    lsn = catch_up(srv.engine.follower, at)
    assert our_rows(srv.engine, "SELECT id, n, body FROM doc", as_of=lsn) == \
        pg_rows(dsn, "SELECT id, n, body FROM doc") == [(1, 1, body)]


def test_table_without_key_needs_replica_identity_full(fl):
    srv, dsn = fl
    f = srv.engine.follower
    assert "REPLICA IDENTITY FULL" in f.stats()["refused"]["nokey"]
    at = pg_exec(dsn, "UPDATE events SET n = 5 WHERE kind = 'b'",
                 "DELETE FROM events WHERE kind = 'a'", "INSERT INTO events VALUES ('c', 3)")
    lsn = catch_up(f, at)
    assert our_rows(srv.engine, "SELECT kind, n FROM events", as_of=lsn) == \
        pg_rows(dsn, "SELECT kind, n FROM events")


def test_truncate(fl):
    srv, dsn = fl
    at = pg_exec(dsn, "TRUNCATE wiped", "INSERT INTO wiped VALUES (7, 'after')")
    lsn = catch_up(srv.engine.follower, at)
    assert our_rows(srv.engine, "SELECT id, v FROM wiped", as_of=lsn) == \
        pg_rows(dsn, "SELECT id, v FROM wiped") == [(7, "after")]


def test_column_change_upstream_refuses_the_table_never_applies_wrong_rows(fl):
    srv, dsn = fl
    f = srv.engine.follower
    lsn = catch_up(f, pg_exec(dsn, "INSERT INTO shape VALUES (1, 'one')"))
    before = our_rows(srv.engine, "SELECT id, a FROM shape", as_of=lsn)
    assert before == [(1, "one")]
    at = pg_exec(dsn, "ALTER TABLE shape ADD COLUMN b int",
                 "INSERT INTO shape VALUES (2, 'two', 2)",
                 "UPDATE acct SET bal = bal + 1 WHERE id = 300")
    lsn = catch_up(f, at)
    assert "columns changed upstream" in f.stats()["refused"]["shape"]
    assert "shape" not in f.stats()["tables"]
    assert our_rows(srv.engine, "SELECT id, a FROM shape", as_of=lsn) == before
    # The other tables go on.
    assert our_rows(srv.engine, "SELECT bal FROM acct WHERE id = 300", as_of=lsn) == \
        pg_rows(dsn, "SELECT bal FROM acct WHERE id = 300")
    # A table no longer applied may be dropped here (to copy it again after a restart).
    from partialflow.server.errors import NotFound

    srv.client().execute("DROP TABLE shape")
    with pytest.raises(NotFound):
        srv.engine.storage.table("shape")


def test_writes_to_another_database_do_not_grow_the_slot(fl, pgup):
    srv, dsn = fl
    f = srv.engine.follower
    other = pgup.database("fl_other", ["CREATE TABLE junk (id int, pad text)"])
    at = pg_exec(other, "INSERT INTO junk SELECT g, repeat('x', 200) FROM generate_series(1, "
                 "20000) g")
    catch_up(f, at)  # the walsender's position passes it with nothing to apply here
    deadline = time.monotonic() + 30
    while True:
        (flushed,) = pg_rows(dsn, "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM "
                             "pg_replication_slots WHERE slot_name = %s", (at, f.slot))[0]
        if flushed:
            break
        assert time.monotonic() < deadline, "the slot's confirmed position stayed behind"
        time.sleep(0.2)


def test_upstream_restart_reads_served_then_resumes(fl, pgup):
    srv, dsn = fl
    f = srv.engine.follower
    client = srv.client()
    client.execute("CREATE VIEW fl_bal AS SELECT bal FROM acct WHERE id = ?")
    lsn = catch_up(f, pg_exec(dsn, "UPDATE acct SET bal = 4242 WHERE id = 42"))
    assert client.lookup("fl_bal", (42,), min_lsn=lsn).rows == [(4242,)]
    pgup.restart(down_for=1.0)
    # Served while the upstream was away, exact at the last applied commit.
    assert client.lookup("fl_bal", (42,)).rows == [(4242,)]
    at = pg_exec(dsn, "UPDATE acct SET bal = 4343 WHERE id = 42")
    lsn = catch_up(f, at, timeout=60)
    assert client.lookup("fl_bal", (42,), min_lsn=lsn).rows == [(4343,)]
    assert f.stats()["retries"] >= 1


def test_min_upstream_lsn_reads_your_upstream_writes(fl):
    """An application writes upstream, then reads here with the position it got back:
    the answer includes its write, and says which upstream position it is exact at."""
    import psycopg

    from partialflow.client.errors import InvalidArgument
    from partialflow.server.app.main import pg_port_of
    from partialflow.server.follow import parse_lsn

    srv, dsn = fl
    client = srv.client()
    client.execute("CREATE VIEW fl_ryw AS SELECT id, bal FROM acct WHERE id = ?")
    client.lookup("fl_ryw", (7,))
    for i in range(4):
        at = pg_exec(dsn, f"UPDATE acct SET bal = {7000 + i} WHERE id IN (7, 8)")
        got = client.lookup("fl_ryw", (7,), min_upstream_lsn=at)
        assert got.rows == [(7, 7000 + i)]
        assert parse_lsn(got.upstream_lsn) >= parse_lsn(at)
        many = client.lookup_many("fl_ryw", [(7,), (8,)], min_upstream_lsn=at)
        assert [r.rows for r in many.values()] == [[(7, 7000 + i)], [(8, 7000 + i)]]
    # The PostgreSQL protocol: the same wait, as a session setting.
    at = pg_exec(dsn, "UPDATE acct SET bal = 7777 WHERE id = 7")
    port = pg_port_of(srv.server)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=t dbname=partialflow",
                         autocommit=True) as con:
        con.execute(f"SET partialflow.min_upstream_lsn = '{at}'")
        assert con.execute("SELECT id, bal FROM fl_ryw WHERE id = 7").fetchall() == \
            [(7, 7777)]
        with pytest.raises(psycopg.Error, match="pg_lsn"):
            con.execute("SET partialflow.min_upstream_lsn = 'soon'")
    with pytest.raises(InvalidArgument, match="min_upstream_lsn"):
        client.lookup("fl_ryw", (7,), min_upstream_lsn="soon")


def test_status_reports_replication(fl):
    import subprocess
    import sys

    srv, dsn = fl
    follow = srv.client().stats()["follow"]
    assert follow["state"] == "streaming" and follow["slot_status"] in ("reserved", "extended")
    assert follow["transactions_applied"] > 0 and follow["rows_applied"] > 0
    assert follow["last_applied_upstream_lsn"] and "acct" in follow["tables"]
    assert "REPLICA IDENTITY FULL" in follow["refused"]["nokey"]
    out = subprocess.run([sys.executable, "-m", "partialflow.client.cli", "status",
                          "--server", srv.address], capture_output=True, text=True,
                         check=True).stdout
    assert "state: streaming" in out and "upstream: postgresql://" in out
    assert "refused nokey:" in out


def test_drop_of_a_followed_table_is_refused(fl):
    """DROP TABLE of a table being followed is refused, naming the upstream (over gRPC:
    FAILED_PRECONDITION; over the PostgreSQL protocol: 55000, as writes to it are), and
    the table stays, still followed."""
    import psycopg

    from partialflow.client.errors import FailedPrecondition
    from partialflow.server.app.main import pg_port_of

    srv, dsn = fl
    client = srv.client()
    with pytest.raises(FailedPrecondition, match=r"moved follows postgresql://.*cannot be "
                       r"dropped"):
        client.execute("DROP TABLE moved")
    port = pg_port_of(srv.server)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=t dbname=partialflow",
                         autocommit=True) as con:
        with pytest.raises(psycopg.Error) as err:
            con.execute("DROP TABLE IF EXISTS moved")
        assert err.value.sqlstate == "55000" and "postgresql://" in str(err.value)
        with pytest.raises(psycopg.Error) as err:
            con.execute("INSERT INTO moved VALUES (99998, 1, 1)")
        assert err.value.sqlstate == "55000"
    at = pg_exec(dsn, "INSERT INTO moved VALUES (4242, 1, 42)")
    lsn = catch_up(srv.engine.follower, at)
    assert our_rows(srv.engine, "SELECT id, acct, amount FROM moved", as_of=lsn) == \
        pg_rows(dsn, "SELECT id, acct, amount FROM moved")


def _pos(text: str) -> int:
    from partialflow.server.follow import parse_lsn

    return parse_lsn(text)


def test_every_answer_says_its_upstream_position(fl):
    """lookup, lookup_many, query (at the latest LSN and as_of an earlier one) and
    subscription events carry Result.upstream_lsn: at or past the commit they include,
    never past the upstream's position when asked, and the rows are PostgreSQL's there."""
    srv, dsn = fl
    client = srv.client()
    client.execute("CREATE VIEW fl_up AS SELECT id, bal FROM acct WHERE id = ?")
    before = pg_exec(dsn, "UPDATE acct SET bal = 111 WHERE id IN (11, 12)")
    lsn_before = catch_up(srv.engine.follower, before)
    at = pg_exec(dsn, "UPDATE acct SET bal = 222 WHERE id IN (11, 12)")
    many = client.lookup_many("fl_up", [(11,), (12,)], min_upstream_lsn=at)
    now = _pos(pg_rows(dsn, "SELECT pg_current_wal_insert_lsn()::text")[0][0])
    for key, got in many.items():
        assert got.rows == [(key[0], 222)]
        assert _pos(at) <= _pos(got.upstream_lsn) <= now
    sql = "SELECT id, bal FROM acct WHERE id IN (11, 12)"
    latest = client.query(sql)
    assert sorted(latest.rows) == pg_rows(dsn, sql) == [(11, 222), (12, 222)]
    assert _pos(at) <= _pos(latest.upstream_lsn)
    old = client.query(sql, as_of=lsn_before)
    assert sorted(old.rows) == [(11, 111), (12, 111)]
    assert _pos(before) <= _pos(old.upstream_lsn) < _pos(at)
    # Subscriptions: the snapshot and each change say their upstream position.
    sub = client.subscribe("fl_up", [(11,)])
    try:
        events = iter(sub)
        snap = next(events)
        assert snap.rows[(11,)] == [(11, 222)] and _pos(snap.upstream_lsn) >= _pos(at)
        changed = pg_exec(dsn, "UPDATE acct SET bal = 333 WHERE id = 11")
        deadline = time.monotonic() + 30
        while True:
            event = next(events)
            if type(event).__name__ == "Change":
                break
            assert time.monotonic() < deadline, "no change event"
        assert event.inserted == [(11, 333)] and _pos(event.upstream_lsn) >= _pos(changed)
        assert sub.upstream_lsn == event.upstream_lsn
    finally:
        sub.close()


def test_min_upstream_lsn_wait_over_pgwire_ends_on_cancel(fl):
    """A PostgreSQL-protocol read waiting for an upstream position that is far off ends
    at once on a CancelRequest with 57014 (not at the read's deadline)."""
    import psycopg

    from partialflow.server.app.main import pg_port_of

    srv, _ = fl
    srv.client().execute("CREATE VIEW fl_cancel AS SELECT id, bal FROM acct WHERE id = ?")
    port = pg_port_of(srv.server)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=t dbname=partialflow",
                         autocommit=True) as con:
        con.execute("SET partialflow.min_upstream_lsn = 'FF/0'")  # never reached here
        # cancel_safe: libpq's blocking PQcancel holds the GIL, and the server runs in
        # this process.
        timer = threading.Timer(0.5, con.cancel_safe)
        timer.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled, match="user request"):
                con.execute("SELECT id, bal FROM fl_cancel WHERE id = 1")
        finally:
            timer.cancel()
        # The session goes on: without the setting, the read answers.
        con.execute("RESET partialflow.min_upstream_lsn")
        assert con.execute("SELECT id FROM fl_cancel WHERE id = 1").fetchall() == [(1,)]
