"""A decoder of pgoutput's logical replication messages, protocol version 1.

Layouts from PostgreSQL's "Logical Replication Message Formats" (protocol.sgml, PG 15):
every message starts with a one-byte tag; integers are big-endian; strings end with a NUL.
Only protocol 1 without streaming is spoken (each transaction arrives whole, in commit
order), so no message carries a transaction id except Begin. Values stay as the text bytes
pgoutput sends ('t'); typing them is the caller's business (typemap.py), as is making
sense of 'u' (an unchanged TOAST value pgoutput does not repeat).

No pure-Python decoder on PyPI is kept up (pypgoutput 0.0.3 calls itself a prototype and
acks every message as flushed; pgoutput-decoder needs Python 3.12), so this one is ours.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

# PostgreSQL timestamps count microseconds from 2000-01-01 UTC.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)

NULL = None


class Unchanged:
    """An unchanged TOAST value ('u'): pgoutput leaves it out of an update's new tuple."""

    _instance: Unchanged | None = None

    def __new__(cls) -> Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()

# One column of a tuple: None (SQL NULL), UNCHANGED, or the value's text bytes.
Value = bytes | None | Unchanged


class DecodeError(ValueError):
    """A message that does not follow the documented layout."""


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_time: datetime


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class RelationColumn:
    is_key: bool
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    relation: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relation: int
    new: tuple[Value, ...]
    # The old row: its key columns ('K', others None) or all of it ('O', REPLICA IDENTITY
    # FULL); None when the key did not change and the identity is not FULL.
    old: tuple[Value, ...] | None = None
    old_kind: str | None = None


@dataclass(frozen=True)
class Delete:
    relation: int
    old: tuple[Value, ...]
    old_kind: str  # 'K' or 'O'


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = (Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate
           | LogicalMessage)


@dataclass
class _Reader:
    data: bytes
    pos: int = 0
    _fmt: dict[str, struct.Struct] = field(default_factory=dict)

    def take(self, fmt: str) -> int:
        s = self._fmt.get(fmt)
        if s is None:
            s = self._fmt[fmt] = struct.Struct(fmt)
        if self.pos + s.size > len(self.data):
            raise DecodeError(f"message ends early at byte {self.pos} (wanted {fmt})")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def byte(self) -> str:
        if self.pos >= len(self.data):
            raise DecodeError(f"message ends early at byte {self.pos}")
        c = chr(self.data[self.pos])
        self.pos += 1
        return c

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise DecodeError(f"unterminated string at byte {self.pos}")
        s = self.data[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return s

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DecodeError(f"value of {n} bytes runs past the message at byte {self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def time(self) -> datetime:
        return PG_EPOCH + timedelta(microseconds=self.take(">q"))

    def tuple(self) -> tuple[Value, ...]:
        n = self.take(">h")
        out: list[Value] = []
        for _ in range(n):
            kind = self.byte()
            if kind == "n":
                out.append(None)
            elif kind == "u":
                out.append(UNCHANGED)
            elif kind in ("t", "b"):
                out.append(self.raw(self.take(">i")))
            else:
                raise DecodeError(f"unknown tuple column kind {kind!r}")
        return tuple(out)


def decode(data: bytes) -> Message:
    """One pgoutput message (the payload of an XLogData) -> its dataclass."""
    r = _Reader(bytes(data))
    tag = r.byte()
    msg: Message
    if tag == "B":
        msg = Begin(r.take(">Q"), r.time(), r.take(">I"))
    elif tag == "C":
        msg = Commit(r.take(">b"), r.take(">Q"), r.take(">Q"), r.time())
    elif tag == "O":
        msg = Origin(r.take(">Q"), r.string())
    elif tag == "R":
        oid, ns, name, ident = r.take(">I"), r.string(), r.string(), r.byte()
        cols = []
        for _ in range(r.take(">h")):
            flags = r.take(">b")
            cols.append(RelationColumn(bool(flags & 1), r.string(), r.take(">I"), r.take(">i")))
        msg = Relation(oid, ns, name, ident, tuple(cols))
    elif tag == "Y":
        msg = Type(r.take(">I"), r.string(), r.string())
    elif tag == "I":
        oid = r.take(">I")
        if r.byte() != "N":
            raise DecodeError("Insert without its 'N' tuple")
        msg = Insert(oid, r.tuple())
    elif tag == "U":
        oid = r.take(">I")
        kind = r.byte()
        old = None
        old_kind = None
        if kind in ("K", "O"):
            old, old_kind = r.tuple(), kind
            kind = r.byte()
        if kind != "N":
            raise DecodeError(f"Update without its 'N' tuple (got {kind!r})")
        msg = Update(oid, r.tuple(), old, old_kind)
    elif tag == "D":
        oid = r.take(">I")
        kind = r.byte()
        if kind not in ("K", "O"):
            raise DecodeError(f"Delete with tuple kind {kind!r} (expected 'K' or 'O')")
        msg = Delete(oid, r.tuple(), kind)
    elif tag == "T":
        n = r.take(">i")
        options = r.take(">b")
        msg = Truncate(tuple(r.take(">I") for _ in range(n)), bool(options & 1),
                       bool(options & 2))
    elif tag == "M":
        flags = r.take(">b")
        lsn = r.take(">Q")
        prefix = r.string()
        msg = LogicalMessage(bool(flags & 1), lsn, prefix, r.raw(r.take(">i")))
    else:
        raise DecodeError(f"unknown pgoutput message tag {tag!r}")
    if r.pos != len(r.data):
        raise DecodeError(f"{len(r.data) - r.pos} bytes left after a {type(msg).__name__}")
    return msg
