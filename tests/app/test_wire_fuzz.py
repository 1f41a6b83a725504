"""Protocol fuzz test: Hypothesis-made and mutated messages for every RPC of
``partialflow.v1.Partialflow``, sent as raw bytes to one real in-process server.

Invariants, checked after every message:
- the answer is never INTERNAL or UNKNOWN;
- a Write (or INSERT, or Load) answered OK stored exactly the rows sent: a Python model of
  each table's multiset of rows is compared with the server's, by a lookup of the touched
  keys through a `WHERE id = ?` view every few OK writes, and by a full Spark query of
  every table every 700 messages and at the end;
- a refused request uses no LSN: the next acknowledged write has exactly the next LSN;
- a message the independent reference decoder below calls malformed is INVALID_ARGUMENT;
- the server keeps serving: a Ping after each message.

The run sends PARTIALFLOW_FUZZ_MESSAGES messages (2,000 by default, the suite's share of
CI's time: about 20 s on 2 cores), more for a longer search; PARTIALFLOW_FUZZ_SECONDS, if
set, also ends it after that many seconds. A count, not a time: generation is seeded, so
every CI run sends the same messages however loaded the machine is. Slow paths are rationed
(Spark jobs: valid queries, new lookup keys, loads, compactions), the rations growing with
the count. Set PARTIALFLOW_FUZZ_SEED to explore other messages. The number of messages is
printed in the run's summary and written to fuzz-report.json in the test's tmp dir.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import message_factory
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto.values import fill_batch

FUZZ_MESSAGES = int(os.environ.get("PARTIALFLOW_FUZZ_MESSAGES", "2000"))
FUZZ_SECONDS = float(os.environ.get("PARTIALFLOW_FUZZ_SECONDS") or "inf")
# A user property of this name, (title, line), is printed in the run's closing summary
# (tests/conftest.py), from an xdist worker too.
SUMMARY = "partialflow_summary"
BASE_SEED = int(os.environ.get("PARTIALFLOW_FUZZ_SEED", "20261122"))
# Messages between full-table checks (a Spark query of every table; also one at the end).
# A count like the run's length: a loaded machine does not make more of them.
CHECK_EVERY = 700
CHECK_WRITES = 6  # OK writes between reads of the keys they touched

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# table -> columns (name, type, primary key); every column is nullable except the key.
SCHEMAS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "fz_kv": (("id", "BIGINT", True), ("name", "TEXT", False), ("score", "DOUBLE", False),
              ("flag", "BOOLEAN", False)),
    "fz_bag": (("k", "BIGINT", False), ("s", "TEXT", False), ("d", "DOUBLE", False)),
}
# Views over a model table: all its columns, WHERE <first column> = ?
CHECK_VIEWS = {"fz_kv": "fz_kv_by_id", "fz_bag": "fz_bag_by_k"}
OTHER_VIEWS = ["fz_bag_n"]
SCRATCH = "fz_scratch"  # a table nobody models: for loads of the wrong format and such
DOMAIN = [INT64_MIN, -1, 0, 1, 2, 3, 5, INT64_MAX]  # keys kept filled in the check views

SERVICE = pb.DESCRIPTOR.services_by_name["Partialflow"]
METHODS = {m.name: m for m in SERVICE.methods}
REQUEST = {name: message_factory.GetMessageClass(m.input_type) for name, m in METHODS.items()}
RESPONSE = {name: message_factory.GetMessageClass(m.output_type) for name, m in METHODS.items()}
ALLOWED_CODES = set(grpc.StatusCode) - {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


# -- values: what is sent, what is stored -------------------------------------------------

def canon(v: Any, ctype: str | None = None) -> Any:
    """A value as compared with what the server stores: an int sent to a DOUBLE column is a
    double, -0.0 is 0.0, every NaN is one NaN; the type is kept (True is not 1)."""
    if v is None:
        return None
    if type(v) is float or (ctype == "DOUBLE" and type(v) is int):
        f = float(v) + 0.0
        return ("float", "nan") if f != f else ("float", f)
    return (type(v).__name__, v)


NAN = ("float", "nan")


def short(rows: Any, limit: int = 20) -> str:
    """Rows for a failure message: long values cut, at most ``limit`` rows."""
    text = [repr(r) if len(repr(r)) < 300 else repr(r)[:300] + "..." for r in rows]
    more = f" and {len(text) - limit} more" if len(text) > limit else ""
    return f"{sorted(text)[:limit]}{more}"


def decanon(c: Any) -> Any:
    if c is None:
        return None
    return math.nan if c == ("float", "nan") else c[1]


def canon_row(row: tuple, schema: tuple | None = None) -> tuple:
    types = [c[1] for c in schema] if schema else [None] * len(row)
    return tuple(canon(v, t) for v, t in zip(row, types, strict=True))


def encode(v: Any, target: pb.Value) -> None:
    if v is None:
        target.null_value = True
    elif type(v) is bool:
        target.bool_value = v
    elif type(v) is int:
        target.int_value = v
    elif type(v) is float:
        target.double_value = v
    else:
        target.string_value = v


# -- the reference decoder: the wire contract, written independently of the server -------

class Malformed(Exception):
    pass


def ref_value(v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None:
        raise Malformed("unset Value")
    return None if kind == "null_value" else getattr(v, kind)


def ref_rows(rows: Any) -> list[tuple]:
    return [tuple(ref_value(v) for v in r.values) for r in rows]


_TYPED = {1: "ints", 2: "doubles", 3: "strings", 4: "bools"}


def ref_batch(b: pb.RowBatch) -> list[tuple]:
    n = b.num_rows
    if not b.columns:
        if n:
            raise Malformed("rows without columns")
        return []
    columns = []
    for c in b.columns:
        lists = {name: list(getattr(c, name)) for name in _TYPED.values()}
        nulls = list(c.nulls)
        if c.kind == 0:
            if any(lists.values()) or nulls or len(c.values) != n:
                raise Malformed("MIXED column")
            columns.append([ref_value(v) for v in c.values])
        elif c.kind in _TYPED:
            own = lists.pop(_TYPED[c.kind])
            if any(lists.values()) or len(c.values):
                raise Malformed("values in another list")
            if len(set(nulls)) != len(nulls) or any(i >= n for i in nulls):
                raise Malformed("bad nulls")
            if len(own) + len(nulls) != n:
                raise Malformed("count")
            it, null_set = iter(own), set(nulls)
            columns.append([None if i in null_set else next(it) for i in range(n)])
        else:
            raise Malformed("unknown kind")
    return list(zip(*columns, strict=True))


def ref_keys(req: pb.LookupRequest) -> list[tuple]:
    """A lookup's keys: its Key messages, then its key batch."""
    keys = ref_rows(req.keys)
    if req.HasField("key_batch"):
        keys += ref_batch(req.key_batch)
    return keys


def ref_answer(answer: pb.LookupResponse, n: int) -> list[tuple[list[tuple], int]]:
    """Per key, its rows and LSN, from a lookup's columnar block; asserts the block is
    well formed (one offset per key, in order, within the rows; one LSN per key or none)."""
    rows = ref_batch(answer.rows)
    offsets = list(answer.offsets)
    assert len(offsets) == n, f"{len(offsets)} offsets for {n} keys"
    ends = [*offsets[1:], len(rows)] if n else []
    assert all(0 <= a <= b <= len(rows) for a, b in zip(offsets, ends, strict=True)), offsets
    lsns = list(answer.key_lsns)
    assert not lsns or len(lsns) == n, f"{len(lsns)} key LSNs for {n} keys"
    if not lsns:
        lsns = [answer.lsn] * n
    assert not lsns or max(lsns) == answer.lsn, f"lsn {answer.lsn}, key LSNs {lsns}"
    return [(rows[a:b], lsn) for a, b, lsn in zip(offsets, ends, lsns, strict=True)]


def ref_write(req: pb.WriteRequest) -> tuple[list[tuple], list[tuple]]:
    inserts = ref_rows(req.inserts)
    if req.HasField("insert_batch"):
        inserts += ref_batch(req.insert_batch)
    deletes = ref_rows(req.deletes)
    if req.HasField("delete_batch"):
        deletes += ref_batch(req.delete_batch)
    return inserts, deletes


# -- the model ---------------------------------------------------------------------------

@dataclass
class Model:
    tables: dict[str, Counter] = field(default_factory=lambda: {t: Counter() for t in SCHEMAS})
    last_lsn: int = 0

    def rows(self, table: str) -> list[tuple]:
        return list(self.tables[table])

    def apply(self, table: str, inserts: list[tuple], deletes: list[tuple]) -> None:
        schema = SCHEMAS[table]
        bag = self.tables[table]
        for row in deletes:
            c = canon_row(row, schema)
            assert bag[c] > 0, f"an OK write deleted {row!r}, which {table} does not hold"
            bag[c] -= 1
            if not bag[c]:
                del bag[c]
        for row in inserts:
            bag[canon_row(row, schema)] += 1

    def with_key(self, table: str, key: int) -> Counter:
        want = canon(key)
        return Counter({r: n for r, n in self.tables[table].items() if r[0] == want})


MODEL = Model()


# -- strategies ----------------------------------------------------------------------------

TEXT_CHARS = st.characters(blacklist_categories=("Cs",))
INTS = st.one_of(
    st.sampled_from(DOMAIN),
    st.sampled_from([2**53, 2**53 + 1, -(2**31), 2**32, 4]),
    st.integers(INT64_MIN, INT64_MAX),
)
DOUBLES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308,
                     0.1, -2.5, 2.0**63]),
    st.floats(allow_nan=True, allow_infinity=True),
)
TEXTS = st.one_of(
    st.sampled_from(["", "a", "é", "😀", "\x00", "a'b", "\\", "\u2028", "NULL", "' OR 1=1 --",
                     "\r\n", "Ω" * 50]),
    st.text(TEXT_CHARS, max_size=12),
    st.integers(1000, 20_000).map(lambda n: "x" * n),
)
BOOLS = st.booleans()
BY_TYPE = {"BIGINT": INTS, "DOUBLE": DOUBLES, "TEXT": TEXTS, "BOOLEAN": BOOLS}
ANY_VALUE = st.one_of(st.none(), INTS, DOUBLES, TEXTS, BOOLS)


def cell(ctype: str, key: bool) -> st.SearchStrategy:
    good = BY_TYPE[ctype]
    if key:
        good = st.sampled_from(DOMAIN) | INTS
    return st.one_of(good, good, good, st.none(), ANY_VALUE)


def row_for(schema: tuple) -> st.SearchStrategy:
    return st.tuples(*[cell(t, pk) for _, t, pk in schema])


ODD_TABLE_NAMES = st.one_of(
    st.sampled_from(["FZ_Bag", SCRATCH, "nope", "", "../fz_bag", "fz_bag; DROP TABLE fz_kv"]),
    st.text(TEXT_CHARS, max_size=10),
)
TABLE_NAMES = st.one_of(st.sampled_from(["fz_kv", "fz_bag"]), ODD_TABLE_NAMES)
VIEW_NAMES = st.one_of(
    st.sampled_from([*CHECK_VIEWS.values(), *OTHER_VIEWS, "FZ_KV_BY_ID", "nope", "", "fz_kv"]),
    st.text(TEXT_CHARS, max_size=10),
)
LSNS = st.one_of(
    st.sampled_from([0, -1, INT64_MIN, INT64_MAX, 1]),
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(0, 3).map(lambda d: max(0, MODEL.last_lsn - d)),
    st.integers(1, 3).map(lambda d: MODEL.last_lsn + d),
)


# Hypothesis draws the values, the table and the kinds of mutation; what depends on the
# model (which rows exist to be deleted) and on sizes that follow from it is decided with
# a Random that Hypothesis seeds but does not record (``st.randoms(use_true_random=True)``):
# a recorded draw whose shape depended on the model would look like a flaky strategy.

def model_rows(rnd: Any, table: str, n: int) -> list[tuple]:
    """Up to ``n`` rows the model holds (so deletes can succeed)."""
    rows = MODEL.rows(table) if table in MODEL.tables else []
    if not rows:
        return []
    return [tuple(decanon(c) for c in rnd.choice(rows)) for _ in range(rnd.randint(0, n))]


def put_rows(rnd: Any, rows: list[tuple], field_rows: Any, batch: pb.RowBatch) -> None:
    """Rows as Row messages, as a batch (the client's encoder) or split between both."""
    how = rnd.choice(["rows", "batch", "batch", "split"])
    cut = len(rows) if how == "rows" else 0 if how == "batch" else rnd.randint(0, len(rows))
    for row in rows[:cut]:
        values = field_rows.add().values
        for v in row:
            encode(v, values.add())
    if rows[cut:] and not fill_batch(batch, rows[cut:]):
        for row in rows[cut:]:
            values = field_rows.add().values
            for v in row:
                encode(v, values.add())


ROW_MUTATIONS = ["unset", "retype", "drop", "add", "unknown", "dup"]
BATCH_MUTATIONS = [
    "kind", "move", "drop", "add", "null-range", "null-dup", "null-in", "num_rows",
    "num_rows-huge", "no-columns", "extra-column", "drop-column", "mixed-unset",
]


def mutate_rows(rnd: Any, op: str, rows: Any, spare: list) -> None:
    if not rows:
        return
    r = rnd.choice(rows)
    if op == "drop" and r.values:
        del r.values[-1]
    elif op == "add":
        encode(rnd.choice(spare), r.values.add())
    elif op == "dup":
        rows.add().CopyFrom(r)
    elif r.values:
        v = rnd.choice(r.values)
        v.Clear()
        if op == "retype":
            encode(rnd.choice(spare), v)
        elif op == "unknown":  # a field this proto does not know (a misspelled name)
            v.MergeFromString(b"\x48\x07")


def mutate_batch(rnd: Any, op: str, b: pb.RowBatch, spare: list) -> None:
    if op == "num_rows":
        b.num_rows = max(0, b.num_rows + rnd.choice([-1, 1, 2]))
        return
    if op == "num_rows-huge":
        b.num_rows = 2**32 - 1
        return
    if op == "no-columns":
        del b.columns[:]
        return
    if op == "extra-column":
        c = b.columns.add(kind=rnd.randint(0, 4))
        for _ in range(b.num_rows):
            encode(rnd.choice(spare), c.values.add())
        return
    if not b.columns:
        return
    c = rnd.choice(b.columns)
    own = _TYPED.get(c.kind, "values")
    values = getattr(c, own)
    if op == "drop-column":
        del b.columns[-1]
    elif op == "kind":
        c.kind = rnd.choice([rnd.randint(0, 4), rnd.randint(5, 2**31 - 1)])
    elif op == "move" and own != "values" and len(values):
        other = rnd.choice([n for n in (*_TYPED.values(), "values") if n != own])
        target = getattr(c, other)
        for v in list(values):
            if other == "values":
                encode(v, target.add())
            elif other == "ints":
                target.append(int(v) if not isinstance(v, (str, float)) else 7)
            elif other == "doubles":
                target.append(float(len(str(v))))
            elif other == "strings":
                target.append(str(v))
            else:
                target.append(bool(v))
        del values[:]
    elif op == "drop" and len(values):
        del values[-1]
    elif op == "add" and len(values):
        if own == "values":
            values.add().CopyFrom(values[0])
        else:
            values.append(values[0])
    elif op == "null-range":
        c.nulls.append(b.num_rows + rnd.randint(0, 2**31))
    elif op == "null-dup" and len(c.nulls):
        c.nulls.append(c.nulls[0])
    elif op == "null-in" and b.num_rows:
        c.nulls.append(rnd.randint(0, b.num_rows - 1))
    elif op == "mixed-unset" and own == "values" and len(values):
        rnd.choice(values).Clear()


def clean_row(schema: tuple) -> st.SearchStrategy:
    """A row the table takes (NULL anywhere but the key)."""
    return st.tuples(*[
        (st.sampled_from(DOMAIN) | INTS) if pk else (BY_TYPE[t] | st.none())
        for _, t, pk in schema
    ])


@st.composite
def write_requests(draw: Any) -> pb.WriteRequest:
    """Mostly writes the server should take (so that OK answers can be checked), the rest
    with random values, random deletes and mutations."""
    clean = weighted(draw, [(6, True), (4, False)])
    table = draw(st.sampled_from(["fz_kv", "fz_bag", "fz_bag"]) if clean else TABLE_NAMES)
    schema = SCHEMAS.get(table.lower(), SCHEMAS["fz_bag"])
    inserts = draw(st.lists(clean_row(schema) if clean else row_for(schema), max_size=5))
    if inserts and draw(st.integers(0, 20)) == 0:
        inserts = inserts * draw(st.integers(2, 200))  # a larger batch
    fresh = draw(st.lists(clean_row(schema), min_size=3, max_size=3))
    strays = [] if clean else draw(st.lists(row_for(schema), max_size=2))
    ops = [] if clean else draw(st.lists(
        st.tuples(st.sampled_from(["inserts", "deletes", "insert_batch", "delete_batch"]),
                  st.sampled_from(BATCH_MUTATIONS), st.sampled_from(ROW_MUTATIONS)),
        max_size=2,
    ))
    spare = draw(st.lists(ANY_VALUE, min_size=3, max_size=3))
    rnd = draw(st.randoms(use_true_random=True))

    req = pb.WriteRequest(table=table)
    deletes = model_rows(rnd, table.lower(), 3) if rnd.random() < 0.5 else []
    if clean and deletes and table == "fz_kv" and rnd.random() < 0.5:
        # An update: new values under the deleted rows' keys.
        deletes = list(dict.fromkeys(deletes))
        # Deduplicated deletes may be fewer than the fresh rows: update only that many.
        inserts = [(d[0], *f[1:]) for d, f in zip(deletes, fresh, strict=False)]
    if strays and rnd.random() < 0.3:
        deletes += strays
    if deletes:
        put_rows(rnd, deletes, req.deletes, req.delete_batch)
    if inserts:
        put_rows(rnd, inserts, req.inserts, req.insert_batch)
    for target, batch_op, row_op in ops:
        if target.endswith("batch"):
            mutate_batch(rnd, batch_op, getattr(req, target), spare)
        else:
            mutate_rows(rnd, row_op, getattr(req, target), spare)
    return req


@st.composite
def transact_requests(draw: Any) -> pb.TransactRequest:
    """Transactions of up to three writes' changes (to one table or several)."""
    req = pb.TransactRequest()
    for change in draw(st.lists(write_requests(), max_size=3)):
        req.changes.add().CopyFrom(change)
    if req.changes and draw(st.integers(0, 3)) == 0:
        # Undo a change within the transaction: its net effect on that table is nothing,
        # and the writes after it must still be read whole (they once were not, before a
        # flush: an empty batch among the unflushed rows made Spark drop the rest).
        change = req.changes[draw(st.integers(0, len(req.changes) - 1))]
        try:
            inserts, deletes = ref_write(change)
        except Malformed:
            return req
        undo = req.changes.add(table=change.table)
        rnd = draw(st.randoms(use_true_random=True))
        if inserts:
            put_rows(rnd, inserts, undo.deletes, undo.delete_batch)
        if deletes:
            put_rows(rnd, deletes, undo.inserts, undo.insert_batch)
    return req


def ref_transact(req: pb.TransactRequest) -> list[tuple[str, list[tuple], list[tuple]]]:
    return [(c.table, *ref_write(c)) for c in req.changes]


def keys_of(draw: Any) -> list[pb.Key]:
    keys = []
    for _ in range(draw(st.integers(0, 4))):
        key = pb.Key()
        width = draw(st.sampled_from([1, 1, 1, 0, 2]))
        for _ in range(width):
            v = key.values.add()
            kind = draw(st.sampled_from(["domain", "domain", "domain", "any", "unset", "unknown"]))
            if kind == "domain":
                v.int_value = draw(st.sampled_from(DOMAIN))
            elif kind == "any":
                encode(draw(ANY_VALUE), v)
            elif kind == "unknown":
                v.MergeFromString(b"\x48\x07")
        keys.append(key)
    return keys


@st.composite
def lookup_requests(draw: Any) -> pb.LookupRequest:
    """Keys as Key messages, and often more of them in a key batch (the client's encoder),
    sometimes mutated."""
    req = pb.LookupRequest(view=draw(VIEW_NAMES), keys=keys_of(draw))
    if draw(st.booleans()):
        width = draw(st.sampled_from([1, 1, 1, 0, 2]))
        value = st.sampled_from(DOMAIN) | ANY_VALUE
        batch_keys = draw(st.lists(st.tuples(*[value] * width), max_size=6))
        rnd = draw(st.randoms(use_true_random=True))
        put_rows(rnd, batch_keys, req.keys, req.key_batch)
        if draw(st.integers(0, 3)) == 0:
            spare = draw(st.lists(ANY_VALUE, min_size=3, max_size=3))
            mutate_batch(rnd, draw(st.sampled_from(BATCH_MUTATIONS)), req.key_batch, spare)
    if draw(st.booleans()):
        req.min_lsn = draw(LSNS)
    return req


@st.composite
def subscribe_requests(draw: Any) -> pb.SubscribeRequest:
    """A Lookup's keys (same fields), a resume LSN sometimes, a buffer size."""
    look = draw(lookup_requests())
    req = pb.SubscribeRequest(view=look.view, keys=look.keys)
    if look.HasField("key_batch"):
        req.key_batch.CopyFrom(look.key_batch)
    if draw(st.integers(0, 3)) == 0:
        req.from_lsn = draw(LSNS)
    req.max_buffered = draw(st.sampled_from([0, 0, 1, 2**32 - 1]))
    return req


@st.composite
def evict_requests(draw: Any) -> pb.EvictRequest:
    req = pb.EvictRequest(view=draw(VIEW_NAMES))
    if draw(st.integers(0, 9)):
        keys = keys_of(draw)
        req.key.CopyFrom(keys[0] if keys else pb.Key())
    return req


# SQL: random text, random strings of fragments (no DROP, no INSERT: a chance statement
# must not change the modelled tables) and templates, some valid.
FRAGMENTS = [
    "SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "LIMIT", "HAVING", "JOIN", "LEFT JOIN",
    "ON", "AS", "AND", "OR", "NOT", "NULL", "IS", "IN", "(", ")", ",", ";", "*", "=", "<",
    ">", "?", "+", "-", "/", "'", '"', "`", "1", "-1", "1e309", "9223372036854775808",
    "0.5", "'x'", "TRUE", "COUNT(*)", "SUM(d)", "MAX(", "k", "s", "d", "id", "name",
    "fz_bag", "fz_kv", "fz_v1", SCRATCH, "CREATE", "TABLE", "VIEW", "EXPLAIN", "UNION",
    "DISTINCT", "BIGINT", "TEXT", "DOUBLE", "BOOLEAN", "PRIMARY KEY", "--", "/*", "*/",
    "SELEC", "CASE", "WHEN", "END", "\x00", "é", "((((((((((", "))))))))))", "UPDATE",
    "DELETE", "ALTER", "WITH", "OVER", "CAST(", "::", "$1", "@", "\\",
]
SQL_FRAGMENTS = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=14).map(" ".join)
SCRATCH_NAMES = st.sampled_from(["fz_t1", "fz_t2", "fz_v1", "fz_v2", "FZ_T1"])
TYPES = st.sampled_from(["BIGINT", "INT", "DOUBLE", "TEXT", "VARCHAR(3)", "BOOLEAN", "DATE",
                         "BLOB", "bigint"])
COLUMN_NAMES = st.sampled_from(["a", "b", "_lsn", "select", "A", "x1", "é", "a b", "k"])


def literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if type(v) is bool:
        return "TRUE" if v else "FALSE"
    if type(v) is int:
        return str(v)
    if type(v) is float:
        return repr(v)
    return "'" + v.replace("'", "''") + "'"


@dataclass
class Sql:
    text: str
    insert: tuple[str, list[tuple]] | None = None  # what an OK answer must have stored
    refuse: bool = False  # an OK answer is a bug

    def __repr__(self) -> str:
        return f"Sql({self.text[:300]!r})"


@st.composite
def insert_sql(draw: Any) -> Sql:
    """INSERT ... VALUES with literals, with or without a column list (in any order and
    case, some columns left out: NULL); a column listed twice must be refused."""
    table = draw(st.sampled_from(["fz_bag", "fz_kv", "fz_bag"]))
    schema = SCHEMAS[table]
    names = [c[0] for c in schema]
    finite = st.one_of(INTS, DOUBLES.filter(math.isfinite), TEXTS, BOOLS, st.none())
    good = {**BY_TYPE, "DOUBLE": DOUBLES.filter(math.isfinite)}  # SQL has no NaN literal
    cells = [INTS if i == 0 else st.one_of(good[t], good[t], good[t], good[t], finite)
             for i, (_, t, _) in enumerate(schema)]
    rows = draw(st.lists(st.tuples(*cells), min_size=1, max_size=3))
    mode = weighted(draw, [(3, "all"), (2, "order"), (1, "some"), (1, "twice")])
    rnd = draw(st.randoms(use_true_random=True))
    order = list(range(len(names)))
    rnd.shuffle(order)
    if mode == "some":
        order = order[: rnd.randint(1, len(order))]
    elif mode == "twice":
        order.append(rnd.choice(order))
    if mode == "all":
        text = f"INSERT INTO {table} VALUES " + ", ".join(
            "(" + ", ".join(literal(v) for v in r) + ")" for r in rows
        )
    else:
        listed = [names[i].upper() if rnd.random() < 0.2 else names[i] for i in order]
        text = f"INSERT INTO {table} ({', '.join(listed)}) VALUES " + ", ".join(
            "(" + ", ".join(literal(r[i]) for i in order) + ")" for r in rows
        )
    if mode == "twice":
        return Sql(text, refuse=True)
    stored = [tuple(r[i] if i in order else None for i in range(len(names))) for r in rows]
    return Sql(text, (table, stored))


@st.composite
def ddl_sql(draw: Any) -> Sql:
    name = draw(SCRATCH_NAMES)
    kind = draw(st.sampled_from(["table", "view", "drop-table", "drop-view", "explain"]))
    if kind == "table":
        cols = draw(st.lists(st.tuples(COLUMN_NAMES, TYPES), min_size=0, max_size=3))
        body = ", ".join(f"{n} {t}" for n, t in cols)
        return Sql(f"CREATE TABLE {draw(st.sampled_from(['', 'IF NOT EXISTS ']))}{name} ({body})")
    if kind == "view":
        query = draw(st.sampled_from([
            f"SELECT a FROM {name} WHERE a = ?",
            "SELECT k, COUNT(*) AS n FROM fz_bag WHERE k = ? GROUP BY k",
            "SELECT s FROM fz_bag WHERE k = ? AND s = ?",
            "SELECT k FROM fz_bag WHERE k = ? ORDER BY d LIMIT 2",
            "SELECT nope FROM fz_bag",
            "SELECT k FROM fz_bag WHERE k = ? UNION SELECT id FROM fz_kv WHERE id = ?",
        ]))
        return Sql(f"CREATE VIEW {name} AS {query}")
    if kind == "drop-table":
        return Sql(f"DROP TABLE {draw(st.sampled_from(['', 'IF EXISTS ']))}{name}")
    if kind == "drop-view":
        return Sql(f"DROP VIEW {draw(st.sampled_from(['', 'IF EXISTS ']))}{name}")
    return Sql(f"EXPLAIN {draw(st.sampled_from([name, *CHECK_VIEWS.values(), 'nope']))}")


SELECTS = st.sampled_from([
    "SELECT COUNT(*) AS n FROM fz_bag",
    "SELECT k, s FROM fz_bag WHERE k = 1",
    "SELECT * FROM fz_kv WHERE score > 0.5 ORDER BY id LIMIT 3",
    "SELECT MAX(d) AS m FROM fz_bag",
])
DEEP_SQL = st.tuples(
    st.sampled_from(["SELECT {p}1{q}", "SELECT k FROM fz_bag WHERE {p}k = 1{q}",
                     "CREATE VIEW fz_v3 AS SELECT k FROM fz_bag WHERE k = ? AND {p}s = 'a'{q}",
                     "SELECT k FROM fz_bag WHERE k = 1 AND ({ors})"]),
    st.sampled_from([10, 200, 1100, 3000]),
).map(lambda t: Sql(t[0].format(p="(" * t[1], q=")" * t[1],
                                 ors=" OR ".join(f"s = '{i}'" for i in range(t[1])))))
RANDOM_SQL = st.one_of(
    st.text(TEXT_CHARS, max_size=40).map(Sql),
    SQL_FRAGMENTS.map(Sql),
    SQL_FRAGMENTS.map(Sql),
    DEEP_SQL,
)


def weighted(draw: Any, choices: list[tuple[int, Any]]) -> Any:
    """One of ``choices`` by weight. (Hypothesis' own choices lean to the first one; an
    unrecorded Random keeps the weights.)"""
    rnd = draw(st.randoms(use_true_random=True))
    return rnd.choices([c for _, c in choices], [w for w, _ in choices])[0]


@st.composite
def execute_requests(draw: Any) -> tuple[pb.ExecuteRequest, Sql]:
    branch = weighted(draw, [(3, RANDOM_SQL), (3, insert_sql()), (2, ddl_sql()),
                             (1, SELECTS.map(Sql))])
    sql = draw(branch)
    return pb.ExecuteRequest(sql=sql.text, columnar=draw(BOOLS)), sql


@st.composite
def query_requests(draw: Any) -> pb.QueryRequest:
    sql = draw(weighted(draw, [(4, RANDOM_SQL), (1, SELECTS.map(Sql))]))
    req = pb.QueryRequest(sql=sql.text, columnar=draw(BOOLS))
    if draw(st.booleans()):
        req.as_of = draw(LSNS)
    return req


@st.composite
def load_requests(draw: Any) -> pb.LoadRequest:
    files = FILES
    kind = draw(st.sampled_from(["missing", "missing", "odd", "parquet", "csv", "wrong"]))
    req = pb.LoadRequest(table=draw(TABLE_NAMES), force=draw(BOOLS), header=draw(BOOLS))
    req.format = draw(st.sampled_from(["", "parquet", "csv", "CSV", "json", "x"]))
    if kind == "missing":  # under a directory that does not exist (never "/" or "..")
        name = draw(st.text(TEXT_CHARS, max_size=20).filter(lambda p: "/" not in p))
        req.path = os.path.join(files["dir"], "missing", name.replace("..", "_"))
    elif kind == "odd":
        req.path = draw(st.sampled_from(["", "\x00", "a\x00b", "http://[::1/x", "x\ny"]))
    elif kind in ("parquet", "csv"):  # a real file of fz_bag rows, read the right way
        req.table = draw(st.sampled_from(["fz_bag", "fz_bag", SCRATCH, "nope"]))
        req.path, req.format, req.header = files[kind], kind, kind == "csv"
        req.ClearField("options")
        if kind == "csv" and draw(BOOLS):
            req.options["sep"] = ","
        return req
    else:  # a real file read the wrong way, into the table nobody models
        req.table = SCRATCH
        req.path = files[draw(st.sampled_from(["parquet", "csv"]))]
    for k, v in draw(st.dictionaries(st.sampled_from(["sep", "", "mode", "quote", "x"]),
                                     st.text(TEXT_CHARS, max_size=3), max_size=2)).items():
        req.options[k] = v
    return req


def message_of(method: str) -> st.SearchStrategy:
    simple = {
        "Stats": st.just(pb.StatsRequest()),
        "Flush": st.just(pb.FlushRequest()),
        "Ping": st.builds(
            lambda payload, reply: pb.PingRequest(payload=payload, reply_bytes=reply),
            st.binary(max_size=64),
            st.sampled_from([0, 0, 1, 1000, 64 * 2**20 + 1, 2**32 - 1]),
        ),
        "Checkpoint": st.just(pb.CheckpointRequest()),
        "Explain": VIEW_NAMES.map(lambda v: pb.ExplainRequest(view=v)),
        "Compact": st.one_of(
            st.just(pb.CompactRequest()),
            TABLE_NAMES.map(lambda t: pb.CompactRequest(table=t)),
        ),
    }
    made = {
        "Write": write_requests(),
        "Transact": transact_requests(),
        "Lookup": lookup_requests(),
        "Evict": evict_requests(),
        "Execute": execute_requests(),
        "Query": query_requests(),
        "Load": load_requests(),
        "Subscribe": subscribe_requests(),
    }
    return simple[method] if method in simple else made[method]


# Weights: writes (checked against the model) most of all.
METHOD_MIX = (["Write"] * 8 + ["Transact"] * 3 + ["Lookup"] * 3 + ["Execute"] * 3 + ["Query"] * 2
              + ["Evict", "Stats", "Explain", "Flush", "Compact", "Load", "Ping", "Checkpoint"])


@st.composite
def fuzz_items(draw: Any) -> tuple[str, Any, Sql | None, bytes | None]:
    """(method, request message, its SQL template if any, raw bytes if mutated)."""
    method = weighted(draw, [(1, m) for m in [*METHODS, *METHOD_MIX]])
    made = draw(message_of(method))
    request, sql = made if isinstance(made, tuple) else (made, None)
    raw = None
    if draw(st.integers(0, 12)) == 0:  # bytes-level mutation
        data = bytearray(request.SerializeToString())
        op = draw(st.sampled_from(["flip", "truncate", "insert", "junk"]))
        if op == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif op == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif op == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=6))
        else:
            data = bytearray(draw(st.binary(max_size=40)))
        raw = bytes(data)
    return method, request, sql, raw


# -- the driver ----------------------------------------------------------------------------

FILES: dict[str, str] = {}
# The rows of the files (fz_bag's columns). CSV has no NULL of its own: an empty field is
# NULL (Spark's convention), so the CSV's NULL text is written as an empty field.
FILE_ROWS = {
    "parquet": [(1, "loaded", 0.5), (2, 'é,"q"', None), (None, "", -1.0), (3, None, 2.0)],
    "csv": [(1, "loaded", 0.5), (2, 'é,"q"', None), (None, None, -1.0), (3, "a\\b", 2.0)],
}
CSV_TEXT = 'k,s,d\n1,loaded,0.5\n2,"é,""q""",\n,,-1.0\n3,a\\b,2.0\n'

# Spark jobs and other slow paths, rationed per run (scaled with the message count).
BUDGETS = {"spark-query": 12, "new-key": 30, "load": 4, "compact": 2, "view": 6, "flush": 30,
           "evict-all": 2, "evict-key": 6, "big": 40}


class Driver:
    def __init__(self, address: str, client: Any) -> None:
        self.channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        )
        self.client = client
        self.calls = {
            name: (self.channel.unary_stream if m.server_streaming else self.channel.unary_unary)(
                f"/{SERVICE.full_name}/{name}",
                request_serializer=None,
                response_deserializer=RESPONSE[name].FromString,
            )
            for name, m in METHODS.items()
        }
        scale = max(1.0, FUZZ_MESSAGES / 6000)
        self.budget = {k: int(v * scale) for k, v in BUDGETS.items()}
        self.sent = Counter()
        self.seconds: Counter = Counter()  # time spent, per method and per kind of check
        self.codes = Counter()
        self.skipped = 0
        self.filled: set[tuple] = set()  # (view, key) known to be filled
        self.last_check = 0  # messages sent at the last full check
        self.checks = 0
        self.unchecked: dict[str, set] = {}  # table -> keys written since the last check
        self.unchecked_writes: list[str] = []
        # (table, canonical key) -> the acknowledged writes that touched it, for a failure.
        self.history: dict[tuple[str, Any], list[str]] = {}
        self.storage: Any = None  # the in-process server's storage, for a failure's report

    # -- cost control --------------------------------------------------------------

    def spend(self, kind: str) -> bool:
        if self.budget[kind] <= 0:
            return False
        self.budget[kind] -= 1
        return True

    def affordable(self, method: str, msg: Any, sql: Sql | None) -> bool:
        if msg is None:
            return True
        if method in ("Write", "Transact") and msg.ByteSize() > 200_000:
            return self.spend("big")
        if method in ("Query", "Execute"):
            text = msg.sql.strip().upper()
            if sql is not None and sql.insert is not None:
                return True
            if text.count("(") > 1000:
                return True  # refused before any Spark job: too deep for the parser
            if text.startswith(("SELECT", "WITH", "(")):
                return self.spend("spark-query")
            if "VIEW" in text and text.startswith("CREATE"):
                return self.spend("view")
            return True
        if method == "Load":
            real = msg.path in FILES.values()
            return self.spend("load") if real else True
        if method == "Compact":
            named = msg.table.lower() in (*SCHEMAS, SCRATCH) if msg.HasField("table") else True
            return self.spend("compact") if named else True
        if method == "Flush":
            return self.spend("flush")
        if method == "Evict":
            if msg.view.lower() not in CHECK_VIEWS.values():
                return True
            if not msg.HasField("key"):
                return self.spend("evict-all")
            # A checked key evicted is refilled (a Spark job) by the next check.
            return self.spend("evict-key") if not self._new_key(msg.view, msg.key) else True
        if method == "Subscribe" and msg.HasField("from_lsn"):
            return self.spend("spark-query")  # the rows as of from_lsn come from Spark
        if method == "Subscribe":
            new = [k for k in msg.keys if self._new_key(msg.view, k)]
            return self.spend("new-key") if new else True
        if method == "Lookup":
            new = [k for k in msg.keys if self._new_key(msg.view, k)]
            if new and not (msg.HasField("min_lsn") and not 0 <= msg.min_lsn <= MODEL.last_lsn):
                return self.spend("new-key")
        return True

    def _new_key(self, view: str, key: pb.Key) -> bool:
        try:
            values = tuple(ref_value(v) for v in key.values)
        except Malformed:
            return False
        if len(values) != 1 or values[0] is None:
            return False
        return (view.lower(), canon(values[0])) not in self.filled

    # -- sending ----------------------------------------------------------------------

    def call(self, method: str, payload: bytes, timeout: float) -> tuple[grpc.StatusCode, Any]:
        try:
            answer = self.calls[method](payload, timeout=timeout)
            if method == "Subscribe":  # a valid one streams for good: its first event only
                first = next(answer)
                answer.cancel()
                return grpc.StatusCode.OK, [first]
            if METHODS[method].server_streaming:
                answer = list(answer)
            return grpc.StatusCode.OK, answer
        except grpc.RpcError as err:
            return err.code(), err.details()

    def ping(self) -> None:
        code, details = self.call("Ping", b"", 10)
        assert code == grpc.StatusCode.OK, f"the server stopped serving: {code} {details}"

    def run(self, method: str, request: Any, sql: Sql | None, raw: bytes | None) -> None:
        payload = raw if raw is not None else request.SerializeToString()
        msg: Any = request
        if raw is not None:
            try:
                msg = REQUEST[method].FromString(raw)
            except Exception:  # noqa: BLE001 - not parseable: the server must say so
                msg = None
            sql = None  # a mutated statement is no longer the template's
        if method == "Execute" and msg is not None and sql is None:
            head = msg.sql.lstrip().upper()
            if head.startswith(("INSERT", "DROP")):  # could change the modelled tables
                self.skipped += 1
                return
        if not self.affordable(method, msg, sql):
            self.skipped += 1
            return
        expect_invalid = msg is None
        write: tuple[list, list] | None = None
        if method == "Write" and msg is not None:
            try:
                write = ref_write(msg)
                expect_invalid = not (write[0] or write[1])  # an empty write is refused
            except Malformed:
                expect_invalid = True
        if method == "Transact" and msg is not None:
            try:
                write = ref_transact(msg)
                expect_invalid = not any(i or d for _, i, d in write)  # no rows: refused
            except Malformed:
                expect_invalid = True
        if method == "Ping" and msg is not None:
            expect_invalid = msg.reply_bytes > 64 * 2**20
        if method in ("Lookup", "Subscribe") and msg is not None:
            try:
                ref_keys(msg)
            except Malformed:
                expect_invalid = True
        timeout = {"Lookup": 5.0, "Subscribe": 10.0, "Write": 60.0, "Transact": 60.0, "Load": 120.0,
                   "Compact": 120.0}.get(method, 60.0)
        self.sent[method] += 1
        t0 = time.monotonic()
        code, answer = self.call(method, payload, timeout)
        self.seconds[method] += time.monotonic() - t0
        self.codes[(method, code.name)] += 1
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            print("RESOURCE_EXHAUSTED", method, len(payload), answer)
        shown = f"{method} {str(msg)[:2000] if msg is not None else raw[:2000]!r}"
        assert code in ALLOWED_CODES, f"{code.name} for {shown}: {answer}"
        if expect_invalid:
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (
                f"{code.name} (not INVALID_ARGUMENT) for a malformed {shown}: {answer}"
            )
        if sql is not None and sql.refuse:
            assert code != grpc.StatusCode.OK, f"acknowledged what must be refused: {shown}"
        if code == grpc.StatusCode.OK:
            self.after_ok(method, msg, sql, write, answer, shown)
        elif method in ("Write", "Transact"):
            assert code != grpc.StatusCode.DEADLINE_EXCEEDED, f"a write timed out: {shown}"
        self.ping()

    def after_ok(self, method: str, msg: Any, sql: Sql | None, write: Any, answer: Any,
                 shown: str) -> None:
        if method == "Write":
            self.acknowledged(answer.lsn, shown)
            table = msg.table.lower()
            if table in SCHEMAS:
                self.apply_and_check(table, write[0], write[1], answer.lsn, shown)
        elif method == "Transact":
            # One LSN for all of it; the model takes every change before any check reads.
            self.acknowledged(answer.lsn, shown)
            known = [(t.lower(), i, d) for t, i, d in write if t.lower() in SCHEMAS]
            for table, inserts, deletes in known[:-1]:
                MODEL.apply(table, inserts, deletes)
                self.note(table, inserts, deletes, answer.lsn, shown)
                touched = {r[0] for r in [*inserts, *deletes]
                           if type(r[0]) is int and r[0] in DOMAIN}
                self.unchecked.setdefault(table, set()).update(touched)
            if known:
                self.apply_and_check(*known[-1], answer.lsn, shown)
        elif method == "Execute" and sql is not None and sql.insert is not None:
            table, rows = sql.insert
            self.acknowledged(answer.lsn, shown)
            self.apply_and_check(table, rows, [], answer.lsn, shown)
        elif method == "Load":
            done = [p for p in answer if p.phase == "done"]
            assert len(done) == 1, f"a load ended OK without one done message: {shown}"
            self.acknowledged(done[0].lsn, shown)
            if msg.table.lower() == "fz_bag":
                kind = next(k for k in FILE_ROWS if FILES[k] == msg.path)
                self.apply_and_check("fz_bag", FILE_ROWS[kind], [], done[0].lsn, shown)
        elif method == "Lookup":
            self.check_lookup(msg, answer, shown)
        elif method == "Ping" and msg is not None:
            assert len(answer.payload) == msg.reply_bytes, f"Ping answered wrong size: {shown}"
        elif method in ("Execute", "Flush", "Compact", "Evict", "Load"):
            if method == "Evict":
                self.forget(msg)
            self.resync_lsn()

    def acknowledged(self, lsn: int, shown: str) -> None:
        assert lsn == MODEL.last_lsn + 1, (
            f"acknowledged at LSN {lsn}, expected {MODEL.last_lsn + 1}: a refused request "
            f"used an LSN, or this one skipped some ({shown})"
        )
        MODEL.last_lsn = lsn

    def resync_lsn(self) -> None:
        code, stats = self.call("Stats", b"", 30)
        assert code == grpc.StatusCode.OK
        assert stats.lsn >= MODEL.last_lsn
        MODEL.last_lsn = stats.lsn

    def forget(self, msg: pb.EvictRequest) -> None:
        view = msg.view.lower()
        if not msg.HasField("key"):
            self.filled = {f for f in self.filled if f[0] != view}
            return
        try:
            values = tuple(ref_value(v) for v in msg.key.values)
        except Malformed:
            return
        if len(values) == 1:
            self.filled.discard((view, canon(values[0])))

    # -- checks ----------------------------------------------------------------------

    def lookup(self, view: str, keys: list[int], min_lsn: int) -> dict[int, Counter]:
        req = pb.LookupRequest(view=view, min_lsn=min_lsn)
        column = req.key_batch.columns.add(kind=pb.Column.INT)
        column.ints.extend(keys)
        req.key_batch.num_rows = len(keys)
        t0 = time.monotonic()
        code, answer = self.call("Lookup", req.SerializeToString(), 120)
        self.seconds["check: lookup"] += time.monotonic() - t0
        assert code == grpc.StatusCode.OK, f"check lookup {view} {keys}: {code} {answer}"
        out = {}
        for k, (rows, _) in zip(keys, ref_answer(answer, len(keys)), strict=True):
            out[k] = Counter(canon_row(r) for r in rows)
            self.filled.add((view, canon(k)))
        assert len(out) == len(keys)
        return out

    def note(self, table: str, inserts: list, deletes: list, lsn: int, shown: str) -> None:
        for r in [*inserts, *deletes]:
            self.history.setdefault((table, canon(r[0])), []).append(f"LSN {lsn}: {shown[:600]}")

    def apply_and_check(self, table: str, inserts: list, deletes: list, lsn: int,
                        shown: str) -> None:
        MODEL.apply(table, inserts, deletes)
        self.note(table, inserts, deletes, lsn, shown)
        touched = {r[0] for r in [*inserts, *deletes] if type(r[0]) is int and r[0] in DOMAIN}
        if touched:
            self.unchecked.setdefault(table, set()).update(touched)
            self.unchecked_writes.append(f"LSN {lsn}: {shown}")
        if len(self.unchecked_writes) >= CHECK_WRITES:
            self.check_keys()
        if sum(self.sent.values()) - self.last_check >= CHECK_EVERY:
            self.check_all()

    def explain(self, table: str, keys: set) -> str:
        """For a failure: per differing key, the acknowledged writes that touched it and
        the changes storage holds for it (LSN, diff, segment file or memtable)."""
        from helpers import stored_changes

        out = []
        for key in sorted(keys, key=repr)[:5]:
            out.append(f"key {key}: acknowledged writes:")
            out += [f"    {h}" for h in self.history.get((table, key), [])[-8:]]
            out.append("  stored changes:")
            try:
                lsn, changes = stored_changes(self.storage, table)
            except Exception as err:  # noqa: BLE001 - a report, not a check
                out.append(f"    (could not read them: {err!r})")
                continue
            out.append(f"    (snapshot LSN {lsn})")
            out += [f"    LSN {at} diff {diff} {short([canon_row(row)])} in {where}"
                    for row, at, diff, where in changes if canon(row[0]) == key]
        return "\n".join(out)

    def check_keys(self) -> None:
        """The keys the last writes touched, read through the views at the last LSN."""
        for table, keys in self.unchecked.items():
            got = self.lookup(CHECK_VIEWS[table], sorted(keys), MODEL.last_lsn)
            for k, rows in got.items():
                want = MODEL.with_key(table, k)
                writes = "\n  ".join(self.unchecked_writes)
                assert rows == want, (
                    f"{table} key {k} at LSN {MODEL.last_lsn}:\n"
                    f"  stored {short(rows.elements())}\n"
                    f"  sent   {short(want.elements())}\n  by one of\n  {writes}"
                )
        self.unchecked.clear()
        self.unchecked_writes.clear()

    def check_lookup(self, msg: pb.LookupRequest, answer: pb.LookupResponse, shown: str) -> None:
        keys = ref_keys(msg)
        view = msg.view.lower()
        table = next((t for t, v in CHECK_VIEWS.items() if v == view), None)
        for values, (got, lsn) in zip(keys, ref_answer(answer, len(keys)), strict=True):
            if len(values) == 1 and values[0] is not None:
                self.filled.add((view, canon(values[0])))
            if table is None or lsn != MODEL.last_lsn or len(values) != 1:
                continue
            if type(values[0]) is not int:
                continue
            rows = Counter(canon_row(r) for r in got)
            want = MODEL.with_key(table, values[0])
            assert rows == want, (
                f"lookup answer differs: {short(rows.elements())} vs {short(want.elements())}: "
                f"{shown}"
            )

    def check_all(self) -> None:
        """Every modelled table, read by Spark, equals the model; no LSN went missing."""
        self.check_keys()
        self.last_check, t0 = sum(self.sent.values()), time.monotonic()
        self.checks += 1
        code, stats = self.call("Stats", b"", 30)
        assert code == grpc.StatusCode.OK
        assert stats.lsn == MODEL.last_lsn, f"stats lsn {stats.lsn}, model {MODEL.last_lsn}"
        for table, schema in SCHEMAS.items():
            names = ", ".join(c[0] for c in schema)
            result = self.client.query(f"SELECT {names} FROM {table}")
            got = Counter(canon_row(r) for r in result.rows)
            want = MODEL.tables[table]
            if got != want:  # say all that can tell where the difference comes from
                again = Counter(canon_row(r) for r in self.client.query(
                    f"SELECT {names} FROM {table}").rows)
                raise AssertionError(
                    f"{table} differs from what was acknowledged (read at LSN {result.lsn}, "
                    f"model at {MODEL.last_lsn}; a second read "
                    f"{'agrees with the model' if again == want else 'differs too'}):\n"
                    f"  only stored: {short((got - want).elements())}\n"
                    f"  only sent:   {short((want - got).elements())}\n"
                    + self.explain(table, {r[0] for r in (got - want) + (want - got)})
                )
        self.seconds["check: all tables"] += time.monotonic() - t0


@pytest.fixture(scope="module")
def fuzz_server(spark, tmp_path_factory):
    from helpers import InProcessServer

    root = tmp_path_factory.mktemp("fuzz")
    with InProcessServer(root / "data", spark) as srv:
        yield srv, root


def _write_files(root) -> None:
    data = root / "files"
    data.mkdir(exist_ok=True)
    cols = list(zip(*FILE_ROWS["parquet"], strict=True))
    table = pa.table(
        {"k": pa.array(cols[0], pa.int64()), "s": pa.array(cols[1], pa.string()),
         "d": pa.array(cols[2], pa.float64())}
    )
    pq.write_table(table, data / "rows.parquet")
    (data / "rows.csv").write_text(CSV_TEXT, encoding="utf-8")
    FILES.update(dir=str(data), parquet=str(data / "rows.parquet"), csv=str(data / "rows.csv"))


def test_protocol_fuzz(fuzz_server, record_property, request):
    srv, root = fuzz_server
    _write_files(root)
    with srv.client(timeout=120) as client:
        for table, schema in SCHEMAS.items():
            cols = ", ".join(f"{n} {t}{' PRIMARY KEY' if pk else ''}" for n, t, pk in schema)
            client.execute(f"CREATE TABLE {table} ({cols})")
            names = ", ".join(c[0] for c in schema)
            client.execute(
                f"CREATE VIEW {CHECK_VIEWS[table]} AS SELECT {names} FROM {table} "
                f"WHERE {schema[0][0]} = ?"
            )
        client.execute(f"CREATE TABLE {SCRATCH} (k BIGINT, s TEXT, d DOUBLE)")
        client.execute(
            "CREATE VIEW fz_bag_n AS SELECT k, COUNT(*) AS n FROM fz_bag WHERE k = ? GROUP BY k"
        )
        MODEL.last_lsn = client.stats()["lsn"]
        driver = Driver(srv.address, client)
        driver.storage = srv.engine.storage
        t0 = time.monotonic()
        for view in CHECK_VIEWS.values():  # fill the checked keys once
            driver.lookup(view, DOMAIN, MODEL.last_lsn)
        print(f"\nfuzz setup: domain keys filled in {time.monotonic() - t0:.1f} s")
        driver.seconds.clear()

        started = time.monotonic()
        deadline = started + FUZZ_SECONDS
        batch = 0

        def more() -> bool:
            return sum(driver.sent.values()) < FUZZ_MESSAGES and time.monotonic() < deadline

        while more():
            @seed(BASE_SEED + batch)
            @settings(max_examples=40, deadline=None, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(item=fuzz_items())
            def one(item):
                if more():
                    driver.run(*item)

            one()
            batch += 1
        driver.check_all()
        elapsed = time.monotonic() - started
        driver.channel.close()

    total = sum(driver.sent.values())
    report = {
        "messages": total,
        "seconds": round(elapsed, 1),
        "per_method": dict(sorted(driver.sent.items())),
        "codes": {f"{m} {c}": n for (m, c), n in sorted(driver.codes.items())},
        "skipped_for_cost": driver.skipped,
        "seconds_spent": {k: round(v, 2) for k, v in driver.seconds.most_common()},
        "full_checks": driver.checks,
        "rows_modelled": {t: sum(c.values()) for t, c in MODEL.tables.items()},
        "last_lsn": MODEL.last_lsn,
        "seed": BASE_SEED,
    }
    (root / "fuzz-report.json").write_text(json.dumps(report, indent=2))
    record_property("fuzz_messages", total)
    line = (
        f"protocol fuzz: {total} messages in {elapsed:.0f} s "
        f"({total / max(elapsed, 1e-9):.0f}/s; {sum(driver.codes[(m, 'OK')] for m in METHODS)}"
        f" answered OK, {MODEL.last_lsn} LSNs), report {root / 'fuzz-report.json'}"
    )
    request.node.user_properties.append((SUMMARY, ("protocol fuzz", line)))  # tests/conftest.py
    print(f"\n{line}")
    print(json.dumps(report, indent=2))
    assert total > 100
    assert driver.sent["Write"] > 0 and MODEL.last_lsn > 0
