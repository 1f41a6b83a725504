"""SET, RESET and SHOW: the run-time settings drivers send and read, per session.

Settings PostgreSQL reports to the client (``GUC_REPORT``) are sent as ParameterStatus when
they change. ``partialflow.min_lsn`` is the session's read floor; ``partialflow.lsn`` (read
only) the LSN of its last answer.
"""

from __future__ import annotations

import re

from partialflow.server.pgwire.catalog import SERVER_VERSION, SERVER_VERSION_NUM
from partialflow.server.pgwire.errors import (
    CANT_CHANGE_RUNTIME_PARAM,
    INVALID_PARAMETER,
    SYNTAX_ERROR,
    UNDEFINED_OBJECT,
    PgError,
)

# One PostgreSQL version everywhere (catalog.SERVER_VERSION): the emulated catalog has
# PostgreSQL 15's shape, and psql and pgjdbc pick their catalog queries by the version.
DEFAULTS = {
    "server_version": SERVER_VERSION,
    "server_version_num": SERVER_VERSION_NUM,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "TimeZone": "UTC",
    "IntervalStyle": "postgres",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "is_superuser": "on",
    "application_name": "",
    "extra_float_digits": "1",
    "search_path": '"$user", public',
    "default_transaction_isolation": "read committed",
    "transaction_isolation": "read committed",
    "default_transaction_read_only": "off",
    "in_hot_standby": "off",
    "max_identifier_length": "63",
    "statement_timeout": "0",
    "lc_messages": "C",
    "partialflow.min_lsn": "0",
    # On a server following a PostgreSQL: reads wait until the upstream's commits up to
    # this WAL position ('X/Y') are applied ('' = no wait).
    "partialflow.min_upstream_lsn": "",
}
REPORTED = ("server_version", "server_encoding", "client_encoding", "DateStyle", "TimeZone",
            "IntervalStyle", "integer_datetimes", "standard_conforming_strings", "is_superuser",
            "application_name", "default_transaction_read_only", "in_hot_standby")
READ_ONLY = ("server_version", "server_version_num", "server_encoding", "integer_datetimes",
             "max_identifier_length", "in_hot_standby", "partialflow.lsn", "is_superuser")
_CANON = {k.lower(): k for k in DEFAULTS}
_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>[\w.\"]+)\s*(?:=|\s+TO\s+|\s+)"
                  r"(?P<value>.*?)\s*;?\s*$", re.I | re.S)
_TIMEZONE = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>.*?)\s*;?\s*$",
                       re.I | re.S)
_RESET = re.compile(r"^\s*RESET\s+(?P<name>[\w.\"]+)\s*;?\s*$", re.I)
_PG_LSN = re.compile(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")
_SHOW = re.compile(r"^\s*SHOW\s+(?P<name>[\w.\"]+)\s*;?\s*$", re.I)


def canonical(name: str) -> str:
    name = name.strip().strip('"')
    return _CANON.get(name.lower(), name.lower())


def _unquote(value: str) -> str:
    value = value.strip()
    if value.upper() == "DEFAULT":
        return ""
    parts = [p.strip() for p in value.split(",")]
    return ", ".join(p[1:-1].replace("''", "'") if len(p) >= 2 and p[0] == p[-1] == "'" else p
                     for p in parts)


class Settings:
    def __init__(self, startup: dict[str, str]) -> None:
        self.values = dict(DEFAULTS)
        for key, value in startup.items():
            name = canonical(key)
            if name in ("user", "database", "options", "replication") or name in READ_ONLY:
                continue
            self.values[name] = value

    def get(self, name: str) -> str:
        return self.values[name]

    def apply_set(self, sql: str) -> tuple[str, str] | None:
        """Run a SET; returns (name, value) when it is a reported setting."""
        m = _TIMEZONE.match(sql)
        if m:
            name, value = "TimeZone", _unquote(m.group("value"))
        else:
            m = _SET.match(sql)
            if m is None:
                if re.match(r"^\s*SET\s+(SESSION\s+CHARACTERISTICS|TRANSACTION)\b", sql, re.I):
                    return None  # isolation levels: every read is at one snapshot anyway
                raise PgError(SYNTAX_ERROR, "expected SET name = value")
            name, value = canonical(m.group("name")), _unquote(m.group("value"))
        return self.set(name, value)

    def set(self, name: str, value: str) -> tuple[str, str] | None:
        if name in READ_ONLY:
            raise PgError(CANT_CHANGE_RUNTIME_PARAM, f'parameter "{name}" cannot be changed')
        if value == "":
            value = DEFAULTS.get(name, "")
        if name == "client_encoding" and value.upper().replace("-", "") not in ("UTF8",
                                                                                "UNICODE"):
            raise PgError("0A000", f"client_encoding {value!r} is not supported; use UTF8")
        if name == "client_encoding":
            value = "UTF8"
        if name == "partialflow.min_lsn":
            try:
                if int(value) < 0:
                    raise ValueError
            except ValueError:
                raise PgError(INVALID_PARAMETER, f"partialflow.min_lsn must be an LSN (a whole "
                              f"number >= 0), got {value!r}") from None
        if name == "partialflow.min_upstream_lsn" and value and not _PG_LSN.match(value):
            raise PgError(INVALID_PARAMETER, "partialflow.min_upstream_lsn must be a WAL "
                          f"position in pg_lsn's text form (e.g. '0/16B3748'), got {value!r}")
        self.values[name] = value
        return (name, value) if name in REPORTED else None

    def apply_reset(self, sql: str) -> tuple[str, str] | None:
        m = _RESET.match(sql)
        if m is None:
            raise PgError(SYNTAX_ERROR, "expected RESET name or RESET ALL")
        if m.group("name").upper() == "ALL":
            self.values = {**DEFAULTS, "application_name": self.values["application_name"]}
            return None
        name = canonical(m.group("name"))
        return self.set(name, DEFAULTS.get(name, ""))

    def show(self, sql: str, lsn: int) -> tuple[str, list[tuple[str, ...]]]:
        """(column name, rows) of a SHOW."""
        m = _SHOW.match(sql)
        if m is None:
            raise PgError(SYNTAX_ERROR, "expected SHOW name or SHOW ALL")
        raw = m.group("name")
        if raw.upper() == "ALL":
            rows = [(k, v, "") for k, v in sorted(self.values.items())]
            return "name,setting,description", [*rows, ("partialflow.lsn", str(lsn), "")]
        name = canonical(raw)
        if name == "partialflow.lsn":
            return name, [(str(lsn),)]
        if name == "transaction isolation level":
            name = "transaction_isolation"
        if name not in self.values:
            raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{raw}"')
        return name, [(self.values[name],)]

    @property
    def min_lsn(self) -> int:
        return int(self.values.get("partialflow.min_lsn") or 0)
