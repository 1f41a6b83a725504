"""The dataflow facade the engine talks to: views, lookups, eviction, explain, stats.

It plans views (planner), installs them in the graph and loads their full state (through
the executor, in order with writes), and serves reads: filled keys straight from the
reader under the executor's lock, misses by handing the keys to the executor and waiting
for the fill.
"""

from __future__ import annotations

import logging
import re
import statistics
import threading
import time
from typing import Any

from partialflow.operators.base import Row
from partialflow.server.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from partialflow.server.executor import Executor
from partialflow.server.graph import Graph, Reader, _states_of
from partialflow.server.planner import Planner, ViewPlan
from partialflow.server.upquery import UpqueryRunner, Waiter

log = logging.getLogger("partialflow.dataflow")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class Dataflow:
    def __init__(self, storage: Any, spark: Any, *, memory_limit: int | None = None, upquery_timeout: float = 60.0) -> None:
        self.storage = storage
        self.graph = Graph()
        self.runner = UpqueryRunner(spark, storage)
        self.executor = Executor(self.graph, self.runner, memory_limit=memory_limit, upquery_timeout=upquery_timeout, start_lsn=storage.last_lsn)
        self.memory_limit = memory_limit
        self.upquery_timeout = upquery_timeout
        self.deps: dict[str, set[str]] = {}  # view -> views it is defined over
        self._ddl = threading.Lock()
        # fn(view, key, rows, lsn) for every key a lookup served (rows as returned). For
        # the background verifier; called on the reading thread, so keep it cheap.
        self.read_observers: list[Any] = []
        storage.subscribe(lambda rec: self.executor.submit("write", rec))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the executor and re-create the persisted views (their state starts empty)."""
        self.executor.start()
        # Warm the JVM's query path in the background: on a fresh JVM the first upquery
        # pays seconds of class loading and JIT that a reader should not wait for.
        threading.Thread(target=self._warm_up, name="spark-warm-up", daemon=True).start()
        for name, sql in self.storage.views():
            try:
                self._create(name, sql, persist=False)
            except Exception as e:
                log.error("could not re-create view %s: %s", name, e)

    def _warm_up(self) -> None:
        try:
            spark = self.runner.spark
            df = spark.range(2000).selectExpr("id % 7 AS k", "id AS v")
            df.filter("k IN (1, 2)").groupBy("k").agg({"v": "max"}).collect()
        except Exception:  # only an optimisation
            log.debug("Spark warm-up failed", exc_info=True)

    def close(self) -> None:
        self.executor.stop()
        self.runner.close()

    # -- views -------------------------------------------------------------------------
    def create_view(self, name: str, sql: str) -> None:
        if not _IDENT.match(name or ""):
            raise InvalidArgument(f"view name {name!r} is not a plain identifier (letters, digits, _; at most 64)")
        with self._ddl:
            self._create(name.lower(), sql, persist=True)

    def _create(self, name: str, sql: str, persist: bool) -> None:
        if name in self.graph.readers:
            raise AlreadyExists(f"view {name!r} already exists")
        if self._table_columns(name) is not None:
            raise AlreadyExists(f"{name!r} is already a table")
        used: set[str] = set()
        plan = Planner(self._table_columns, lambda v: self._view_plan(v, used)).plan(sql)
        reader, waiter = self.executor.call(lambda: self._install(name, sql, plan)).result()
        if waiter is not None:
            if not waiter.event.wait(self.upquery_timeout * 10):
                waiter.error = DeadlineExceeded(f"loading the full state of view {name!r} timed out")
            if waiter.error is not None:
                self._remove(name)
                raise waiter.error
        ex = self.executor
        if self.memory_limit is not None and ex.full_bytes > self.memory_limit:
            need = ex.full_bytes
            self._remove(name)
            raise ResourceExhausted(f"view {name!r} needs {need} bytes of full state, more than the memory limit of {self.memory_limit} bytes")
        self.deps[name] = used
        if persist:
            self.storage.save_view(name, sql)

    def explain_create(self, name: str, sql: str) -> str:
        """A dry run of CREATE VIEW: is it supported, and how would it be maintained?

        Plans the view and decides its materialization in a scratch graph (so nothing is
        created and nothing is shared with existing views), and returns the operator
        tree with each state partial or full, its key, and why."""
        if not _IDENT.match(name or ""):
            raise InvalidArgument(f"view name {name!r} is not a plain identifier (letters, digits, _; at most 64)")
        used: set[str] = set()
        plan = Planner(self._table_columns, lambda v: self._view_plan(v, used)).plan(sql)
        scratch = Graph()
        scratch.add_view(name.lower(), sql, plan)
        return scratch.explain(name.lower(), live=False)

    def _install(self, name: str, sql: str, plan: ViewPlan) -> tuple[Reader, Waiter | None]:
        reader, new_full = self.graph.add_view(name, sql, plan)
        self.executor.register_states([st for n in reader.nodes for st in _states_of(n)])
        waiter = self.executor.load_full(new_full) if new_full else None
        return reader, waiter

    def _remove(self, name: str) -> None:
        def go() -> None:
            self.executor.forget_states(self.graph.remove_view(name))

        self.executor.call(go).result()
        self.deps.pop(name, None)

    def drop_view(self, name: str) -> None:
        name = name.lower()
        with self._ddl:
            if name not in self.graph.readers:
                raise NotFound(f"unknown view {name!r}")
            users = sorted(v for v, d in self.deps.items() if name in d)
            if users:
                raise FailedPrecondition(f"view {name!r} is used by view(s) {', '.join(users)}; drop those first")
            self._remove(name)
            self.storage.drop_view(name)

    def check_drop_table(self, table: str) -> None:
        users = self.graph.users_of_table(table.lower())
        if users:
            raise FailedPrecondition(f"table {table!r} is used by view(s) {', '.join(users)}; drop those first")

    def _table_columns(self, name: str) -> tuple[str, ...] | None:
        try:
            return self.storage.table(name).column_names
        except NotFound:
            return None

    def _view_plan(self, name: str, used: set[str]) -> ViewPlan | None:
        reader = self.graph.readers.get(name)
        if reader is None:
            return None
        used.add(name)
        return reader.plan

    def _reader(self, view: str) -> Reader:
        reader = self.graph.readers.get(view.lower())
        if reader is None:
            known = ", ".join(sorted(self.graph.readers)) or "none"
            raise NotFound(f"unknown view {view!r}; views are: {known}")
        return reader

    # -- reads -------------------------------------------------------------------------
    def lookup(self, view: str, keys: list[tuple], *, min_lsn: int | None, timeout: float) -> tuple[list[str], list[tuple[list[tuple], int]]]:
        deadline = time.monotonic() + timeout
        reader = self._reader(view)
        plan = reader.plan
        keys = [self._check_key(reader, k) for k in keys]
        ex = self.executor
        if min_lsn:
            ex.wait_for(min_lsn, deadline)
        results: dict[Row, tuple[list[Row], int]] = {}
        misses: list[Row] = []
        st = reader.state
        fast = self._published(st, keys)
        if fast is not None:
            got, lsn = fast
            for k, rows in got.items():
                if any(v is None for v in k):  # `col = NULL` is never true in SQL
                    results[k] = ([], lsn)
                elif rows is not None:
                    results[k] = (list(rows), lsn)
                    ex.read_log.append((st, k, True))
                else:
                    misses.append(k)
                    ex.read_log.append((st, k, False))
        else:
            with ex.lock:
                ex.drain_read_log()
                lsn = ex.applied_lsn
                counters = ex.view_counters[reader.name]
                for k in dict.fromkeys(keys):
                    if any(v is None for v in k):
                        results[k] = ([], lsn)
                    elif k in st.buckets:
                        results[k] = (st.bucket_rows(k), lsn)
                        ex.touch(st, k)
                        counters["hits"] += 1
                    else:
                        misses.append(k)
                counters["misses"] += len(misses)
        for _ in range(5):
            if not misses:
                break
            waiter = Waiter(set(misses))
            ex.submit("miss", st, misses, waiter)
            if not waiter.event.wait(max(0.0, deadline - time.monotonic())):
                raise DeadlineExceeded(f"lookup in view {reader.name!r} timed out waiting for an upquery")
            if waiter.error is not None:
                raise waiter.error
            results.update(waiter.results)
            # Answer every key of one lookup at one LSN: re-read the keys that hit
            # earlier at the LSN the fills completed at, so a batch never mixes an old
            # answer with a newer one. Keys evicted meanwhile are fetched again.
            with ex.lock:
                lsn = ex.applied_lsn
                misses = []
                for k in results:
                    if k in st.buckets:
                        results[k] = (st.bucket_rows(k), lsn)
                    elif any(v is None for v in k):
                        results[k] = ([], lsn)
                    else:
                        misses.append(k)
        out = [(present(plan, results[k][0]), results[k][1]) for k in keys]
        for fn in self.read_observers:
            for k, (rows, lsn) in zip(keys, out):
                fn(reader.name, k, rows, lsn)
        return plan.columns, out

    def corrupt_for_test(self, view: str, key: Any) -> bool:
        """Test-only: plant a wrong answer (an extra copy of a row, or a made-up row) in one
        filled key of a view's reader, so tests can show the checkers catch it. Refused
        unless the server runs with PARTIALFLOW_TEST_HOOKS=1."""
        import os

        if os.environ.get("PARTIALFLOW_TEST_HOOKS") != "1":
            raise FailedPrecondition("test hooks are disabled (set PARTIALFLOW_TEST_HOOKS=1)")
        reader = self._reader(view)
        k = self._check_key(reader, key)
        st = reader.state

        def go() -> bool:
            bucket = st.buckets.get(k)
            if bucket is None:
                return False
            rows = st.bucket_rows(k)
            row = rows[0] if rows else tuple(k) + (None,) * (len(reader.node.columns) - len(k))
            st.apply_row(bucket, k, row, 1)
            self.executor._touched.add((st, k))
            return True

        return self.executor.call(go).result()

    def _published(self, st: Any, keys: list[Row]) -> tuple[dict[Row, Any], int] | None:
        """Read published rows without the executor's lock (a seqlock read): the rows of
        every key and the one LSN they are exact at, or None if writes kept moving."""
        ex = self.executor
        for _ in range(8):
            v1 = ex.pub_version
            if v1 & 1:
                time.sleep(0)
                continue
            lsn = ex.published_lsn
            got = {k: st.published.get(k) for k in dict.fromkeys(keys)}
            if ex.pub_version == v1:
                return got, lsn
        return None

    def _check_key(self, reader: Reader, key: Any) -> Row:
        key = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        n = len(reader.plan.key)
        if len(key) != n:
            raise InvalidArgument(f"view {reader.name!r} takes {n} parameter(s), got a key of {len(key)}: {key!r}")
        return key

    def evict(self, view: str, key: tuple | None) -> int:
        reader = self._reader(view)
        st = reader.state

        def go() -> int:
            keys = list(st.buckets) if key is None else [self._check_key(reader, key)]
            n = sum(self.executor.evict_key(st, k) for k in keys)
            self.executor._after_packet()
            return n

        return self.executor.call(go).result()

    def explain(self, view: str) -> tuple[str, str]:
        reader = self._reader(view)
        with self.executor.lock:
            return self.graph.explain(reader.name), self.graph.dot(reader.name)

    def stats(self) -> dict:
        ex = self.executor
        with ex.lock:
            ex.drain_read_log()
            views = {}
            for name, reader in self.graph.readers.items():
                c = ex.view_counters[name]
                states = {st.sid: st for n in set(reader.nodes) for st in _states_of(n)}
                views[name] = {
                    "keys_filled": len(reader.state.buckets),
                    "hits": c["hits"],
                    "misses": c["misses"],
                    "upqueries": c["upqueries"],
                    "evictions": c["evictions"],
                    "memory_bytes": sum(st.memory_bytes for st in states.values()),
                }
            lat = sorted(ex.upquery_ms[-10_000:])
            return {
                "lsn": ex.applied_lsn,
                "memory_limit": self.memory_limit or 0,
                "memory_bytes": ex.partial_bytes + ex.full_bytes,
                "partial_bytes": ex.partial_bytes,
                "full_bytes": ex.full_bytes,
                "views": views,
                "upquery_ms": _percentiles(lat),
                "spark_jobs": self.runner.jobs,
                "state_anomalies": sum(st.anomalies for st in ex.states.values()),
                **{k: v for k, v in ex.counters.items()},
            }


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
    vis = plan.visible
    if len(vis) == len(rows[0]) if rows else True:
        return rows
    return [tuple([r[i] for i in vis]) for r in rows]


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    qs = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50": round(qs[49], 2), "p90": round(qs[89], 2), "p99": round(qs[98], 2), "count": len(values)}
