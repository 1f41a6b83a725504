"""Documented SQL semantics that differ between engines, pinned (docs/sql-reference.md): ``/``
divides as Spark does (7 / 2 = 3.5, never integer division), and FLOAT / REAL name DOUBLE
in CAST as in CREATE TABLE. Views and ``query()`` agree on both."""

from __future__ import annotations


def test_division_is_spark_division_and_real_is_double(server, uniq):
    t = f"{uniq}t"
    select = (
        f"SELECT k, v / 2 AS half, 7 / 2 AS lit, v % 2 AS odd, CAST(v AS REAL) / 2 AS r, "
        f"CAST(0.1 AS REAL) AS tenth, CAST(0.1 AS FLOAT) AS tenth_f FROM {t}"
    )
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        lsn = c.insert(t, [(1, 7)])
        c.execute(f"CREATE VIEW {uniq}v AS {select} WHERE k = ?")
        got = c.lookup(f"{uniq}v", 1, min_lsn=lsn)
        # 0.1 as a 32-bit float would read back as 0.10000000149011612.
        assert got.rows == [(1, 3.5, 3.5, 1, 3.5, 0.1, 0.1)]
        assert c.query(f"{select} WHERE k = 1", as_of=got.lsn).rows == got.rows
