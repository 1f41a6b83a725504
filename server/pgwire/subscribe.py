"""SUBSCRIBE in the form Materialize users know, over ``Engine.subscribe``.

    SUBSCRIBE [TO] view [WHERE key = v [AND ...] | WHERE key IN (...)]
              [AS OF lsn] [WITH (PROGRESS = false)]

Each row is ``(lsn, progressed, diff, view columns...)``: the rows of the snapshot with diff
+1, then per change batch the deleted rows (-1) and inserted rows (+1), all at the LSN they are
exact at; when nothing changes, a progress row (progressed true, the rest NULL) says how far
the answer is known to be exact. ``AS OF n`` resumes: the first rows are the difference from
the answer at LSN n. Served three ways: a bare SUBSCRIBE streams rows (Execute, or a simple
Query) until cancelled; ``COPY (SUBSCRIBE ...) TO STDOUT`` streams them as COPY data; and
``DECLARE c CURSOR FOR SUBSCRIBE ...`` then ``FETCH n c WITH (timeout = '1s')``.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from partialflow.server.pgwire import types
from partialflow.server.pgwire.errors import SYNTAX_ERROR, PgError
from partialflow.server.pgwire.routing import Router

_SUBSCRIBE = re.compile(
    r"^\s*SUBSCRIBE\s+(?:TO\s+)?(?P<view>[A-Za-z_]\w*)"
    r"(?:\s+WHERE\s+(?P<where>.*?))?"
    r"(?:\s+AS\s+OF\s+(?P<asof>\d+))?"
    r"(?:\s+WITH\s*\((?P<opts>[^)]*)\))?\s*;?\s*$", re.I | re.S)
_COPY = re.compile(r"^\s*COPY\s*\((?P<inner>.*)\)\s*TO\s+STDOUT\b(?P<rest>.*)$", re.I | re.S)
_DECLARE = re.compile(r"^\s*DECLARE\s+(?P<name>\"[^\"]+\"|\w+)\s+(?:BINARY\s+)?"
                      r"(?:INSENSITIVE\s+)?(?:(?:NO\s+)?SCROLL\s+)?"
                      r"CURSOR\s+(?:WITH(?:OUT)?\s+HOLD\s+)?FOR\s+(?P<query>.*)$", re.I | re.S)
_FETCH = re.compile(
    r"^\s*FETCH\s+(?:(?:FORWARD\s+)?(?P<count>ALL|\d+|NEXT)\s+|FORWARD\s+ALL\s+|FORWARD\s+)?"
    r"(?:(?:FROM|IN)\s+)?(?P<name>\"[^\"]+\"|\w+)"
    r"(?:\s+WITH\s*\(\s*timeout\s*=\s*'(?P<timeout>[^']*)'\s*\))?\s*;?\s*$", re.I | re.S)
_CLOSE = re.compile(r"^\s*CLOSE\s+(?P<name>\"[^\"]+\"|\w+|ALL)\s*;?\s*$", re.I)
HEARTBEAT = 1.0  # seconds between progress rows of an idle stream
PREFIX = [("lsn", types.OID_INT8), ("progressed", types.OID_BOOL), ("diff", types.OID_INT8)]


def is_subscribe(sql: str) -> bool:
    return bool(re.match(r"^\s*SUBSCRIBE\b", sql, re.I))


def match_copy(sql: str) -> str | None:
    """The SUBSCRIBE of a ``COPY (SUBSCRIBE ...) TO STDOUT``, None if not one."""
    m = _COPY.match(sql)
    if m is None or not is_subscribe(m.group("inner")):
        return None
    return m.group("inner")


def name_of(text: str) -> str:
    return text[1:-1] if text.startswith('"') else text.lower()


def parse_timeout(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|)\s*", text)
    if m is None:
        raise PgError("22023", f"invalid FETCH timeout {text!r}: expected e.g. '1s' or '500ms'")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0}[m.group(2)]


@dataclass
class Subscription:
    """One SUBSCRIBE's engine subscription and the rows not yet handed out."""

    router: Router
    view: str
    columns: list[tuple[str, int]]
    sub: Any
    progress: bool = True
    pending: deque[tuple] = field(default_factory=deque)
    last_lsn: int = 0
    closed: bool = False

    def rows(self, wait: float) -> list[tuple]:
        """Rows of the next event within ``wait`` s: a change batch, or one progress row
        when nothing changed (none before the first answer)."""
        if self.pending:
            out = list(self.pending)
            self.pending.clear()
            return out
        event = self.sub.next_event(wait)
        if event is None:
            return []
        nulls = (None,) * (len(self.columns) - 3)
        self.last_lsn = event.lsn
        if event.kind == "heartbeat":
            return [(event.lsn, True, None) + nulls] if self.progress else []
        out = []
        for _key, inserted, deleted in event.changes:
            out += [(event.lsn, False, -1) + tuple(r) for r in deleted]
            out += [(event.lsn, False, 1) + tuple(r) for r in inserted]
        if not out and self.progress:  # a snapshot of nothing: say where it is exact
            out = [(event.lsn, True, None) + nulls]
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.router.engine.unsubscribe(self.sub)


def start(router: Router, sql: str, params: list[Any]) -> Subscription:
    """Parse a SUBSCRIBE and subscribe (errors raised before anything is registered)."""
    m = _SUBSCRIBE.match(sql)
    if m is None:
        raise PgError(SYNTAX_ERROR, "expected SUBSCRIBE [TO] view [WHERE key = value [AND ...]]"
                      " [AS OF lsn] [WITH (PROGRESS = true|false)]")
    view = m.group("view")
    where = m.group("where")
    select = f"SELECT * FROM {view}" + (f" WHERE {where}" if where else "")
    read = router.view_read(select)
    if read is None:
        raise PgError("42P01", f"unknown view {view!r}: SUBSCRIBE reads a view")
    from itertools import product
    per_key = [[types.convert(s.get(params), oid or None) for s in slots]
               for slots, oid in zip(read.key_slots, read.key_oids, strict=True)]
    keys = [tuple(k) for k in product(*per_key)]
    progress = True
    for opt in (m.group("opts") or "").split(","):
        name, _, value = opt.partition("=")
        name, value = name.strip().lower(), value.strip().strip("'").lower()
        if not name:
            continue
        if name != "progress":
            raise PgError("0A000", f"unknown SUBSCRIBE option {name!r}; options: PROGRESS")
        progress = value in ("", "true", "on", "1")
    asof = m.group("asof")
    view_cols = router.schema.view_columns(router.schema.view(read.view) or {})
    sub = router.engine.subscribe(read.view, keys, from_lsn=int(asof) if asof else None)
    return Subscription(router, read.view, PREFIX + view_cols, sub, progress)


def stream(subscription: Subscription, cancelled: Any, client_gone: Any) -> Iterator[list[tuple]]:
    """Batches of rows until cancelled or the client goes: one progress row a second when
    idle (the waits are short so a cancel is seen at once)."""
    last = time.monotonic()
    while not cancelled() and not client_gone():
        rows = subscription.rows(0.2)
        if (rows and rows[0][1] is True and len(rows) == 1
                and time.monotonic() - last < HEARTBEAT):
            continue
        if rows:
            last = time.monotonic()
            yield rows


def copy_text(row: tuple) -> bytes:
    """One row in COPY's text format (tab-separated, \\N for NULL, escapes)."""
    out = []
    for v in row:
        if v is None:
            out.append("\\N")
            continue
        s = types.encode(v, types.oid_of_value(v) or types.OID_TEXT, 0) or b""
        text = s.decode()
        text = (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
                .replace("\r", "\\r"))
        out.append(text)
    return ("\t".join(out) + "\n").encode()


@dataclass
class Cursor:
    """A DECLAREd cursor: over a SUBSCRIBE, or over a query's rows (psycopg's named
    cursors)."""

    columns: list[tuple[str, int]]
    subscription: Subscription | None = None
    rows: deque[tuple] = field(default_factory=deque)

    def fetch(self, count: int | None, timeout: float | None, cancelled: Any) -> list[tuple]:
        if self.subscription is None:
            n = len(self.rows) if count is None else min(count, len(self.rows))
            return [self.rows.popleft() for _ in range(n)]
        sub = self.subscription
        out: list[tuple] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        while not out and not cancelled():
            left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if left <= 0:
                break
            out = [r for r in sub.rows(left) if not r[1]]
        if not out and sub.progress:  # nothing changed within the timeout: where we are
            nulls = (None,) * (len(self.columns) - 3)
            out = [(sub.sub.cut_lsn() if hasattr(sub.sub, "cut_lsn") else sub.last_lsn,
                    True, None) + nulls]
        while True:  # whatever else is ready now
            more = [r for r in sub.rows(0) if not r[1]] if count is None or len(out) < count \
                else []
            if not more:
                break
            out += more
        if count is not None and len(out) > count:
            sub.pending.extend(out[count:])
            out = out[:count]
        return out

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()


@dataclass
class Stream:
    """An endless answer (a SUBSCRIBE): columns and batches of rows as they come."""

    columns: list[tuple[str, int]]
    subscription: Subscription
    batches: Iterator[list[tuple]] | None = None
    copy: bool = False


def parse_declare(sql: str) -> tuple[str, str] | None:
    m = _DECLARE.match(sql)
    return (name_of(m.group("name")), m.group("query")) if m else None


def parse_fetch(sql: str) -> tuple[str, int | None, float | None] | None:
    m = _FETCH.match(sql)
    if m is None:
        return None
    count_text = (m.group("count") or "1").upper()
    count = None if count_text == "ALL" or re.search(r"FORWARD\s+ALL", sql, re.I) else (
        1 if count_text == "NEXT" else int(count_text))
    return name_of(m.group("name")), count, parse_timeout(m.group("timeout"))


def parse_close(sql: str) -> str | None:
    m = _CLOSE.match(sql)
    return None if m is None else ("*" if m.group("name").upper() == "ALL"
                                   else name_of(m.group("name")))
