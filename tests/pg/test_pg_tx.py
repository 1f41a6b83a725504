"""BEGIN .. COMMIT over several tables through the PostgreSQL listener: one write at one
LSN (a view joining both tables never sees half of it), statement order kept, ROLLBACK
and refused commits writing nothing."""

from __future__ import annotations

import psycopg
import pytest
from pg_helpers import lsn_of, spark_rows
from psycopg import errors as pgerr


def test_transaction_over_two_tables_is_one_write(pg_dsn, server, uniq) -> None:
    a, b, v = f"{uniq}acc_a", f"{uniq}acc_b", f"{uniq}acc_total"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {a} (id BIGINT PRIMARY KEY, bal BIGINT)")
        conn.execute(f"CREATE TABLE {b} (id BIGINT PRIMARY KEY, bal BIGINT)")
        conn.execute(f"INSERT INTO {a} VALUES (1, 100), (2, 100)")
        conn.execute(f"INSERT INTO {b} VALUES (1, 100), (2, 100)")
        conn.execute(f"CREATE VIEW {v} AS SELECT a.id, a.bal + b.bal AS total FROM {a} a "
                     f"JOIN {b} b ON a.id = b.id WHERE a.id = ?")
        assert conn.execute(f"SELECT * FROM {v} WHERE id = 1").fetchall() == [(1, 200)]
        start = lsn_of(conn)
        with psycopg.connect(pg_dsn) as tx:  # psycopg sends BEGIN
            tx.execute(f"UPDATE {a} SET bal = bal - 30 WHERE id = 1")
            tx.execute(f"UPDATE {b} SET bal = bal + 30 WHERE id = 1")
            tx.execute(f"INSERT INTO {a} VALUES (3, 5)")
            tx.execute(f"INSERT INTO {b} VALUES (3, 5)")
            tx.execute(f"DELETE FROM {b} WHERE id = 2")  # then back, in statement order
            tx.execute(f"INSERT INTO {b} VALUES (2, 100)")
            tx.commit()
            lsn = lsn_of(tx)
        assert lsn == start + 1  # one write for both tables
        assert spark_rows(server, f"SELECT id, bal FROM {a}", lsn - 1) == [(1, 100), (2, 100)]
        assert spark_rows(server, f"SELECT id, bal FROM {a}", lsn) == [(1, 70), (2, 100), (3, 5)]
        assert spark_rows(server, f"SELECT id, bal FROM {b}", lsn) == [(1, 130), (2, 100), (3, 5)]
        rows = [conn.execute(f"SELECT * FROM {v} WHERE id = {i}").fetchall() for i in (1, 2, 3)]
        assert rows == [[(1, 200)], [(2, 200)], [(3, 10)]]
        # ROLLBACK writes nothing; a commit refused (a deleted row gone meanwhile) neither.
        with psycopg.connect(pg_dsn) as tx:
            tx.execute(f"INSERT INTO {a} VALUES (4, 1)")
            tx.execute(f"DELETE FROM {b} WHERE id = 3")
            tx.rollback()
            tx.execute(f"INSERT INTO {a} VALUES (5, 1)")
            tx.execute(f"DELETE FROM {b} WHERE id = 3")
            conn.execute(f"DELETE FROM {b} WHERE id = 3")  # another session takes it first
            after = server.engine.storage.last_lsn
            with pytest.raises(pgerr.SerializationFailure):
                tx.commit()
        assert server.engine.storage.last_lsn == after
        assert spark_rows(server, f"SELECT id FROM {a} WHERE id >= 4", after) == []
