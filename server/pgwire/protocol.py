"""PostgreSQL protocol 3.0 framing: reading frontend messages, building backend ones.

A small codec of our own rather than pygwire: pygwire 0.2 needs Python >= 3.11 (the package
supports 3.10), is marked beta ("API may change"), and its sans-IO state machine would sit
beside the session's own state (extended-protocol error recovery, COPY OUT of a SUBSCRIBE)
rather than replace it. The framing itself is a type byte, a length and a few fields; the
bug-prone parts (value encodings, SCRAM, TLS) come from psycopg, scramp and ssl.

Every malformed frame raises ``ProtocolViolation`` (SQLSTATE 08P01): the session answers it
with an ErrorResponse and closes, as PostgreSQL does.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

PROTOCOL_3_0 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# Frames larger than this are refused before they are read: a client's claimed length must
# not make the server allocate gigabytes. PostgreSQL's own limit is 1 GB; ours is smaller
# because every value is held in memory several times on its way to a write.
MAX_MESSAGE = 64 * 1024 * 1024
MAX_STARTUP = 10_000  # PostgreSQL's MAX_STARTUP_PACKET_LENGTH

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_HDR = struct.Struct("!ci")


class ProtocolViolation(Exception):
    """The client broke the framing: SQLSTATE 08P01, and the connection ends."""

    sqlstate = "08P01"


class ClientGone(Exception):
    """The client closed the connection (EOF in the middle of nothing or of a frame)."""


def read_exact(sock: socket.socket, n: int) -> bytes:
    parts = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ClientGone()
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def read_startup(sock: socket.socket) -> tuple[int, bytes]:
    """A startup-phase packet (no type byte): its code and the rest of its payload."""
    (length,) = _I32.unpack(read_exact(sock, 4))
    if length < 8 or length > MAX_STARTUP:
        raise ProtocolViolation(f"invalid length of startup packet: {length}")
    body = read_exact(sock, length - 4)
    (code,) = _I32.unpack(body[:4])
    return code, body[4:]


def read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    """One typed frontend message: (type byte, payload)."""
    kind, length = _HDR.unpack(read_exact(sock, 5))
    if length < 4:
        raise ProtocolViolation(f"invalid message length {length} for message type {kind!r}")
    if length - 4 > MAX_MESSAGE:
        raise ProtocolViolation(
            f"message of {length} bytes is larger than the limit of {MAX_MESSAGE} bytes")
    return kind, read_exact(sock, length - 4)


class Buffer:
    """Reads the fields of one payload; running off its end is a protocol violation."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation(f"{self.what} message is too short")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def byte(self) -> bytes:
        return self._take(1)

    def cstr(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation(f"{self.what} message has an unterminated string")
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ProtocolViolation(f"{self.what} message has a string that is not UTF-8") from None

    def count(self) -> int:
        n = self.i16()
        if n < 0:
            raise ProtocolViolation(f"{self.what} message has a negative count {n}")
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolViolation(f"{self.what} message has {len(self.data) - self.pos} "
                                    "bytes too many")


def startup_params(payload: bytes) -> dict[str, str]:
    buf = Buffer(payload, "startup")
    out: dict[str, str] = {}
    while True:
        key = buf.cstr()
        if not key:
            break
        out[key] = buf.cstr()
    return out


@dataclass
class Bind:
    portal: str
    statement: str
    param_formats: list[int]
    params: list[bytes | None]
    result_formats: list[int]


def parse_parse(payload: bytes) -> tuple[str, str, list[int]]:
    buf = Buffer(payload, "Parse")
    name, query = buf.cstr(), buf.cstr()
    oids = [buf.i32() & 0xFFFFFFFF for _ in range(buf.count())]
    buf.end()
    return name, query, oids


def parse_bind(payload: bytes) -> Bind:
    buf = Buffer(payload, "Bind")
    portal, statement = buf.cstr(), buf.cstr()
    formats = [buf.i16() for _ in range(buf.count())]
    params: list[bytes | None] = []
    for _ in range(buf.count()):
        n = buf.i32()
        params.append(None if n == -1 else buf._take(n))
    results = [buf.i16() for _ in range(buf.count())]
    buf.end()
    for f in formats + results:
        if f not in (0, 1):
            raise ProtocolViolation(f"unsupported format code: {f}")
    return Bind(portal, statement, formats, params, results)


def parse_target(payload: bytes, what: str) -> tuple[bytes, str]:
    """Describe and Close: ('S' or 'P', name)."""
    buf = Buffer(payload, what)
    kind = buf.byte()
    name = buf.cstr()
    buf.end()
    if kind not in (b"S", b"P"):
        raise ProtocolViolation(f"invalid {what} message subtype {kind!r}")
    return kind, name


def parse_execute(payload: bytes) -> tuple[str, int]:
    buf = Buffer(payload, "Execute")
    portal = buf.cstr()
    limit = buf.i32()
    buf.end()
    return portal, max(0, limit)


# -- backend messages ----------------------------------------------------------------------


def message(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + _I32.pack(len(payload) + 4) + payload


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def auth(code: int, data: bytes = b"") -> bytes:
    return message(b"R", _I32.pack(code) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key(pid: int, secret: int) -> bytes:
    return message(b"K", _I32.pack(pid) + _I32.pack(secret))


def ready(status: bytes) -> bytes:
    return message(b"Z", status)


def row_description(columns: Sequence[tuple[str, int, int]]) -> bytes:
    """(name, type OID, format) per column."""
    parts = [_I16.pack(len(columns))]
    for name, oid, fmt in columns:
        size = {16: 1, 20: 8, 701: 8}.get(oid, -1)
        parts.append(cstr(name) + struct.pack("!ihihih", 0, 0, oid, size, -1, fmt))
    return message(b"T", b"".join(parts))


def data_row(values: Sequence[bytes | None]) -> bytes:
    parts = [_I16.pack(len(values))]
    for v in values:
        if v is None:
            parts.append(_I32.pack(-1))
        else:
            parts.append(_I32.pack(len(v)) + v)
    return message(b"D", b"".join(parts))


def parameter_description(oids: Sequence[int]) -> bytes:
    return message(b"t", _I16.pack(len(oids)) + b"".join(struct.pack("!I", o) for o in oids))


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def error_response(code: str, text: str, severity: str = "ERROR", **extra: str) -> bytes:
    fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", text)]
    fields += [(k.encode(), v) for k, v in extra.items()]
    return message(b"E", b"".join(k + cstr(v) for k, v in fields) + b"\0")


def notice(text: str) -> bytes:
    fields = [(b"S", "NOTICE"), (b"V", "NOTICE"), (b"C", "00000"), (b"M", text)]
    return message(b"N", b"".join(k + cstr(v) for k, v in fields) + b"\0")


def copy_out_response(ncols: int) -> bytes:
    return message(b"H", b"\0" + _I16.pack(ncols) + _I16.pack(0) * ncols)


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
PORTAL_SUSPENDED = message(b"s")
EMPTY_QUERY = message(b"I")
COPY_DONE = message(b"c")
