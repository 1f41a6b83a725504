"""The extended query protocol message by message (what libpq does not expose): typed
ParameterDescription, Execute with a row limit and PortalSuspended, named portals, Close,
error recovery until Sync; and psycopg's named (server-side) cursors."""

from __future__ import annotations

import socket
import struct

import psycopg
from pg_helpers import canon
from test_pg_fuzz import cstr, msg, read_until, sqlstate, startup_packet


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(startup_packet())
    got, closed = read_until(sock, 10)
    assert not closed and got[-1] == (b"Z", b"I")
    return sock


def test_row_limits_portals_and_error_recovery(pg_dsn, pg_port, server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {t} (k BIGINT, s TEXT)")
        conn.execute(f"INSERT INTO {t} VALUES (1, 'a'), (1, 'b'), (1, 'c'), (2, 'd')")
        conn.execute(f"CREATE VIEW {v} AS SELECT k, s FROM {t} WHERE k = ?")
    sock = connect(pg_port)
    q = f"SELECT s FROM {v} WHERE k = $1"
    sock.sendall(msg(b"P", cstr("st") + cstr(q) + struct.pack("!h", 0))
                 + msg(b"D", b"S" + cstr("st"))
                 + msg(b"B", cstr("por") + cstr("st") + struct.pack("!h", 0)
                       + struct.pack("!hi", 1, 1) + b"1" + struct.pack("!h", 0))
                 + msg(b"E", cstr("por") + struct.pack("!i", 2))
                 + msg(b"E", cstr("por") + struct.pack("!i", 2))
                 + msg(b"C", b"P" + cstr("por")) + msg(b"S", b""))
    got, closed = read_until(sock, 60)
    kinds = [k for k, _ in got]
    assert kinds == [b"1", b"t", b"T", b"2", b"D", b"D", b"s", b"D", b"C", b"3", b"Z"], got
    assert got[1][1] == struct.pack("!hI", 1, 20)  # $1 is the key's type: int8
    rows = [p[6:].decode() for k, p in got if k == b"D"]
    assert sorted(rows) == ["a", "b", "c"]
    assert got[8][1] == cstr("SELECT 3")
    # An error skips everything up to Sync; the statement kept its name.
    sock.sendall(msg(b"B", cstr("") + cstr("nope") + struct.pack("!hh", 0, 0) + b"\0\0")
                 + msg(b"E", cstr("") + struct.pack("!i", 0))
                 + msg(b"S", b"")
                 + msg(b"B", cstr("") + cstr("st") + struct.pack("!hhi", 0, 1, 1) + b"2"
                       + struct.pack("!h", 0))
                 + msg(b"E", cstr("") + struct.pack("!i", 0)) + msg(b"S", b""))
    got, _ = read_until(sock, 30)
    assert [k for k, _ in got] == [b"E", b"Z"] and sqlstate(got[0][1]) == "26000"
    got, _ = read_until(sock, 30)
    assert [k for k, _ in got] == [b"2", b"D", b"C", b"Z"]
    sock.sendall(msg(b"X", b""))
    sock.close()


def test_named_cursor_fetches_in_batches(pg_dsn, server, uniq):
    t = f"{uniq}t"
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"CREATE TABLE {t} (k BIGINT, s TEXT)")
        conn.execute(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, 's{i}')" for i in range(7)))
        conn.commit()
        with conn.cursor(name="batches") as cur:  # DECLARE ... CURSOR, FETCH FORWARD n
            cur.itersize = 3
            cur.execute(f"SELECT k, s FROM {t}")
            rows = list(cur)
        assert canon(rows) == [(i, f"s{i}") for i in range(7)]
