"""Protocol fuzz test of the PostgreSQL listener: Hypothesis-made frontend messages (random
type bytes and payloads, valid messages mutated, truncated frames, wrong lengths, huge
values, bad startup packets) sent as raw bytes over real connections.

Invariants, per example:
- every ErrorResponse carries a SQLSTATE, never XX000 (internal error);
- a connection the server closes ends with an ErrorResponse (08P01 for a framing error);
- a connection left open answers a Sync with ReadyForQuery (no hung session);
- a fresh connection is served after every example, sessions of closed sockets go away;
- nothing is written: the messages only read, and the last LSN never moves.

Generation is seeded (deterministic in CI); PARTIALFLOW_PG_FUZZ_SECONDS bounds the run
(default 20). The number of messages sent is printed in the pytest summary.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import Counter

import psycopg
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

# A user property of this name, (title, line), is printed in the run's closing summary
# (tests/conftest.py), from an xdist worker too.
SUMMARY = "partialflow_summary"
FUZZ_SECONDS = float(os.environ.get("PARTIALFLOW_PG_FUZZ_SECONDS", "20"))
TYPES = b"PBDECSHQXdcfp"


def msg(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!i", len(payload) + 4) + payload


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def startup_packet(user: str = "fuzz") -> bytes:
    body = struct.pack("!i", 196608) + cstr("user") + cstr(user) + b"\0"
    return struct.pack("!i", len(body) + 4) + body


def templates(view: str, table: str) -> list[bytes]:
    q = f"SELECT * FROM {view} WHERE k = $1"
    return [
        msg(b"Q", cstr(f"SELECT * FROM {view} WHERE k = 1")),
        msg(b"Q", cstr("SHOW partialflow.lsn; SET application_name = 'f'")),
        msg(b"Q", cstr(f"SELECT k, v FROM {view} WHERE k IN (1, 2)")),
        msg(b"P", cstr("s1") + cstr(q) + struct.pack("!hi", 1, 20)),
        msg(b"P", cstr("") + cstr(q) + struct.pack("!h", 0)),
        msg(b"B", cstr("") + cstr("") + struct.pack("!hh", 1, 0) + struct.pack("!hi", 1, 1)
            + b"2" + struct.pack("!hh", 1, 1)),
        msg(b"B", cstr("p") + cstr("s1") + struct.pack("!hh", 1, 1) + struct.pack("!hi", 1, 8)
            + struct.pack("!q", 2) + struct.pack("!h", 0)),
        msg(b"D", b"S" + cstr("s1")), msg(b"D", b"P" + cstr("")),
        msg(b"E", cstr("") + struct.pack("!i", 0)), msg(b"E", cstr("p") + struct.pack("!i", 1)),
        msg(b"C", b"S" + cstr("s1")), msg(b"C", b"P" + cstr("p")),
        msg(b"H", b""), msg(b"S", b""),
    ]


def mutate(data: bytes, how: str, pos: int, byte: int, length: int) -> bytes:
    if not data:
        return data
    pos %= len(data)
    if how == "flip":
        return data[:pos] + bytes([byte]) + data[pos + 1:]
    if how == "truncate":  # the length field kept: the frame claims more than is sent
        return data[:max(1, pos)]
    if how == "relength":  # a wrong length field, the rest as it was
        return data[:1] + struct.pack("!i", length) + data[5:]
    if how == "cut":  # a consistent but short frame: fields run off its end
        body = data[5:5 + pos]
        return data[:1] + struct.pack("!i", len(body) + 4) + body
    return data


message = st.one_of(
    st.tuples(st.just("raw"), st.sampled_from(list(TYPES) + [ord("Z"), 0, 255]),
              st.binary(max_size=64)),
    st.tuples(st.just("mutated"), st.integers(0, 14),
              st.tuples(st.sampled_from(["flip", "truncate", "relength", "cut", "none"]),
                        st.integers(0, 200), st.integers(0, 255),
                        st.sampled_from([-1, 0, 3, 4, 5, 1 << 20, 0x7FFFFFFF]))),
    st.tuples(st.just("huge"), st.sampled_from(["query", "bind", "length"]), st.just(b"")),
)


def read_until(sock: socket.socket, timeout: float) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Backend messages until ReadyForQuery or close: (messages, closed)."""
    sock.settimeout(timeout)
    buf = b""
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while len(buf) >= 5:
            (n,) = struct.unpack("!i", buf[1:5])
            if len(buf) < 1 + n:
                break
            out.append((buf[:1], buf[5:1 + n]))
            buf = buf[1 + n:]
            if out[-1][0] == b"Z":
                return out, False
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            return out, True
        if not chunk:
            return out, True
        buf += chunk
    return out, False


def sqlstate(payload: bytes) -> str:
    for field in payload.split(b"\0"):
        if field[:1] == b"C":
            return field[1:].decode()
    return ""


@pytest.fixture(scope="module")
def fuzz_setup(pg_dsn, server):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pgfz_t (k BIGINT PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO pgfz_t VALUES (1, 'a'), (2, 'b')")
        conn.execute("CREATE VIEW IF NOT EXISTS pgfz_v AS SELECT k, v FROM pgfz_t WHERE k = ?")
        conn.execute("SELECT * FROM pgfz_v WHERE k IN (1, 2, 20)").fetchall()
    return "pgfz_v", "pgfz_t"


def test_protocol_fuzz(fuzz_setup, pg_port, server, request):
    view, table = fuzz_setup
    tmpl = templates(view, table)
    listener = server.engine and __import__(
        "partialflow.server.app.main", fromlist=["x"])._WIRING[server.server].pg
    lsn = server.engine.storage.last_lsn
    stats: Counter[str] = Counter()
    start = time.monotonic()

    @seed(20261127)
    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(message, min_size=1, max_size=6), st.booleans())
    def run(messages, bad_startup):
        if time.monotonic() - start > FUZZ_SECONDS:
            return

        sock = socket.create_connection(("127.0.0.1", pg_port), timeout=10)
        try:
            if bad_startup:
                stats["messages"] += 1
                sock.sendall(struct.pack("!ii", 8, 12345678))
                got, closed = read_until(sock, 5)
                assert closed and got and got[-1][0] == b"E", got
                assert sqlstate(got[-1][1]) == "0A000"
                return
            sock.sendall(startup_packet())
            got, closed = read_until(sock, 10)
            assert not closed and got[-1][0] == b"Z"
            data = b""
            for kind, a, b in messages:
                if kind == "raw":
                    data += msg(bytes([a]), b) if a != ord("X") else b""
                elif kind == "mutated":
                    how, pos, byte, length = b
                    data += mutate(tmpl[a], how, pos, byte, length)
                elif a == "query":
                    data += msg(b"Q", cstr("SELECT '" + "x" * 300_000 + "'"))
                elif a == "bind":
                    data += msg(b"P", cstr("") + cstr(f"SELECT * FROM {view} WHERE k = $1")
                                + struct.pack("!h", 0))
                    big = b"9" * 1_000_000
                    data += msg(b"B", cstr("") + cstr("") + struct.pack("!hh", 0, 1)
                                + struct.pack("!i", len(big)) + big + struct.pack("!h", 0))
                else:
                    data += b"Q" + struct.pack("!i", 0x7FFFFFF0)
                stats["messages"] += 1
            data += msg(b"S", b"")
            try:
                sock.sendall(data)
            except OSError:
                stats["closed"] += 1
                return
            # A frame claiming more bytes than were sent is still being read: no answer
            # comes, and the session must end when the socket closes (checked at the end).
            got, closed = read_until(sock, 3)
            errors = [sqlstate(p) for k, p in got if k == b"E"]
            stats.update(f"sqlstate {c}" for c in errors)
            assert "XX000" not in errors and all(len(c) == 5 for c in errors), errors
            if closed:
                stats["closed"] += 1
                assert got and got[-1][0] == b"E", got  # a FATAL says why
            elif not got or got[-1][0] != b"Z":
                # A frame that claims more bytes than were sent keeps the server reading:
                # it must let go once the client does.
                stats["incomplete"] += 1
        finally:
            sock.close()

    run()
    with psycopg.connect(f"host=127.0.0.1 port={pg_port} user=x", autocommit=True) as conn:
        assert conn.execute(f"SELECT v FROM {view} WHERE k = 1").fetchall() == [("a",)]
    deadline = time.monotonic() + 20
    while listener.connections() > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listener.connections() == 0, "sessions of closed connections linger"
    assert server.engine.storage.last_lsn == lsn, "a fuzzed message wrote something"
    line = (f"{stats['messages']} postgres protocol messages in {time.monotonic() - start:.1f}s;"
            f" {stats['closed']} connections closed by the server, {stats['incomplete']} "
            f"left incomplete; " + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())
                                             if k.startswith("sqlstate")))
    request.node.user_properties.append((SUMMARY, ("postgres protocol fuzz", line)))
    print("\n" + line)
    assert stats["messages"] > 100
