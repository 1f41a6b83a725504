"""Reads: checking a lookup's keys, answering them at one LSN, presenting the rows.

A lookup of filled keys is answered from what the executor published (no lock, no
queueing behind writes). Keys that miss are handed to the executor (a ``Miss`` packet)
and the read waits for their fills; then every key that is filled is read again under the
lock, so a batch is answered at one LSN. The exception: a key kept blocked by a stream of
index fills (gating.py) keeps the answer delivered at the LSN it was last exact at, never
below the read's floor (``min_lsn``) — waiting for it to be exact at the newest LSN could
take forever under a stream. ``Read`` is that protocol as an object with explicit steps,
so the blocking facade (``Dataflow.lookup``) and the stepped tests drive the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Protocol, cast

from partialflow.operators.base import Row
from partialflow.server.dataflow.fill import Waiter
from partialflow.server.dataflow.graph import Reader
from partialflow.server.dataflow.packets import BringBack, Miss, Packet
from partialflow.server.dataflow.shelfreads import read_shelved
from partialflow.server.errors import InvalidArgument
from partialflow.server.sql.guards import check_rows
from partialflow.server.sql.planner import PlanNode, ViewPlan

if TYPE_CHECKING:
    from partialflow.server.dataflow.publish import Publisher
    from partialflow.server.dataflow.state import State

MAX_ATTEMPTS = 5  # rounds of misses one read asks for (keys evicted meanwhile are re-asked)

Answer = tuple[list[Row], int]  # rows of one key and the LSN they are exact at


# -- keys ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """A view parameter: the column it compares (its name) and that column's type."""

    name: str
    type: str  # BIGINT / DOUBLE / TEXT / BOOLEAN


# (table, column index) -> (column name, column type), or None for an unknown table.
ColumnInfo = Callable[[str, int], "tuple[str, str] | None"]


def parameters(plan: ViewPlan, column_info: ColumnInfo) -> list[Param | None]:
    """The parameters of a view, traced to the base columns they compare (None when a
    parameter is computed, or its sources disagree on the type: not checked)."""
    out: list[Param | None] = []
    for col in plan.key:
        sources = [column_info(t, c) for t, c in _sources(plan.root, col)]
        types = {s[1] for s in sources if s is not None}
        if sources and None not in sources and len(types) == 1:
            out.append(Param(sources[0][0], types.pop()))  # type: ignore[index]
        else:
            out.append(None)
    return out


def _sources(pn: PlanNode, col: int) -> list[tuple[str, int]]:
    """The base-table columns that column ``col`` of ``pn``'s output is copied from."""
    if pn.op is None:
        assert pn.table is not None
        return [(pn.table, col)]
    found: list[tuple[str, int]] = []
    for p, pc in pn.op.resolve(col):
        found += _sources(pn.parents[p], pc)
    return found


def check_key(reader: Reader, key: Any, params: list[Param | None] | None = None) -> Row:
    """A key as a tuple of the view's arity; with ``params``, each value must fit its
    parameter's type (the rules storage applies to writes). NULL is allowed: it answers
    empty, as ``col = NULL`` is never true."""
    key = tuple(key) if isinstance(key, (tuple, list)) else (key,)
    n = len(reader.plan.key)
    if len(key) != n:
        raise InvalidArgument(
            f"view {reader.name!r} takes {n} parameter(s), got a key of {len(key)}: {key!r}"
        )
    # No params (a view without typed parameters): nothing to check, so truncation is meant.
    for i, (value, param) in enumerate(zip(key, params or (), strict=False)):
        if value is not None and param is not None and not _fits(param.type, value):
            raise InvalidArgument(
                f"view {reader.name!r} parameter {i + 1} ({param.name}) is {param.type}, "
                f"got {value!r} ({type(value).__name__})")
    return key


def keys_fit(reader: Reader, keys: list[Any], params: list[Param | None] | None) -> bool:
    """Whether every key is a tuple of the view's arity whose values are NULL or exactly of
    their parameter's plain type: ``check_key``'s common case, checked a column at a time
    (C loops) for a lookup of many keys. False means: check key by key, which names the
    bad key if there is one."""
    n = len(reader.plan.key)
    if set(map(type, keys)) != {tuple} or set(map(len, keys)) != {n}:
        return False
    for i, param in enumerate(params or ()):
        if param is None:
            continue
        column = [k[i] for k in keys]
        types = set(map(type, column)) - {type(None)}
        if not types:
            continue
        if len(types) > 1:
            return False
        t = types.pop()
        if (param.type, t) in _PLAIN:
            continue
        if t is not int or param.type != "BIGINT" or None in column:
            return False
        if min(column) not in _INT64 or max(column) not in _INT64:
            return False
    return True


_INT64 = range(-(2**63), 2**63)
# Values whose type alone proves they fit (the common case, checked per key on every read).
_PLAIN = {("TEXT", str), ("DOUBLE", float), ("BOOLEAN", bool)}


def _fits(ctype: str, value: Any) -> bool:
    t = type(value)
    if (ctype, t) in _PLAIN or (t is int and ctype == "BIGINT" and value in _INT64):
        # Storage's validator would accept these too; it costs microseconds per value.
        # (TEXT's UTF-8 check only matters for stored text: a key with a lone surrogate
        # simply matches nothing.)
        return True
    # Anything else goes to storage's own validator, so a key is refused exactly when the
    # same value would be refused in a write. Imported here, not at the top: storage's
    # schema module pulls in pyarrow, and the dataflow core must import without it.
    from partialflow.server.storage.schema import _BadValue, coerce_column

    try:
        coerce_column(ctype, [value])
    except _BadValue:
        return False
    return True


# -- answering -----------------------------------------------------------------------------
class FilledRows(Protocol):
    """What a read needs from the executor: filled keys' rows at one LSN (between
    packets), and a way to ask for misses."""

    def read_filled(self, st: State, keys: Iterable[Row], *, count_as: str | None
                    ) -> tuple[int, dict[Row, list[Row]], set[Row]]: ...
    def submit(self, packet: Packet) -> None: ...


class Read:
    """One lookup of ``keys`` (checked, distinct order kept) in ``reader``'s view.

    ``start()`` answers what it can; while ``waiter`` is set the read waits for it, and
    ``resume()`` (once ``waiter.event`` is set) takes the filled keys and re-reads every
    key at one LSN, asking again for keys evicted meanwhile. ``done`` then ``answer()``."""

    def __init__(self, executor: FilledRows, publisher: Publisher, reader: Reader,
                 keys: list[Row], floor: int = 0) -> None:
        self.ex = executor
        self.publisher = publisher  # what the executor published: read without a lock
        self.reader = reader
        self.keys = keys
        self.floor = floor
        self.results: dict[Row, Answer] = {}
        # Set by start() when every key was a published hit: (rows per key in the order
        # asked, the LSN); the answer is then built from it whole (no per-key entries).
        self.hit_rows: tuple[list[tuple[Row, ...]], int] | None = None
        self.waiter: Waiter | None = None
        self.attempts = 0

    @property
    def done(self) -> bool:
        return self.waiter is None

    def start(self) -> Read:
        pub, st = self.publisher, self.reader.state
        misses: list[Row] = []
        shelf_floor = pub.tier_floor  # before the LSN (shelfreads.py)
        fast = pub.read(st, self.keys)
        if fast is not None:
            got, lsn = fast
            keys = self.keys
            if None not in got and None not in chain.from_iterable(keys):
                # Every key filled and none has a NULL: the common case of a hot
                # lookup_many, answered without Python code per key (C-level passes).
                distinct = dict.fromkeys(keys)
                pub.log_reads(st, keys if len(distinct) == len(keys) else
                                       list(distinct), True)
                self.hit_rows = (cast("list[tuple[Row, ...]]", got), lsn)  # no None in got
                return self
            results = self.results
            hits: list[Row] = []
            for k, rows in dict(zip(keys, got, strict=True)).items():  # a key asked twice once
                if None in k:  # `col = NULL` is never true in SQL
                    results[k] = ([], lsn)
                elif rows is not None:
                    results[k] = (list(rows), lsn)
                    hits.append(k)
                else:
                    misses.append(k)
            pub.log_reads(st, hits, True)
            pub.log_reads(st, misses, False)
            if misses and shelf_floor:
                misses = self._read_shelved(misses, shelf_floor, lsn)
        else:
            distinct = dict.fromkeys(self.keys)
            lsn, found, _ = self.ex.read_filled(
                st, [k for k in distinct if None not in k], count_as=self.reader.name)
            for k in distinct:
                filled = found.get(k)
                if filled is not None:
                    self.results[k] = (filled, lsn)
                elif None in k:
                    self.results[k] = ([], lsn)
                else:
                    misses.append(k)
        self._ask(misses)
        return self

    def _read_shelved(self, misses: list[Row], shelf_floor: int, lsn: int) -> list[Row]:
        """Answer misses shelved in the disk tier from it, on this thread, at ``lsn``
        (shelfreads.py); returns the keys still missing. The executor is woken to bring
        the keys read into memory (not waited for)."""
        st, pub = self.reader.state, self.publisher
        got = read_shelved(st, misses, shelf_floor)
        if not got:
            return misses
        for k, rows in got.items():
            self.results[k] = (rows, lsn)
        if pub.log_shelf_reads(st, list(got)):
            self.ex.submit(BringBack())
        return [k for k in misses if k not in got]

    def _ask(self, misses: list[Row]) -> None:
        if not misses or self.attempts >= MAX_ATTEMPTS:
            self.waiter = None
            return
        self.attempts += 1
        self.waiter = Waiter(set(misses), self.floor)
        self.ex.submit(Miss(self.reader.state, misses, self.waiter))

    def resume(self) -> None:
        """The waiter is done: take its rows (or raise its error), then answer every key
        at the LSN the fills completed at."""
        waiter = self.waiter
        assert waiter is not None and waiter.event.is_set()
        if waiter.error is not None:
            self.waiter = None
            raise waiter.error
        self.results.update(waiter.results)
        lsns = {lsn for _, lsn in self.results.values()}
        if lsns == {self.publisher.lsn} and self.publisher.lsn >= self.floor:
            # Every key is already answered at one LSN, the newest published (no write
            # was applied since the published hits and the answers to the misses, as when
            # misses are answered from the disk tier in one packet): reading them all
            # again under the executor's lock, queued behind its packets, would give the
            # same rows at the same LSN.
            self.waiter = None
            return
        misses = []
        lsn, found, blocked = self.ex.read_filled(self.reader.state, self.results, count_as=None)
        for k in self.results:
            filled = found.get(k)
            if filled is not None:
                self.results[k] = (filled, lsn)
            elif None in k:
                self.results[k] = ([], lsn)
            elif k in blocked and self.results[k][1] >= self.floor:
                pass  # gated again: its answer stays exact at the LSN it was given
            else:
                misses.append(k)  # evicted meanwhile: ask again
        self._ask(misses)

    def answer(self) -> list[Answer]:
        """Per key (in the order asked), the rows as the caller sees them and their LSN."""
        plan, results = self.reader.plan, self.results
        as_stored = _as_stored(plan, len(self.reader.node.columns))
        if plan.guards:  # a scalar subquery with several rows fails the read (guards.py)
            per_key: Sequence[Sequence[Row]] = (
                self.hit_rows[0] if self.hit_rows is not None
                else [results[k][0] for k in self.keys])
            for k, stored in zip(self.keys, per_key, strict=True):
                check_rows(plan.guards, self.reader.name, k, stored)
        if self.hit_rows is not None:
            got, lsn = self.hit_rows
            rows = map(list, got) if as_stored else (present(plan, list(r)) for r in got)
            return list(zip(rows, repeat(lsn)))
        if as_stored:
            return [results[k] for k in self.keys]
        return [(present(plan, results[k][0]), results[k][1]) for k in self.keys]


def _as_stored(plan: ViewPlan, width: int) -> bool:
    """Whether ``present`` leaves every answer of the view as stored (no order, limit,
    empty-group row or hidden column): then a read skips it, key by key."""
    return (
        not plan.order
        and plan.limit is None
        and plan.empty_row is None
        and plan.visible == tuple(range(width))
    )


def present(plan: ViewPlan, rows: list[Row]) -> list[Row]:
    """Rows as the caller sees them: sorted, limited, hidden columns removed."""
    if not rows and plan.empty_row is not None:
        return [plan.empty_row]
    rows = list(rows)
    if plan.order:
        # Ties are broken by all columns ascending, as top-k does, so answers are stable.
        rows.sort(key=lambda r: tuple([(v is not None, v) for v in r]))
    for pos, desc in reversed(plan.order):
        # SQL's default NULL order: first when ascending, last when descending.
        rows.sort(key=lambda r: (r[pos] is not None, r[pos]), reverse=desc)
    if plan.limit is not None:
        rows = rows[: plan.limit]
    return visible(plan, rows)


def visible(plan: ViewPlan, rows: list[Row]) -> list[Row]:
    """Rows without the view's hidden columns (``present``'s last step)."""
    vis = plan.visible
    if len(vis) == len(rows[0]) if rows else True:
        return rows
    return [tuple([r[i] for i in vis]) for r in rows]
