"""One client connection: the simple and extended query protocols over the router.

Per session: named statements and portals, cursors, settings, the open transaction, and
the LSN floor (the highest of its last answer's LSN, its last write's and
``partialflow.min_lsn``): every read waits for at least that LSN, so a session never reads
back in time and reads its own writes. Blocking reads run on a helper thread so a
CancelRequest (from another connection) can end the wait at once (57014); a Spark query
runs in its own job group, cancelled with it. Writes are never cancelled midway.
"""

from __future__ import annotations

import logging
import queue
import select
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partialflow.server.pgwire import protocol as p
from partialflow.server.pgwire import subscribe as subs
from partialflow.server.pgwire import types
from partialflow.server.pgwire.commands import Commands
from partialflow.server.pgwire.errors import (
    DUPLICATE_CURSOR,
    DUPLICATE_STATEMENT,
    INVALID_STATEMENT,
    QUERY_CANCELED,
    PgError,
    message_of,
    sqlstate,
)
from partialflow.server.pgwire.routing import Answer, Context, Router, Txn
from partialflow.server.pgwire.settings import REPORTED, Settings
from partialflow.server.pgwire.sqltext import first_words, param_count, split_statements
from partialflow.server.pgwire.subscribe import Stream

log = logging.getLogger("partialflow.pgwire")
ROW_WORDS = ("SELECT", "WITH", "VALUES", "(", "SHOW", "FETCH", "EXPLAIN", "SUBSCRIBE", "TABLE")


Outcome = Answer | Stream


@dataclass
class Statement:
    sql: str
    given: list[int]
    oids: list[int] | None = None
    columns: list[tuple[str, int]] | None = None
    described: bool = False


@dataclass
class Portal:
    statement: Statement
    params: list[Any]
    formats: list[int]
    outcome: Outcome | None = None
    columns: list[tuple[str, int]] | None = None
    pos: int = 0
    pending: list[tuple] = field(default_factory=list)


class _Worker:
    """A helper thread for blocking reads; abandoned (left to finish alone) on a cancel."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict, threading.Event] | None]
        self.jobs = queue.SimpleQueue()
        threading.Thread(target=self._run, name="pg-read", daemon=True).start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box["value"] = fn()
            except BaseException as err:  # noqa: BLE001 - handed back to the session
                box["error"] = err
            done.set()


class Session(Context):
    def __init__(self, sock: socket.socket, router: Router, params: dict[str, str],
                 pid: int, secret: int) -> None:
        self.sock = sock
        self.router = router
        self.engine = router.engine
        self.pid, self.secret = pid, secret
        self.settings = Settings(params)
        self.startup = dict(params)  # user and database, for the catalog's current_user & co
        self.statements: dict[str, Statement] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, subs.Cursor] = {}
        self.txn: Txn | None = None
        self.last_lsn = 0
        self.last_write = 0
        self.cancelled = threading.Event()
        self.out = bytearray()
        self._worker: _Worker | None = None
        self.commands = Commands(self)
        self.closed = False

    # -- context for the router -----------------------------------------------------------
    @property
    def floor(self) -> int:  # type: ignore[override]
        floor = max(self.last_lsn, self.last_write, self.settings.min_lsn)
        upstream = self.settings.values.get("partialflow.min_upstream_lsn")
        if upstream:  # wait for the followed PostgreSQL's commit (server/follow)
            follower = self.engine.follower
            if follower is None:
                raise PgError("55000", "partialflow.min_upstream_lsn: this server follows "
                              "no PostgreSQL (serve --follow URL)")
            floor = max(floor, follower.wait_for_text(
                upstream, self.engine.config.upquery_timeout, self.cancelled.is_set))
            if self.cancelled.is_set():  # a CancelRequest ended the wait
                raise PgError(QUERY_CANCELED, "canceling statement due to user request")
        return floor

    def read(self, fn: Callable[[], Any]) -> Any:
        if self.cancelled.is_set():
            raise PgError(QUERY_CANCELED, "canceling statement due to user request")
        worker = self._worker = self._worker or _Worker()
        box: dict[str, Any] = {}
        done = threading.Event()
        worker.jobs.put((fn, box, done))
        while not done.wait(0.05):
            if self.cancelled.is_set():
                worker.jobs.put(None)  # it ends once the abandoned call returns
                self._worker = None
                raise PgError(QUERY_CANCELED, "canceling statement due to user request")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def query_read(self, fn: Callable[[], Any]) -> Any:
        group = f"partialflow-pg-{uuid.uuid4().hex[:12]}"
        spark = self.engine.spark
        context = getattr(spark, "sparkContext", None) if spark is not None else None

        def run() -> Any:
            try:
                if context is not None:
                    context.setJobGroup(group, "partialflow postgres query", True)
                elif spark is not None:
                    spark.addTag(group)
            except Exception:  # Spark Connect without sparkContext: tags only
                pass
            return fn()

        try:
            return self.read(run)
        except PgError as err:
            if err.sqlstate == QUERY_CANCELED:
                try:
                    if context is not None:
                        context.cancelJobGroup(group)
                    elif spark is not None:
                        spark.interruptTag(group)
                except Exception:
                    log.warning("could not cancel Spark job group %s", group, exc_info=True)
            raise

    def cancel(self) -> None:
        self.cancelled.set()

    def note_read(self, lsn: int | None) -> None:
        if lsn is not None:
            self.last_lsn = max(self.last_lsn, lsn)

    def note_write(self, lsn: int | None) -> None:
        if lsn is not None:
            self.last_write = max(self.last_write, lsn)
            self.last_lsn = max(self.last_lsn, lsn)

    # -- output ---------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.out += data

    def flush(self) -> None:
        if self.out:
            data, self.out = bytes(self.out), bytearray()
            self.sock.sendall(data)

    def client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if readable and not hasattr(self.sock, "pending"):
                return self.sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def status(self) -> bytes:
        if self.txn is None:
            return b"I"
        return b"E" if self.txn.failed else b"T"

    def send_error(self, err: BaseException) -> None:
        code = sqlstate(err)
        if code == "XX000":
            log.error("internal error in a postgres session", exc_info=err)
        self.send(p.error_response(code, message_of(err)))
        if self.txn is not None:
            self.txn.failed = True

    def report(self, changed: tuple[str, str] | None) -> None:
        if changed is not None and changed[0] in REPORTED:
            self.send(p.parameter_status(*changed))

    def startup_messages(self) -> None:
        for name in REPORTED:
            self.send(p.parameter_status(name, self.settings.get(name)))
        self.send(p.backend_key(self.pid, self.secret))
        self.send(p.ready(b"I"))
        self.flush()

    # -- the message loop -----------------------------------------------------------------
    def serve(self) -> None:
        self.startup_messages()
        skipping = False  # after an error in the extended protocol, until Sync
        while True:
            kind, payload = p.read_message(self.sock)
            if kind == b"X":
                return
            if kind == b"Q":
                self.cancelled.clear()
                self.simple(p.Buffer(payload, "Query").cstr())
                self.send(p.ready(self.status()))
                self.flush()
                continue
            if kind == b"S":
                skipping = False
                self.send(p.ready(self.status()))
                self.flush()
                continue
            if kind == b"H":
                self.flush()
                continue
            if kind in (b"d", b"c", b"f"):  # COPY messages outside COPY IN are ignored
                continue
            if kind not in (b"P", b"B", b"D", b"E", b"C"):
                raise p.ProtocolViolation(f"invalid frontend message type {kind!r}")
            if skipping:
                continue
            try:
                self.extended(kind, payload)
            except p.ProtocolViolation:
                raise
            except Exception as err:
                self.send_error(err)
                skipping = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for cur in self.cursors.values():
            cur.close()
        for portal in self.portals.values():
            if isinstance(portal.outcome, Stream):
                portal.outcome.subscription.close()
        if self._worker is not None:
            self._worker.jobs.put(None)

    # -- simple query ---------------------------------------------------------------------
    def simple(self, sql: str) -> None:
        statements = split_statements(sql)
        if not statements:
            self.send(p.EMPTY_QUERY)
            return
        for text in statements:
            try:
                outcome = self.commands.run(text, [])
                if isinstance(outcome, Stream):
                    self.stream(outcome, None, None)
                else:
                    self.send_answer(outcome, None, None, len(outcome.rows))
            except Exception as err:
                if isinstance(err, p.ProtocolViolation):
                    raise
                self.send_error(err)
                return

    def send_answer(self, answer: Answer, formats: list[int] | None, portal: Portal | None,
                    limit: int) -> bool:
        """Rows (from ``portal.pos``) and the tag; False when suspended at ``limit``."""
        cols = portal.columns if portal is not None and portal.columns is not None else \
            answer.columns
        if portal is None and cols is not None:
            self.send(p.row_description([(n, o, 0) for n, o in cols]))
        start = portal.pos if portal is not None else 0
        end = len(answer.rows) if not limit else min(len(answer.rows), start + limit)
        if cols is not None:
            fmts = _formats(formats, len(cols))
            oids = [o for _, o in cols]
            for row in answer.rows[start:end]:
                self.send(p.data_row([types.encode(v, o, f)
                                      for v, o, f in zip(row, oids, fmts, strict=False)]))
        if portal is not None:
            portal.pos = end
            if end < len(answer.rows):
                self.send(p.PORTAL_SUSPENDED)
                return False
        self.send(p.command_complete(answer.tag))
        return True

    def stream(self, outcome: Stream, formats: list[int] | None, portal: Portal | None,
               limit: int = 0) -> None:
        """Rows of a SUBSCRIBE as they come, until cancelled (57014) or the client goes;
        with a row ``limit`` (Execute), suspend after that many."""
        cols = outcome.columns
        if outcome.copy:
            self.send(p.copy_out_response(len(cols)))
        elif portal is None:
            self.send(p.row_description([(n, o, 0) for n, o in cols]))
        if outcome.batches is None:
            outcome.batches = subs.stream(outcome.subscription, self.cancelled.is_set,
                                          self.client_gone)
        fmts = _formats(formats, len(cols))
        oids = [o for _, o in cols]
        sent = 0
        pending = portal.pending if portal is not None else []
        self.flush()
        try:
            while True:
                rows = pending[:] if pending else next(outcome.batches, None)
                pending.clear()
                if rows is None:
                    break
                for i, row in enumerate(rows):
                    if limit and sent == limit:
                        pending.extend(rows[i:])
                        self.send(p.PORTAL_SUSPENDED)
                        return
                    if outcome.copy:
                        self.send(p.copy_data(subs.copy_text(row)))
                    else:
                        self.send(p.data_row([types.encode(v, o, f) for v, o, f
                                              in zip(row, oids, fmts, strict=False)]))
                    sent += 1
                self.flush()
        except OSError:
            outcome.subscription.close()
            raise
        outcome.subscription.close()
        if self.cancelled.is_set():
            raise PgError(QUERY_CANCELED, "canceling statement due to user request")

    # -- extended query -------------------------------------------------------------------
    def extended(self, kind: bytes, payload: bytes) -> None:
        if kind == b"P":
            name, sql, oids = p.parse_parse(payload)
            if name and name in self.statements:
                raise PgError(DUPLICATE_STATEMENT, f'prepared statement "{name}" already exists')
            if len(split_statements(sql)) > 1:
                raise PgError("42601", "cannot insert multiple commands into a prepared "
                              "statement")
            self.statements[name] = Statement(sql, oids)
            self.send(p.PARSE_COMPLETE)
        elif kind == b"B":
            self.cancelled.clear()
            self.bind(p.parse_bind(payload))
            self.send(p.BIND_COMPLETE)
        elif kind == b"D":
            target, name = p.parse_target(payload, "Describe")
            if target == b"S":
                st = self._statement(name)
                oids, cols = self.describe(st)
                self.send(p.parameter_description(oids))
                self.send(p.row_description([(n, o, 0) for n, o in cols]) if cols is not None
                          else p.NO_DATA)
            elif name not in self.portals and name in self.cursors:  # a DECLAREd cursor
                cur_cols = self.cursors[name].columns
                self.send(p.row_description([(n, o, 0) for n, o in cur_cols]))
            else:
                portal = self._portal(name)
                cols = self.portal_columns(portal)
                self.send(p.row_description(
                    [(n, o, f) for (n, o), f in zip(cols, _formats(portal.formats, len(cols)),
                                                    strict=True)]) if cols is not None
                    else p.NO_DATA)
        elif kind == b"E":
            name, limit = p.parse_execute(payload)
            self.execute(self._portal(name), limit)
        elif kind == b"C":
            target, name = p.parse_target(payload, "Close")
            if target == b"S":
                self.statements.pop(name, None)
            else:
                closed = self.portals.pop(name, None)
                if closed is not None and isinstance(closed.outcome, Stream):
                    closed.outcome.subscription.close()
            self.send(p.CLOSE_COMPLETE)

    def _statement(self, name: str) -> Statement:
        st = self.statements.get(name)
        if st is None:
            raise PgError(INVALID_STATEMENT, f'prepared statement "{name}" does not exist')
        return st

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise PgError("34000", f'portal "{name}" does not exist')
        return portal

    def describe(self, st: Statement) -> tuple[list[int], list[tuple[str, int]] | None]:
        if not st.described:
            st.oids = None
            oids = self._param_oids(st)
            if self.commands.is_special(st.sql):
                st.columns = self.commands.describe_special(st.sql)
            elif st.columns == []:  # only known once run: run it with NULL parameters
                outcome = self.commands.run(st.sql, [None] * len(oids))
                st.columns = outcome.columns if isinstance(outcome, Answer) else None
            st.described = True
        assert st.oids is not None
        return st.oids, st.columns

    def _param_oids(self, st: Statement) -> list[int]:
        """The statement's parameter types, worked out once per statement (a view key's
        type where a parameter is compared with one)."""
        if st.oids is None:
            if self.commands.is_special(st.sql):
                st.oids = self.router.schema.param_oids(st.sql, st.given)
            else:
                st.oids, st.columns = self.router.describe(st.sql, st.given)
        return st.oids

    def bind(self, bind: p.Bind) -> None:
        st = self._statement(bind.statement)
        if bind.portal and bind.portal in self.portals:
            raise PgError(DUPLICATE_CURSOR, f'portal "{bind.portal}" already exists')
        need = max(param_count(st.sql), len(st.given))
        if len(bind.params) != need:
            raise p.ProtocolViolation(f"bind message supplies {len(bind.params)} parameters, "
                                      f"but prepared statement \"{bind.statement}\" requires "
                                      f"{need}")
        if len(bind.param_formats) not in (0, 1, need):
            raise p.ProtocolViolation(f"bind message has {len(bind.param_formats)} parameter "
                                      f"formats but {need} parameters")
        oids = self._param_oids(st) if need else []
        fmts = _formats(bind.param_formats, need)
        params = []
        for i, raw in enumerate(bind.params):
            given = st.given[i] if i < len(st.given) else 0
            params.append(types.decode(raw, given, fmts[i], oids[i]))
        old = self.portals.pop(bind.portal, None)
        if old is not None and isinstance(old.outcome, Stream):
            old.outcome.subscription.close()
        self.portals[bind.portal] = Portal(st, params, bind.result_formats)

    def portal_columns(self, portal: Portal) -> list[tuple[str, int]] | None:
        """A portal's result columns: a statement that returns rows is run now."""
        if portal.columns is None and portal.outcome is None:
            words = first_words(portal.statement.sql, 1)
            if words and (words[0] in ROW_WORDS or self.commands.returns_rows(words[0])):
                portal.outcome = self.commands.run(portal.statement.sql, portal.params)
                portal.columns = self._columns(portal)
        return portal.columns

    def _columns(self, portal: Portal) -> list[tuple[str, int]] | None:
        """The portal's columns: those its statement was described with when the client
        saw them (it decodes by those OIDs), else the outcome's."""
        assert portal.outcome is not None
        got, st = portal.outcome.columns, portal.statement
        if st.described and st.columns and got is not None and len(st.columns) == len(got):
            return st.columns
        return got

    def execute(self, portal: Portal, limit: int) -> None:
        if portal.outcome is None:
            portal.outcome = self.commands.run(portal.statement.sql, portal.params)
            portal.columns = self._columns(portal)
        if isinstance(portal.outcome, Stream):
            self.stream(portal.outcome, portal.formats, portal, limit)
        else:
            self.send_answer(portal.outcome, portal.formats, portal, limit)


def _formats(formats: list[int] | None, n: int) -> list[int]:
    if not formats:
        return [0] * n
    if len(formats) == 1:
        return formats * n
    return formats
