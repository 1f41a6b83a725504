"""kill -9 of a following server while upstream transactions stream in, then a restart:
it resumes from the upstream commit stored with its last write, nothing lost or doubled,
and every view equals the upstream's answer to the same SQL at the reported commit."""

from __future__ import annotations

import threading
import time

from follow_helpers import pg_exec, pg_rows

DB = "fl_crash"
DDL = [
    "CREATE TABLE item (id bigint PRIMARY KEY, grp int NOT NULL, v int NOT NULL)",
    "INSERT INTO item SELECT g, g % 5, 0 FROM generate_series(1, 200) g",
    "CREATE TABLE audit (id bigint PRIMARY KEY, item bigint NOT NULL, delta int NOT NULL)",
]


def _writer(dsn: str, stop: threading.Event, done: list[int]) -> None:
    """Multi-table upstream transactions, one after another, until stopped."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        n = 0
        while not stop.is_set():
            n += 1
            with con.transaction():
                con.execute("UPDATE item SET v = v + 1 WHERE id = %s", (n % 200 + 1,))
                con.execute("INSERT INTO audit VALUES (%s, %s, 1)", (n, n % 200 + 1))
                if n % 7 == 0:
                    con.execute("DELETE FROM audit WHERE id = %s", (n - 3,))
            done[0] = n
            time.sleep(0.005)


def _wait(cond, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_kill9_while_streaming_then_restart_matches_upstream(pgup, tmp_path):
    from helpers import ServerProcess

    dsn = pgup.database(DB, DDL)
    proc = ServerProcess(tmp_path / "data",
                         args=("--follow", pgup.url(DB), "--checkpoint-interval", "1"))
    stop, done = threading.Event(), [0]
    writer = threading.Thread(target=_writer, args=(dsn, stop, done), daemon=True)
    try:
        proc.start()
        client = proc.client(timeout=180)
        _wait(lambda: client.stats()["follow"]["state"] == "streaming", "never streaming")
        client.execute("CREATE VIEW fc_grp AS SELECT grp, SUM(v) AS total, COUNT(*) AS n "
                       "FROM item WHERE grp = ? GROUP BY grp")
        client.execute("CREATE VIEW fc_item AS SELECT i.id, i.v, COUNT(a.id) AS audits "
                       "FROM item i JOIN audit a ON a.item = i.id WHERE i.id = ? "
                       "GROUP BY i.id, i.v")
        for g in range(5):
            client.lookup("fc_grp", (g,))
        writer.start()
        _wait(lambda: client.stats()["follow"]["transactions_applied"] > 50,
              "no transaction applied")
        proc.kill()  # SIGKILL, mid-stream
        time.sleep(1.0)  # the upstream goes on meanwhile
        stop.set()
        writer.join(10)
        at = pg_exec(dsn, "SELECT 1")
        proc.restart()
        # Generous: the restarted server reads the followed tables' keys back with Spark
        # (a fresh JVM) before it streams again.
        client = proc.client(timeout=180)
        _wait(lambda: client.stats()["follow"]["state"] == "streaming",
              "not streaming after the restart", timeout=180)
        for g in range(5):
            got = client.lookup("fc_grp", (g,), min_upstream_lsn=at)
            assert got.rows == pg_rows(dsn, "SELECT grp, SUM(v), COUNT(*) FROM item "
                                       "WHERE grp = %s GROUP BY grp", (g,)), g
        for i in (1, 2, 100, 200):
            got = client.lookup("fc_item", (i,), min_upstream_lsn=at)
            assert sorted(got.rows) == pg_rows(
                dsn, "SELECT i.id, i.v, COUNT(a.id) FROM item i JOIN audit a "
                "ON a.item = i.id WHERE i.id = %s GROUP BY i.id, i.v", (i,)), i
        for sql in ("SELECT id, grp, v FROM item", "SELECT id, item, delta FROM audit"):
            assert sorted(client.query(sql).rows) == pg_rows(dsn, sql), sql
        follow = client.stats()["follow"]
        assert follow["resnapshots"] == 0 and follow["state"] == "streaming"
    except Exception as err:
        raise AssertionError(f"{err}\n--- server log:\n{proc.log_tail(80)}") from err
    finally:
        stop.set()
        proc.stop()
