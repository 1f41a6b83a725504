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
   Each upstream transaction becomes ONE write carrying its commit's end LSN, and only
   once that is durable is the LSN acknowledged upstream as flushed.
3. Any error (upstream down or restarting, the slot lost) ends the session; the next one
   starts after a backoff (0.5 s doubling to 10 s). Reads are served all along, exact at
   the last applied commit.

Idle: between transactions, the position the walsender reports (keepalives, asked for
every second) is acknowledged too, so writes to other databases never make the slot grow.
"""

from __future__ import annotations

import json
import logging
import os
import select
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from partialflow.server.errors import DeadlineExceeded, FailedPrecondition
from partialflow.server.follow.changes import Inconsistent, Shadow, TableTxn, multiset_diff
from partialflow.server.follow.copy import copy_tables
from partialflow.server.follow.lsn import format_lsn
from partialflow.server.follow.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    decode,
)
from partialflow.server.follow.typemap import (
    RowDecoder,
    UpstreamTable,
    map_table,
    read_tables,
    same_shape,
)
from partialflow.server.storage.record import TableChange

log = logging.getLogger(__name__)

STATE_FILE = "follow.json"
# Both sessions print dates and times alike, whatever the upstream's defaults.
SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres"
BACKOFF_MIN, BACKOFF_MAX = 0.5, 10.0


def redact(url: str) -> str:
    """The URL without its password (for logs, status and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Follower:
    """Follows one upstream database; ``stats``, ``wait_for`` and ``upstream_at`` are what
    the service and the PostgreSQL front end ask of it."""

    def __init__(self, engine: Any, url: str, tables: Sequence[str] | None = None) -> None:
        self.engine = engine
        self.url = url
        self.name = redact(url)
        self.wanted = [t.strip() for t in tables or () if t.strip()] or None
        self._dir = Path(engine.config.data_dir)
        state = self._load_state()
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
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._waiters = 0
        self.applied: int | None = engine.storage.upstream_lsn
        self._caught_up = self.applied or 0
        self._last_write_lsn = int(engine.storage.last_lsn)
        self._history: list[tuple[int, int]] = []  # (our LSN, upstream end LSN), ascending
        if self.applied is not None:
            self._history.append((self._last_write_lsn, self.applied))
        self._status: dict[str, Any] = {
            "state": "starting", "error": "", "rows_applied": 0, "transactions_applied": 0,
            "resnapshots": 0, "retries": 0, "lag_seconds": 0.0, "server_lsn": 0,
            "slot_status": "", "copy": "", "last_commit_time": "",
        }

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

    def _load_state(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self._dir / STATE_FILE).read_text()))
        except FileNotFoundError:
            return None

    def _save_state(self) -> None:
        path = self._dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1))
        os.replace(tmp, path)

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
                refused[name] = (
                    "its columns upstream (" + _cols(table) + ") differ from the table "
                    "here (" + ", ".join(f"{c.name} {c.type}" for c in have.columns) + ")")
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
        with self._cv:
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
                reason = None
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
        point = _lsn(consistent)
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
        lsn = self._write(changes, point)
        for name, rows in copied.items():
            if self.tables[name].key:
                self._shadows[name] = Shadow(self.tables[name], rows)
        self.applied = point
        with self._cv:
            self._caught_up = max(self._caught_up, point)
            self._cv.notify_all()
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
                              status_interval=1,
                              options={"proto_version": "1",
                                       "publication_names": self.publication})
        self._set(state="streaming", error="")
        log.info("streaming from the upstream", extra={
            "upstream": self.name, "slot": self.slot, "from": format_lsn(start)})
        txn: dict[str, TableTxn] | None = None
        begin: Begin | None = None
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
                pace = 0.02 if self._waiters else 1.0
                if now - last_reply >= pace:
                    cur.send_feedback(reply=True)
                    last_reply = now
                select.select([cur], [], [], min(pace, 0.5))
                continue
            m = decode(msg.payload)
            if isinstance(m, Begin):
                txn, begin = {}, m
            elif isinstance(m, Commit):
                self._commit(cur, txn or {}, begin, m)
                txn, begin = None, None
            elif isinstance(m, Relation):
                self._relation(m)
            elif isinstance(m, (Insert, Update, Delete, Truncate)):
                if txn is None:
                    raise Inconsistent("a change outside a transaction")
                self._change(txn, m)

    def _poll(self, sql: Any) -> None:
        row = sql.execute(
            "SELECT pg_current_wal_lsn(), (SELECT wal_status FROM pg_replication_slots "
            "WHERE slot_name = %s)", (self.slot,)).fetchone()
        self._set(server_lsn=_lsn(row[0]), slot_status=row[1] or "missing")

    def _idle(self, cur: Any) -> None:
        """Nothing buffered and no transaction open: all WAL the walsender has read is
        applied, so its position is ours too (and acknowledged: the slot must not grow
        with other databases' writes)."""
        end = int(cur.wal_end or 0)
        if end > self._caught_up:
            with self._cv:
                self._caught_up = end
                self._cv.notify_all()
            cur.send_feedback(write_lsn=end, flush_lsn=end, apply_lsn=end)

    def _relation(self, m: Relation) -> None:
        name = m.name if m.namespace == "public" else None
        if name is None or name not in self.tables:
            return
        self._by_oid[m.oid] = name
        cols = [(c.name, c.type_oid, f"type oid {c.type_oid}") for c in m.columns]
        table = self.tables[name]
        keys = [c.name for c in table.schema.columns if c.primary_key]
        try:
            now = map_table(name, m.replica_identity, keys, cols)
        except Exception as err:  # noqa: BLE001 - Refused
            now = None
            why = str(err)
        if now is None or not same_shape(table.schema, now.schema):
            shape = ", ".join(c.name for c in m.columns)
            self.refused[name] = (
                f"its columns changed upstream (now {shape}; followed as {_cols(table)}); "
                f"not applied from upstream LSN {format_lsn(self.applied or 0)} on: drop the "
                "views over it and the table here, then restart to copy it again"
                + (f" ({why})" if now is None else ""))
            # A new dict, not a del: stats() iterates it from other threads.
            self.tables = {k: v for k, v in self.tables.items() if k != name}
            self.engine.read_only[name.lower()] = self.name
            log.error("followed table changed upstream; no longer applied",
                      extra={"table": name, "reason": self.refused[name]})
            return
        self._decoders[name] = RowDecoder(now)

    def _change(self, txn: dict[str, TableTxn], m: Any) -> None:
        if isinstance(m, Truncate):
            for oid in m.relations:
                name = self._by_oid.get(oid)
                if name in self.tables:
                    self._txn(txn, name).truncate()
            return
        name = self._by_oid.get(m.relation)
        if name is None or name not in self.tables:
            return  # refused (or not ours): never applied with the wrong columns
        t = self._txn(txn, name)
        dec = self._decoders[name]
        if isinstance(m, Insert):
            t.insert(dec(m.new))
        elif isinstance(m, Update):
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

    def _commit(self, cur: Any, txn: dict[str, TableTxn], begin: Begin | None,
                m: Commit) -> None:
        end = m.end_lsn
        if self.applied is not None and end <= self.applied:
            return  # applied before a restart
        changes = []
        rows = 0
        for name, t in txn.items():
            deletes, inserts = t.changes()
            if deletes or inserts:
                changes.append(TableChange(name, inserts, deletes))
                rows += len(deletes) + len(inserts)
        if changes:
            self._write(changes, end)
            for t in txn.values():
                t.commit_shadow()
        self.applied = end
        lag = (datetime.now(timezone.utc) - m.commit_time).total_seconds()
        with self._cv:
            self._caught_up = max(self._caught_up, end)
            self._status["transactions_applied"] += 1 if changes else 0
            self._status["rows_applied"] += rows
            self._status["lag_seconds"] = max(0.0, lag)
            self._status["last_commit_time"] = m.commit_time.isoformat()
            self._cv.notify_all()
        cur.send_feedback(write_lsn=end, flush_lsn=end, apply_lsn=end)

    def _write(self, changes: list[Any], upstream_lsn: int) -> int:
        """The one call of the transactions API: an upstream transaction, one write here."""
        if not changes:
            return self._last_write_lsn
        lsn = self.engine.write_many(changes, upstream_lsn=upstream_lsn, origin="follow")
        with self._cv:
            self._last_write_lsn = lsn
            self._history.append((lsn, upstream_lsn))
            if len(self._history) > 100_000:
                del self._history[:50_000]
        return lsn

    # -- what readers ask -----------------------------------------------------------------

    def wait_for(self, upstream_lsn: int, timeout: float) -> int:
        """Wait until every upstream commit up to ``upstream_lsn`` is applied here; returns
        our LSN a read must be at (or later) to see them. DeadlineExceeded after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._waiters += 1
            try:
                while self._caught_up < upstream_lsn:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DeadlineExceeded(
                            f"upstream LSN {format_lsn(upstream_lsn)} not applied within "
                            f"{timeout:g} s (applied up to {format_lsn(self._caught_up)}; "
                            f"follower {self._status['state']}"
                            + (f": {self._status['error']}" if self._status["error"] else "")
                            + ")")
                    self._cv.wait(left)
                return self._last_write_lsn
            finally:
                self._waiters -= 1

    def upstream_at(self, lsn: int) -> int | None:
        """The upstream position a read exact at our ``lsn`` is exact at, None if unknown."""
        with self._cv:
            h = self._history
            if not h:
                return self._caught_up or None
            if lsn >= h[-1][0]:
                return self._caught_up
            i = bisect_right(h, (lsn, 1 << 64)) - 1
            return h[i][1] if i >= 0 else None

    # Text-form wrappers, so front ends that may not import this package (the PostgreSQL
    # protocol's, a sibling layer) need nothing but the follower object.
    def wait_for_text(self, upstream_lsn: str, timeout: float) -> int:
        """``wait_for`` of a 'X/Y' position (InvalidArgument for anything else)."""
        from partialflow.server.follow.lsn import parse_lsn

        return self.wait_for(parse_lsn(upstream_lsn, "min_upstream_lsn"), timeout)

    def upstream_text_at(self, lsn: int) -> str:
        """``upstream_at`` as 'X/Y' ('' when unknown)."""
        at = self.upstream_at(lsn)
        return format_lsn(at) if at else ""

    def stats(self) -> dict[str, Any]:
        with self._cv:
            s = dict(self._status)
            caught = self._caught_up
        lag_bytes = max(0, int(s.pop("server_lsn")) - caught) if caught else 0
        return {
            "upstream": self.name,
            "slot": self.slot,
            "tables": sorted(self.tables),
            "refused": self.refused.copy(),
            "last_applied_upstream_lsn": format_lsn(self.applied) if self.applied else "",
            "caught_up_upstream_lsn": format_lsn(caught) if caught else "",
            "lag_bytes": lag_bytes,
            **s,
            "lag_seconds": float(s["lag_seconds"]) if lag_bytes else 0.0,
        }


def _lsn(text: str) -> int:
    from partialflow.server.follow.lsn import parse_lsn

    return parse_lsn(text)


def _cols(table: UpstreamTable) -> str:
    return ", ".join(f"{c.name} {c.type}" for c in table.schema.columns)
