"""The follower: an upstream PostgreSQL's tables kept here as read-only base tables.

Start (``start``): read the upstream catalog, create the followed tables here (refusing
those no column type maps, or without a key and REPLICA IDENTITY FULL) and mark them
read-only in the engine. Then a thread runs sessions until ``close``:

1. Without a stored upstream LSN, or when the slot is gone or ``lost``: a new slot is
   created with an exported snapshot, every table is copied inside that snapshot through
   the bulk-load path, and what changed is written with the slot's consistent point as
   the upstream LSN (``_snapshot``).
2. ``START_REPLICATION`` from the stored upstream LSN (PostgreSQL starts at the later of
   it and the slot's confirmed position; commits at or below it are skipped here too).
   Each upstream transaction becomes ONE write carrying its commit's end LSN, submitted
   without waiting for the one before (``inflight``: they share fsyncs); only once it is
   durable, in commit order, is the LSN acknowledged upstream as flushed and do readers
   waiting for it wake (``position``).
3. Any error (upstream down or restarting, the slot lost) ends the session; the next one
   starts after a backoff (0.5 s doubling to 10 s). Reads are served all along, exact at
   the last applied commit.
Idle, the walsender's position (keepalives) is acknowledged too: other databases' writes
never make the slot grow.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from partialflow.server.errors import FailedPrecondition
from partialflow.server.follow import pgoutput as po
from partialflow.server.follow.changes import Inconsistent, Shadow, TableTxn, multiset_diff
from partialflow.server.follow.copy import copy_tables
from partialflow.server.follow.inflight import Entry, InFlight
from partialflow.server.follow.lsn import format_lsn, parse_lsn
from partialflow.server.follow.position import Position
from partialflow.server.follow.state import load_state, redact, save_state
from partialflow.server.follow.typemap import (
    RowDecoder,
    UpstreamTable,
    read_tables,
    relation_check,
    same_shape,
)
from partialflow.server.storage.record import TableChange

log = logging.getLogger(__name__)

# Both sessions print dates and times alike, whatever the upstream's defaults.
SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres"
BACKOFF_MIN, BACKOFF_MAX = 0.5, 10.0
# Upstream commits submitted here and not yet durable, at most (1: one at a time).
IN_FLIGHT = int(os.environ.get("PARTIALFLOW_FOLLOW_IN_FLIGHT") or 16)


class Follower:
    """Follows one upstream database; ``stats``, ``wait_for`` and ``upstream_at`` are what
    the service and the PostgreSQL front end ask of it."""

    def __init__(self, engine: Any, url: str, tables: Sequence[str] | None = None) -> None:
        self.engine = engine
        self.url = url
        self.name = redact(url)
        self.wanted = [t.strip() for t in tables or () if t.strip()] or None
        self._dir = Path(engine.config.data_dir)
        state = load_state(self._dir)
        if state and state.get("upstream") != self.name:
            raise FailedPrecondition(
                f"the data directory follows {state.get('upstream')}, not {self.name}; "
                "use another --data directory to follow another database")
        ident = (state or {}).get("slot") or f"partialflow_{uuid.uuid4().hex[:12]}"
        self.slot = ident
        self.publication = ident
        self._state = state or {"upstream": self.name, "slot": ident, "tables": []}
        self.tables: dict[str, UpstreamTable] = {}
        self.refused: dict[str, str] = {}
        self._by_oid: dict[int, str] = {}
        self._decoders: dict[str, RowDecoder] = {}
        self._shadows: dict[str, Shadow] = {}
        self._lock = threading.Lock()  # _status
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The last upstream commit durable here; submitted here (maybe not yet durable);
        # acknowledged upstream.
        self.applied: int | None = engine.storage.upstream_lsn
        self._submitted = self._flushed = self._acked = self.applied or 0
        self.pos = Position(self.applied, int(engine.storage.last_lsn))
        self._pipe: InFlight | None = None
        self._last_ticket: Any = None  # the newest submitted commit (Engine.WriteTicket)
        self._status: dict[str, Any] = dict(
            state="starting", error="", rows_applied=0, transactions_applied=0, resnapshots=0,
            retries=0, lag_seconds=0.0, server_lsn=0, slot_status="", copy="",
            last_commit_time="")

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Follower:
        """Read the upstream catalog and make the tables here, then follow in a thread.

        An upstream that cannot be reached fails the start, unless this data directory
        already follows it (then the tables are served as they are while it retries)."""
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True, options=SESSION_OPTIONS,
                                 connect_timeout=10) as con:
                self._setup(con)
        except psycopg.Error as err:
            if not self._state.get("tables"):
                raise FailedPrecondition(
                    f"cannot follow {self.name}: {str(err).strip()}") from None
            log.warning("upstream unreachable at start; serving the tables as they are",
                        extra={"upstream": self.name, "error": str(err).strip()})
            for name in self._state["tables"]:
                self.engine.read_only[name.lower()] = self.name
        self._thread = threading.Thread(target=self._run, name="follow", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)

    def _save_state(self) -> None:
        save_state(self._dir, self._state)

    def _setup(self, con: Any) -> None:
        tables, refused, _oids = read_tables(con, self.wanted)
        if self.wanted and refused:
            raise FailedPrecondition("cannot follow " + "; ".join(
                f"table {t}: {why}" for t, why in refused.items()))
        for name, why in refused.items():
            log.warning("upstream table not followed", extra={"table": name, "reason": why})
        storage = self.engine.storage
        for name, table in list(tables.items()):
            try:
                have = storage.table(name)
            except Exception:  # noqa: BLE001 - NotFound: make it
                storage.create_table(table.schema)
                continue
            if not same_shape(have, table.schema) or have.primary_key != table.key:
                cols = [", ".join(f"{c.name} {c.type}" for c in t.columns)
                        for t in (table.schema, have)]
                refused[name] = (f"its columns upstream ({cols[0]}) differ from the table "
                                 f"here ({cols[1]})")
                del tables[name]
        self.tables, self.refused = tables, refused
        for name in tables:
            self.engine.read_only[name.lower()] = self.name
            self._decoders[name] = RowDecoder(tables[name])
        self._state["tables"] = sorted(set(self._state.get("tables", [])) | set(tables))
        self._save_state()

    # -- sessions -----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_MIN
        while not self._stop.is_set():
            try:
                self._session()
                backoff = BACKOFF_MIN
            except Exception as err:  # noqa: BLE001 - every failure is retried, and shown
                message = str(err).strip() or type(err).__name__
                self._set(state="retrying", error=message)
                self._status["retries"] += 1
                log.warning("following the upstream failed; retrying",
                            extra={"upstream": self.name, "error": message, "in_s": backoff})
                if self._stop.wait(backoff):
                    break
                backoff = min(BACKOFF_MAX, backoff * 2)

    def _set(self, **kw: Any) -> None:
        with self._lock:
            self._status.update(kw)

    def _session(self) -> None:
        import psycopg
        import psycopg2
        from psycopg2.extras import LogicalReplicationConnection

        rconn = psycopg2.connect(self.url, connection_factory=LogicalReplicationConnection,
                                 options=SESSION_OPTIONS, connect_timeout=10)
        try:
            with psycopg.connect(self.url, autocommit=True, options=SESSION_OPTIONS,
                                 connect_timeout=10) as sql:
                if not self.tables and not self.refused:
                    self._setup(sql)
                slot = sql.execute(
                    "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                    (self.slot,)).fetchone()
                reason = self._state.get("resnapshot")
                if self.applied is None:
                    reason = "initial copy"
                elif slot is None:
                    reason = (f"the replication slot {self.slot} is gone upstream (dropped "
                              "while we were away?)")
                elif slot[0] == "lost":
                    reason = (f"the replication slot {self.slot} was lost upstream (its WAL "
                              "went past max_slot_wal_keep_size)")
                if reason is not None:
                    self._snapshot(rconn, sql, slot is not None, reason)
                self._load_shadows()
                self._stream(rconn, sql)
        finally:
            rconn.close()

    def _snapshot(self, rconn: Any, sql: Any, slot_exists: bool, reason: str) -> None:
        import psycopg

        log.warning("copying the upstream tables", extra={"reason": reason,
                                                          "upstream": self.name})
        self._set(state="copying", error="" if reason == "initial copy" else reason)
        if slot_exists:
            sql.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        sql.execute(f'DROP PUBLICATION IF EXISTS "{self.publication}"')
        listed = ", ".join(f'public."{t}"' for t in self.tables)
        sql.execute(f'CREATE PUBLICATION "{self.publication}"' +
                    (f" FOR TABLE {listed}" if listed else ""))
        cur = rconn.cursor()
        cur.execute(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
        _, consistent, snapshot, _ = cur.fetchone()
        point = parse_lsn(consistent)
        with psycopg.connect(self.url, options=SESSION_OPTIONS, connect_timeout=10) as copy:
            copy.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            copy.read_only = True
            copy.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
            copied = copy_tables(self.engine, copy, list(self.tables.values()),
                                 lambda text: self._set(copy=text))
        changes = []
        first = self.applied is None  # nothing stored yet: the tables here are empty
        for name, rows in copied.items():
            deletes, inserts = multiset_diff([] if first else self._stored_rows(name), rows)
            if deletes or inserts:
                changes.append(TableChange(name, inserts, deletes))
        lsn = self.pos.last_write_lsn
        if changes:
            lsn = self.engine.write_many(changes, upstream_lsn=point, origin="follow")
            self.pos.submitted(lsn, point)
        for name, rows in copied.items():
            if self.tables[name].key:
                self._shadows[name] = Shadow(self.tables[name], rows)
        self.applied = self._submitted = point
        self.pos.durable(lsn if changes else None, point)
        if self._state.pop("resnapshot", None):
            self._save_state()
        if reason != "initial copy":
            self._status["resnapshots"] += 1
        log.info("copied the upstream tables", extra={
            "tables": len(copied), "rows": sum(map(len, copied.values())), "lsn": lsn,
            "upstream_lsn": format_lsn(point)})
        self._set(copy="")

    def _stored_rows(self, name: str) -> list[tuple]:
        """The table's rows here, read by Spark (at start and for a resnapshot only)."""
        result = self.engine.query(f"SELECT * FROM `{name}`")
        return [tuple(r) for r in result.rows]

    def _load_shadows(self) -> None:
        for name, table in self.tables.items():
            if table.key and name not in self._shadows:
                self._shadows[name] = Shadow(table, self._stored_rows(name))

    # -- streaming ----------------------------------------------------------------------

    def _stream(self, rconn: Any, sql: Any) -> None:
        cur = rconn.cursor()
        start = self.applied or 0
        cur.start_replication(slot_name=self.slot, decode=False, start_lsn=start,
                              status_interval=1, options={
                                  "proto_version": "1", "publication_names": self.publication})
        self._set(state="streaming", error="")
        log.info("streaming from the upstream", extra={
            "upstream": self.name, "slot": self.slot, "from": format_lsn(start)})
        pipe = self._pipe = InFlight(IN_FLIGHT, self._durable, self._reordered)
        self._last_ticket = None  # a new session follows nothing refused in the last one
        try:
            self._receive(cur, sql)
        finally:
            pipe.close()  # every submitted commit settled, durable or refused
            self._submitted = self.applied or 0
            if pipe.error is not None:
                # The shadows hold refused commits: read them again from what is stored.
                self._shadows.clear()
                self.pos.failed()
            try:
                self._ack(cur)
            except Exception:  # noqa: BLE001 - the connection is gone: the next one resumes
                pass

    def _receive(self, cur: Any, sql: Any) -> None:
        txn: dict[str, TableTxn] | None = None
        last_reply = last_poll = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_poll >= 1.0:
                self._poll(sql)
                last_poll = now
            msg = cur.read_message()
            if msg is None:
                if txn is None:
                    self._idle(cur)
                self._ack(cur)
                pace = 0.02 if self.pos.waiters else 1.0
                if now - last_reply >= pace:
                    cur.send_feedback(reply=True)
                    last_reply = now
                select.select([cur], [], [], min(pace, 0.5))
                continue
            m = po.decode(msg.payload)
            if isinstance(m, po.Begin):
                txn = {}
            elif isinstance(m, po.Commit):
                self._commit(txn or {}, m)
                txn = None
                self._ack(cur)
            elif isinstance(m, po.Relation):
                self._relation(m)
            elif isinstance(m, (po.Insert, po.Update, po.Delete, po.Truncate)):
                if txn is None:
                    raise Inconsistent("a change outside a transaction")
                self._change(txn, m)

    def _poll(self, sql: Any) -> None:
        row = sql.execute(
            "SELECT pg_current_wal_lsn(), (SELECT wal_status FROM pg_replication_slots "
            "WHERE slot_name = %s)", (self.slot,)).fetchone()
        self._set(server_lsn=parse_lsn(row[0]), slot_status=row[1] or "missing")

    def _idle(self, cur: Any) -> None:
        """Nothing buffered, no transaction open and nothing in flight: all WAL the
        walsender has read is applied, so its position is ours too (and acknowledged: the
        slot must not grow with other databases' writes)."""
        assert self._pipe is not None
        end = int(cur.wal_end or 0)
        if end > self.pos.caught_up and not self._pipe.busy():
            self.pos.durable(None, end)
            self._flushed = max(self._flushed, end)

    def _ack(self, cur: Any) -> None:
        """Tell the upstream how far we have got durably (it may recycle WAL up to there)."""
        done = self._flushed
        if done > self._acked:
            cur.send_feedback(write_lsn=done, flush_lsn=done, apply_lsn=done)
            self._acked = done

    def _relation(self, m: po.Relation) -> None:
        name = m.name if m.namespace == "public" else None
        if name is None or name not in self.tables:
            return
        self._by_oid[m.oid] = name
        now = relation_check(self.tables[name], m.replica_identity,
                             [(c.name, c.type_oid) for c in m.columns],
                             format_lsn(self._submitted))
        if isinstance(now, str):
            self.refused[name] = now
            # A new dict, not a del: stats() iterates it from other threads.
            self.tables = {k: v for k, v in self.tables.items() if k != name}
            self.engine.read_only[name.lower()] = self.name
            log.error("followed table changed upstream; no longer applied",
                      extra={"table": name, "reason": now})
            return
        self._decoders[name] = RowDecoder(now)

    def _change(self, txn: dict[str, TableTxn], m: Any) -> None:
        if isinstance(m, po.Truncate):
            names = [n for n in map(self._by_oid.get, m.relations)
                     if n is not None and n in self.tables]
            if any(n not in self._shadows for n in names):
                assert self._pipe is not None
                self._pipe.drain()  # a table without key reads its rows: all earlier stored
            for each in names:
                self._txn(txn, each).truncate()
            return
        name = self._by_oid.get(m.relation)
        if name is None or name not in self.tables:
            return  # refused (or not ours): never applied with the wrong columns
        t = self._txn(txn, name)
        dec = self._decoders[name]
        if isinstance(m, po.Insert):
            t.insert(dec(m.new))
        elif isinstance(m, po.Update):
            old = dec(m.old) if m.old is not None else None
            t.update(dec(m.new), old, m.old_kind == "O")
        else:
            t.delete(dec(m.old), m.old_kind == "O")

    def _txn(self, txn: dict[str, TableTxn], name: str) -> TableTxn:
        t = txn.get(name)
        if t is None:
            t = txn[name] = TableTxn(self.tables[name], self._shadows.get(name),
                                     lambda: self._stored_rows(name))
        return t

    def _commit(self, txn: dict[str, TableTxn], m: po.Commit) -> None:
        """Submit the upstream transaction as one write; ``_durable`` settles it."""
        end = m.end_lsn
        if end <= self._submitted:
            return  # applied before a restart
        changes = []
        rows = 0
        for name, t in txn.items():
            deletes, inserts = t.changes()
            if deletes or inserts:
                changes.append(TableChange(name, inserts, deletes))
                rows += len(deletes) + len(inserts)
        assert self._pipe is not None
        self._pipe.room()  # raises if an earlier commit failed: nothing goes after it
        ticket = None
        if changes:
            # Refused (raises) before it takes an LSN; accepted, it is in storage's order,
            # so the next transaction's changes are computed against the shadows with it.
            ticket = self.engine.submit_many(changes, upstream_lsn=end, origin="follow",
                                             after=self._last_ticket)
            self._last_ticket = ticket
            self.pos.submitted(ticket.lsn, end)
            for t in txn.values():
                t.commit_shadow()
        self._submitted = end
        self._pipe.put(Entry(ticket, end, rows, m.commit_time))

    def _durable(self, e: Entry, lsn: int | None) -> None:
        """On the in-flight thread, in commit order: ``e`` is durable here."""
        self.applied = e.end
        self.pos.durable(lsn, e.end)
        lag = (datetime.now(timezone.utc) - e.commit_time).total_seconds()
        with self._lock:
            self._status["transactions_applied"] += 1 if e.ticket is not None else 0
            self._status["rows_applied"] += e.rows
            self._status["lag_seconds"] = max(0.0, lag)
            self._status["last_commit_time"] = e.commit_time.isoformat()
        self._flushed = e.end

    def _reordered(self, e: Entry) -> None:
        """A commit was stored after an earlier one was refused (see ``inflight``)."""
        reason = (f"upstream commit {format_lsn(e.end)} was stored here after an earlier "
                  "one was refused")
        log.error("copying the upstream tables again", extra={"reason": reason})
        self._state["resnapshot"] = reason
        self._save_state()

    # -- what readers ask -----------------------------------------------------------------

    def wait_for(self, upstream_lsn: int, timeout: float,
                 cancelled: Callable[[], bool] | None = None) -> int:
        """Wait until every upstream commit up to ``upstream_lsn`` is applied here; returns
        our LSN a read must be at (or later) to see them. DeadlineExceeded after
        ``timeout`` seconds; returns early once ``cancelled()`` (the caller checks it)."""
        def why() -> str:
            with self._lock:
                state, error = self._status["state"], self._status["error"]
            return f"follower {state}" + (f": {error}" if error else "")

        return self.pos.wait_for(upstream_lsn, timeout, why, cancelled)

    def upstream_at(self, lsn: int) -> int | None:
        """The upstream position a read exact at our ``lsn`` is exact at, None if unknown."""
        return self.pos.upstream_at(lsn)

    def check_drop(self, table: str) -> None:
        """FailedPrecondition for a table being followed (one no longer applied, refused
        after a change of its columns upstream, may be dropped)."""
        if table.lower() in {t.lower() for t in self.tables}:
            raise FailedPrecondition(
                f"table {table} follows {self.name}: it cannot be dropped here while it is "
                "followed (follow other tables with --follow-tables and restart)")

    # Text-form wrappers, so front ends that may not import this package (the PostgreSQL
    # protocol's, a sibling layer) need nothing but the follower object.
    def wait_for_text(self, upstream_lsn: str, timeout: float,
                      cancelled: Callable[[], bool] | None = None) -> int:
        """``wait_for`` of a 'X/Y' position (InvalidArgument for anything else)."""
        return self.wait_for(parse_lsn(upstream_lsn, "min_upstream_lsn"), timeout, cancelled)

    def upstream_text_at(self, lsn: int) -> str:
        """``upstream_at`` as 'X/Y' ('' when unknown)."""
        at = self.upstream_at(lsn)
        return format_lsn(at) if at else ""

    def stats(self) -> dict[str, Any]:
        with self._lock:
            s = dict(self._status)
        caught = self.pos.caught_up
        lag_bytes = max(0, int(s.pop("server_lsn")) - caught) if caught else 0
        return {
            "upstream": self.name, "slot": self.slot, "tables": sorted(self.tables),
            "refused": self.refused.copy(),
            "last_applied_upstream_lsn": format_lsn(self.applied) if self.applied else "",
            "caught_up_upstream_lsn": format_lsn(caught) if caught else "",
            "lag_bytes": lag_bytes,
            **s,
            "lag_seconds": float(s["lag_seconds"]) if lag_bytes else 0.0,
        }
