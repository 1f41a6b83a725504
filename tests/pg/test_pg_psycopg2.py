"""psycopg2 (libpq, the simple protocol with client-side parameters) against the listener:
reads by key and writes, compared with Spark SQL at the session's LSN."""

from __future__ import annotations

import psycopg2
import psycopg2.errors
import pytest
from pg_helpers import canon, lsn_of, spark_rows


def test_psycopg2_reads_writes_and_errors(pg_dsn, server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE, on_ BOOLEAN)")
    cur.execute(f"INSERT INTO {t} VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)",
                (1, "ann", 2.5, True, 2, "bob's", None, False))
    cur.execute(f"CREATE VIEW {v} AS SELECT id, name, score, on_ FROM {t} WHERE name = ?")
    for name in ("ann", "bob's", "nobody"):
        cur.execute(f"SELECT * FROM {v} WHERE name = %s", (name,))
        rows = cur.fetchall()
        quoted = name.replace("'", "\\'")
        assert canon(rows) == spark_rows(
            server, f"SELECT id, name, score, on_ FROM {t} WHERE name = '{quoted}'", lsn_of(conn))
    cur.execute(f"SELECT * FROM {v} WHERE name = %s", ("bob's",))
    assert cur.fetchall() == [(2, "bob's", None, False)]
    assert [d[0] for d in cur.description] == ["id", "name", "score", "on_"]
    # Transactions (psycopg2 opens one implicitly without autocommit).
    conn.autocommit = False
    cur.execute(f"UPDATE {t} SET score = 7 WHERE id = 2")
    cur.execute(f"INSERT INTO {t} VALUES (3, 'ann', 1, true)")
    conn.commit()
    cur.execute(f"SELECT id, score FROM {v} WHERE name = 'ann'")
    assert sorted(cur.fetchall()) == [(1, 2.5), (3, 1.0)]
    conn.rollback()
    with pytest.raises(psycopg2.errors.UniqueViolation):
        cur.execute(f"INSERT INTO {t} VALUES (1, 'dup', 0, true)")
        conn.commit()
    conn.rollback()
    conn.autocommit = True
    cur.execute(f"SELECT id, score FROM {t} ORDER BY id")
    assert cur.fetchall() == [(1, 2.5), (2, 7.0), (3, 1.0)]
    conn.close()
