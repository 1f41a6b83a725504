"""The startup phase of a connection: SSLRequest (TLS), CancelRequest, the startup packet,
authentication (trust, or SCRAM-SHA-256 with the server's auth token as the password)."""

from __future__ import annotations

import hmac
import socket
import ssl
import struct
from typing import Any

from scramp import ScramException, ScramMechanism

from partialflow.server.pgwire import protocol as p
from partialflow.server.pgwire.errors import (
    FEATURE_NOT_SUPPORTED,
    INVALID_PASSWORD,
    PgError,
)


class Cancelled(Exception):
    """The connection carried a CancelRequest: handled, nothing more to do."""


def negotiate(sock: socket.socket, tls: ssl.SSLContext | None,
              cancel: Any) -> tuple[socket.socket, dict[str, str]]:
    """Read packets until the startup packet; returns the (maybe TLS) socket and its
    parameters. A CancelRequest is handed to ``cancel(pid, secret)`` (Cancelled raised)."""
    secured = False
    while True:
        code, payload = p.read_startup(sock)
        if code == p.SSL_REQUEST and not secured:
            if tls is None:
                sock.sendall(b"N")
                continue
            sock.sendall(b"S")
            sock = tls.wrap_socket(sock, server_side=True)
            secured = True
            continue
        if code == p.GSSENC_REQUEST:
            sock.sendall(b"N")
            continue
        if code == p.CANCEL_REQUEST:
            if len(payload) != 8:
                raise p.ProtocolViolation("invalid length of cancel request packet")
            pid, secret = struct.unpack("!ii", payload)
            cancel(pid, secret)
            raise Cancelled()
        if code >> 16 != 3:
            raise PgError(FEATURE_NOT_SUPPORTED,
                          f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
                          "server supports 3.0")
        params = p.startup_params(payload)
        unknown = [k for k in params if k.startswith("_pq_.")]
        if code & 0xFFFF or unknown:  # a newer minor version or protocol options: say 3.0
            sock.sendall(p.message(b"v", struct.pack("!ii", 0, len(unknown))
                                   + b"".join(p.cstr(k) for k in unknown)))
            params = {k: v for k, v in params.items() if not k.startswith("_pq_.")}
        if "user" not in params:
            raise PgError("28000", "no PostgreSQL user name specified in startup packet")
        return sock, params


def authenticate(sock: socket.socket, token: str | None) -> None:
    """Trust without a token; with one, SCRAM-SHA-256 with the token as the password
    (28P01 on a wrong one). Sends AuthenticationOk."""
    if token is None:
        sock.sendall(p.auth(0))
        return
    mech = ScramMechanism("SCRAM-SHA-256")
    info = mech.make_auth_info(token, iteration_count=4096)
    server = mech.make_server(lambda _user: info)
    sock.sendall(p.auth(10, p.cstr("SCRAM-SHA-256") + b"\0"))
    kind, payload = p.read_message(sock)
    if kind != b"p":
        raise p.ProtocolViolation(f"expected a SASL response, got message type {kind!r}")
    buf = p.Buffer(payload, "SASLInitialResponse")
    chosen = buf.cstr()
    n = buf.i32()
    first = buf._take(n) if n >= 0 else b""
    if chosen != "SCRAM-SHA-256":
        raise PgError(INVALID_PASSWORD, f"SASL mechanism {chosen!r} is not supported; "
                      "use SCRAM-SHA-256")
    try:
        _client_first(server, first.decode())
        sock.sendall(p.auth(11, server.get_server_first().encode()))
        kind, payload = p.read_message(sock)
        if kind != b"p":
            raise p.ProtocolViolation(f"expected a SASL response, got message type {kind!r}")
        server.set_client_final(payload.decode())
        final = server.get_server_final()
    except (ScramException, UnicodeDecodeError):
        raise PgError(INVALID_PASSWORD, "password authentication failed (the password is the "
                      "server's --auth-token)") from None
    sock.sendall(p.auth(12, final.encode()) + p.auth(0))


def _client_first(server: Any, text: str) -> None:
    """libpq and other PostgreSQL clients send an empty user name in SCRAM's first message
    (``n=,r=...``: the user is in the startup packet), which scramp refuses. It parses the
    message with a stand-in name, then keeps the bare message as sent: both sides sign that
    exact text."""
    header_end = text.find(",", text.find(",") + 1)
    bare = text[header_end + 1:]
    if header_end > 0 and bare.startswith("n=,"):
        server.set_client_first(text[:header_end + 1] + "n=*," + bare[3:])
        server.client_first_bare = bare
    else:
        server.set_client_first(text)


def check_secret(a: int, b: int) -> bool:
    return hmac.compare_digest(struct.pack("!i", a), struct.pack("!i", b))
