"""One statement of a session -> its outcome: the session-level commands (transactions,
SET/SHOW, cursors, DEALLOCATE, SUBSCRIBE) here, the rest through the router."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partialflow.server.errors import NotFound
from partialflow.server.pgwire import subscribe as subs
from partialflow.server.pgwire import types
from partialflow.server.pgwire.errors import (
    DUPLICATE_CURSOR,
    IN_FAILED_TRANSACTION,
    INVALID_CURSOR,
    SERIALIZATION_FAILURE,
    SYNTAX_ERROR,
    PgError,
    refused,
)
from partialflow.server.pgwire.routing import Answer, Txn
from partialflow.server.pgwire.sqltext import first_words

if TYPE_CHECKING:
    from partialflow.server.pgwire.session import Outcome, Session

_SPECIAL = ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SET", "RESET", "SHOW",
            "DECLARE", "FETCH", "CLOSE", "DEALLOCATE", "DISCARD", "COPY", "SUBSCRIBE",
            "SAVEPOINT", "RELEASE", "LISTEN", "UNLISTEN", "NOTIFY", "PREPARE", "EXECUTE")


class Commands:
    def __init__(self, session: Session) -> None:
        self.s = session

    def is_special(self, sql: str) -> bool:
        words = first_words(sql, 1)
        return bool(words) and words[0] in _SPECIAL

    def returns_rows(self, word: str) -> bool:
        return word in ("SHOW", "FETCH", "SUBSCRIBE", "COPY")

    def describe_special(self, sql: str) -> list[tuple[str, int]] | None:
        word = first_words(sql, 1)[0]
        if word == "SHOW":
            name, _ = self.s.settings.show(sql, self.s.last_lsn)
            return [(n, types.OID_TEXT) for n in name.split(",")]
        if word == "FETCH":
            fetch = subs.parse_fetch(sql)
            cur = self.s.cursors.get(fetch[0]) if fetch else None
            return cur.columns if cur is not None else None
        return None

    def run(self, sql: str, params: list[Any]) -> Outcome:
        s = self.s
        words = first_words(sql, 2) or [""]
        word = words[0]
        if s.txn is not None and s.txn.failed and word not in ("COMMIT", "END", "ROLLBACK",
                                                               "ABORT"):
            raise PgError(IN_FAILED_TRANSACTION, "current transaction is aborted, commands "
                          "ignored until end of transaction block")
        if word in ("BEGIN", "START"):
            if s.txn is None:
                s.txn = Txn()
            return Answer(None, [], "BEGIN")
        if word in ("COMMIT", "END"):
            return self.commit()
        if word in ("ROLLBACK", "ABORT"):
            s.txn = None
            return Answer(None, [], "ROLLBACK")
        if word in ("SAVEPOINT", "RELEASE"):
            raise refused("savepoints are not supported")
        if word in ("LISTEN", "UNLISTEN", "NOTIFY"):
            raise refused(f"{word} is not supported; use SUBSCRIBE for changes")
        if word in ("PREPARE", "EXECUTE"):
            raise refused(f"SQL-level {word} is not supported; use the extended protocol")
        if word == "SET":
            s.report(s.settings.apply_set(sql))
            return Answer(None, [], "SET")
        if word == "RESET":
            s.report(s.settings.apply_reset(sql))
            return Answer(None, [], "RESET")
        if word == "SHOW":
            name, rows = s.settings.show(sql, s.last_lsn)
            return Answer([(n, types.OID_TEXT) for n in name.split(",")], rows, "SHOW")
        if word == "DEALLOCATE":
            rest = sql.split(None, 1)[1] if len(sql.split(None, 1)) > 1 else ""
            name = rest.strip().rstrip(";").strip()
            if name.upper().startswith("PREPARE "):
                name = name[8:].strip()
            if name.upper() == "ALL":
                s.statements = {k: v for k, v in s.statements.items() if not k}
                return Answer(None, [], "DEALLOCATE ALL")
            if s.statements.pop(subs.name_of(name), None) is None:
                raise PgError("26000", f'prepared statement "{name}" does not exist')
            return Answer(None, [], "DEALLOCATE")
        if word == "DISCARD":
            s.statements.clear()
            for cur in s.cursors.values():
                cur.close()
            s.cursors.clear()
            return Answer(None, [], "DISCARD ALL")
        if word in ("DECLARE", "FETCH", "CLOSE"):
            return self.cursor(word, sql, params)
        if word == "COPY":
            inner = subs.match_copy(sql)
            if inner is None:
                raise refused("COPY is supported only as COPY (SUBSCRIBE ...) TO STDOUT")
            sub = subs.start(s.router, inner, params)
            return subs.Stream(sub.columns, sub, copy=True)
        if word == "SUBSCRIBE":
            sub = subs.start(s.router, sql, params)
            return subs.Stream(sub.columns, sub)
        return self.routed(word, sql, params)

    def routed(self, word: str, sql: str, params: list[Any]) -> Answer:
        s = self.s
        if word in ("SELECT", "WITH", "VALUES", "(", "TABLE"):
            if word == "TABLE":
                sql = "SELECT * FROM " + sql.split(None, 1)[1]
            answer = s.router.select(sql, params, s)
            s.note_read(answer.lsn)
            return answer
        if word in ("INSERT", "UPDATE", "DELETE"):
            answer, lsn = s.router.write(sql, params, s)
            s.note_write(lsn)
            return answer
        if word in ("CREATE", "DROP", "EXPLAIN"):
            # DDL is not transactional: it applies at once, also inside BEGIN (drivers
            # that always open a transaction send CREATE there), but not after writes the
            # transaction holds back, which it could reorder.
            if s.txn is not None and word != "EXPLAIN" and s.txn.changes:
                raise refused(f"{word} after writes in a transaction block is not supported; "
                              "COMMIT first (DDL applies at once, it is not transactional)")
            return s.router.ddl(sql, params)
        if s.router.catalog.handles(sql):
            return s.router.select(sql, params, s)
        raise PgError(SYNTAX_ERROR, f"unknown statement {word!r}; expected SELECT, INSERT, "
                      "UPDATE, DELETE, CREATE, DROP, EXPLAIN, BEGIN/COMMIT/ROLLBACK, SET, SHOW, "
                      "SUBSCRIBE, DECLARE/FETCH/CLOSE or COPY (SUBSCRIBE ...) TO STDOUT")

    def commit(self) -> Answer:
        s = self.s
        txn, s.txn = s.txn, None
        if txn is None:
            return Answer(None, [], "COMMIT")
        if txn.failed:
            return Answer(None, [], "ROLLBACK")
        if txn.changes:
            try:
                lsn = s.engine.write_many(txn.changes)
            except NotFound as err:
                raise PgError(SERIALIZATION_FAILURE, f"the transaction's rows changed before "
                              f"COMMIT ({err}); nothing was written, retry it") from None
            s.note_write(lsn)
        return Answer(None, [], "COMMIT")

    def cursor(self, word: str, sql: str, params: list[Any]) -> Answer:
        s = self.s
        if word == "DECLARE":
            parsed = subs.parse_declare(sql)
            if parsed is None:
                raise PgError(SYNTAX_ERROR, "expected DECLARE name CURSOR FOR query")
            name, query = parsed
            if name in s.cursors:
                raise PgError(DUPLICATE_CURSOR, f'cursor "{name}" already exists')
            if subs.is_subscribe(query):
                sub = subs.start(s.router, query, params)
                s.cursors[name] = subs.Cursor(sub.columns, sub)
            else:
                answer = self.routed((first_words(query, 1) or [""])[0], query, params)
                if answer.columns is None:
                    raise PgError(SYNTAX_ERROR, "a cursor is declared FOR a SELECT or SUBSCRIBE")
                s.cursors[name] = subs.Cursor(answer.columns, None, subs.deque(answer.rows))
            return Answer(None, [], "DECLARE CURSOR")
        if word == "FETCH":
            fetch = subs.parse_fetch(sql)
            if fetch is None:
                raise PgError(SYNTAX_ERROR, "expected FETCH [count|ALL] [FROM] cursor "
                              "[WITH (timeout = '1s')]")
            name, count, timeout = fetch
            cur = s.cursors.get(name)
            if cur is None:
                raise PgError(INVALID_CURSOR, f'cursor "{name}" does not exist')
            rows = cur.fetch(count, timeout, s.cancelled.is_set)
            if s.cancelled.is_set():
                raise PgError("57014", "canceling statement due to user request")
            if rows and cur.subscription is not None:
                s.note_read(max(r[0] for r in rows))
            return Answer(cur.columns, rows, f"FETCH {len(rows)}")
        closing = subs.parse_close(sql)
        if closing is None:
            raise PgError(SYNTAX_ERROR, "expected CLOSE cursor or CLOSE ALL")
        names = list(s.cursors) if closing == "*" else [closing]
        for n in names:
            cur = s.cursors.pop(n, None)
            if cur is None:
                raise PgError(INVALID_CURSOR, f'cursor "{n}" does not exist')
            cur.close()
        return Answer(None, [], "CLOSE CURSOR")
