"""The PostgreSQL listener: a socket beside the gRPC server, one thread per connection.

A thread per connection fits the engine, whose calls block (group commit, fills, Spark);
the grpc server beside it is a thread pool too. CancelRequests arrive on connections of
their own and are matched to a session by its process id and secret.
"""

from __future__ import annotations

import logging
import secrets
import socket
import ssl
import threading
from typing import Any

from partialflow.server.errors import Unavailable
from partialflow.server.pgwire import protocol as p
from partialflow.server.pgwire.catalog import Catalog
from partialflow.server.pgwire.errors import TOO_MANY_CONNECTIONS, PgError, message_of, sqlstate
from partialflow.server.pgwire.routing import Router
from partialflow.server.pgwire.session import Session
from partialflow.server.pgwire.startup import Cancelled, authenticate, check_secret, negotiate

log = logging.getLogger("partialflow.pgwire")
MAX_CONNECTIONS = 200
STARTUP_TIMEOUT = 30.0  # seconds a connection may take to authenticate


class PgListener:
    """Accepts connections on (host, port) and serves each on its own thread."""

    @staticmethod
    def bind(host: str, port: int) -> socket.socket:
        """A listening socket on (host, port); Unavailable naming the option if taken."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
            sock.listen(128)
        except OSError as err:
            sock.close()
            raise Unavailable(f"cannot listen for postgres on {host}:{port}: {err.strerror} "
                              "(--pg-port; 0 picks a free port, off disables it)") from None
        return sock

    def __init__(self, engine: Any, sock: socket.socket, *, tls_cert: str | None = None,
                 tls_key: str | None = None, auth_token: str | None = None) -> None:
        self.engine = engine
        self.router = Router(engine, Catalog(engine))
        self.auth_token = auth_token
        self.tls: ssl.SSLContext | None = None
        if tls_cert is not None and tls_key is not None:
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(tls_cert, tls_key)
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self._sessions: dict[int, Session] = {}
        self._lock = threading.Lock()
        self._next_pid = secrets.randbelow(1 << 20) + 1000
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PgListener:
        self._thread = threading.Thread(target=self._accept, name="pg-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close every session's socket (their threads then end)."""
        self._stopped.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            try:
                s.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), name="pg-session",
                             daemon=True).start()

    def cancel(self, pid: int, secret: int) -> None:
        with self._lock:
            session = self._sessions.get(pid)
        if session is not None and check_secret(session.secret, secret):
            session.cancel()

    def _serve(self, conn: socket.socket) -> None:
        sock: socket.socket = conn
        session: Session | None = None
        try:
            conn.settimeout(STARTUP_TIMEOUT)
            sock, params = negotiate(conn, self.tls, self.cancel)
            authenticate(sock, self.auth_token)
            sock.settimeout(None)
            with self._lock:
                if len(self._sessions) >= MAX_CONNECTIONS:
                    raise PgError(TOO_MANY_CONNECTIONS, "sorry, too many clients already")
                self._next_pid += 1
                pid = self._next_pid
                session = Session(sock, self.router, params, pid, secrets.randbits(31))
                self._sessions[pid] = session
            session.serve()
        except (Cancelled, p.ClientGone, ConnectionError, TimeoutError, ssl.SSLError):
            pass
        except Exception as err:  # a protocol violation or a startup refusal: say it, close
            code = sqlstate(err)
            if code == "XX000":
                log.exception("postgres session failed")
            try:
                if session is not None:
                    session.out.clear()
                sock.sendall(p.error_response(code, message_of(err), "FATAL"))
                _drain(sock)
            except OSError:
                pass
        finally:
            if session is not None:
                with self._lock:
                    self._sessions.pop(session.pid, None)
                session.close()
            try:
                sock.close()
            except OSError:
                pass

    def connections(self) -> int:
        with self._lock:
            return len(self._sessions)


def _drain(sock: socket.socket, seconds: float = 1.0, limit: int = 4 << 20) -> None:
    """Close our side, then read what the client still sends for a moment: closing a
    socket with unread input makes TCP reset the connection, and a reset can destroy the
    FATAL ErrorResponse (and answers before it) before the client reads them."""
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(seconds)
    got = 0
    while got < limit:
        chunk = sock.recv(65536)
        if not chunk:
            return
        got += len(chunk)
