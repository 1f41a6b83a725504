"""The dataflow facade the engine talks to: views, lookups, eviction, explain, stats.

View DDL is the view catalog's (``views.py``); the facade serves reads (``reads.py``) and
subscriptions, evicts, explains and counts. Upqueries go to the injected runner
(``runner.py``): the engine passes the Spark one, tests a Python model.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from partialflow.operators.base import Row
from partialflow.server.checkpoint import CheckpointStore
from partialflow.server.dataflow.checkpointer import Checkpointer
from partialflow.server.dataflow.executor import Executor
from partialflow.server.dataflow.graph import Graph, Reader
from partialflow.server.dataflow.packets import Write
from partialflow.server.dataflow.reads import Param, Read, check_key, keys_fit
from partialflow.server.dataflow.recovery import recover
from partialflow.server.dataflow.resume import rows_as_of
from partialflow.server.dataflow.runner import UpqueryRunner
from partialflow.server.dataflow.state import State
from partialflow.server.dataflow.stats import DataflowStats, ViewStats
from partialflow.server.dataflow.subscriptions import (
    DEFAULT_MAX_BUFFERED,
    Subscription,
    SubscriptionManager,
)
from partialflow.server.dataflow.tier import Tier
from partialflow.server.dataflow.views import ViewCatalog
from partialflow.server.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)

log = logging.getLogger("partialflow.dataflow")
FINAL_CHECKPOINT_TIMEOUT = 30.0  # seconds a clean shutdown waits for its last checkpoint

# fn(view, key, rows, lsn) for every key a lookup served.
ReadObserver = Callable[[str, Row, list[Row], int], None]


class Dataflow:
    """``storage``: the base tables (subscribe, snapshot LSNs, catalog of tables and
    persisted views); ``runner``: answers upqueries."""

    def __init__(
        self,
        storage: Any,
        runner: UpqueryRunner,
        *,
        memory_limit: int | None = None,
        upquery_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        checkpoints: CheckpointStore | None = None,
        checkpoint_interval: float = 0.0,
        index_prefetch: bool = True,
        tier: Tier | None = None,
    ) -> None:
        self.storage = storage
        self.tier = tier
        self.graph = Graph()
        self.runner = runner
        self.executor = Executor(
            self.graph,
            runner,
            memory_limit=memory_limit,
            upquery_timeout=upquery_timeout,
            start_lsn=storage.last_lsn,
            clock=clock,
            index_prefetch=index_prefetch,
            checkpointer=None if checkpoints is None else lambda host: Checkpointer(
                host, checkpoints, interval=checkpoint_interval,
                table_ids=storage.table_ids, clock=clock, tier=tier),
            subscriptions=SubscriptionManager,
            tier=tier,
        )
        assert self.executor.subscriptions is not None
        self.subscriptions = self.executor.subscriptions
        self.memory_limit = memory_limit
        self.upquery_timeout = upquery_timeout
        self.views = ViewCatalog(storage, self.graph, self.executor,
                                 upquery_timeout=upquery_timeout,
                                 memory_limit=lambda: self.memory_limit)
        # Called for every key a lookup served (rows as returned), on the reading thread.
        # For the background verifier; keep them cheap.
        self.read_observers: list[ReadObserver] = []
        executor = self.executor
        storage.subscribe(lambda rec: executor.submit(Write(rec)))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, threaded: bool = True) -> None:
        """Start the executor (``threaded=False``: stepped, for tests) and the runner, and
        re-create the persisted views: from the newest checkpoint where there is one
        (``recovery.py``), else with empty state."""
        self.executor.start(threaded)
        self.runner.start()
        views = self.storage.views()
        cp = self.executor.checkpointer
        if cp is not None:
            views = recover(self.executor, self.storage, self.adopt_view, views,
                            self.upquery_timeout * 10)
        elif self.tier is not None:  # no checkpoint refers to what it holds
            self.executor.call(self.tier.clear).result()
        for name, sql in views:
            try:
                self.views.recreate_view(name, sql)
            except Exception as e:
                log.error("could not re-create view %s: %s", name, e)
        if cp is not None:
            cp.enabled = True

    def checkpoint(self, timeout: float) -> dict:
        """Take a checkpoint now; returns its figures (FailedPrecondition when off)."""
        cp = self.executor.checkpointer
        if cp is None:
            raise FailedPrecondition("checkpoints are off (--checkpoint-interval 0)")
        try:
            m = cp.request().result(timeout)
        except TimeoutError:
            raise DeadlineExceeded(f"the checkpoint did not finish within {timeout:g} s") from None
        except Exception as e:  # the writer's error (a full disk, say), or the dataflow closed
            raise Unavailable(f"checkpoint failed: {e or type(e).__name__}") from None
        return {"seq": m.seq, "lsn": m.lsn, "kind": m.kind, "bytes": m.bytes_written,
                "duration_s": round(m.duration_s, 3), "chain_files": len(m.files)}

    def adopt_view(self, name: str, sql: str,
                   contents_for: Callable[[State], dict[Row, Any] | None]
                   ) -> list[tuple[State, list[Row]]] | None:
        """Recovery: install a persisted view with its states from a checkpoint
        (``ViewCatalog.adopt_view``)."""
        return self.views.adopt_view(name, sql, contents_for)

    def close(self) -> None:
        if self.executor.threaded:  # open streams end with UNAVAILABLE and their resume LSN
            try:
                self.executor.call(self.subscriptions.close).result(10)
            except Exception as e:  # a stuck executor must not keep the server from closing
                log.warning("subscriptions not closed: %s", e or type(e).__name__)
        cp = self.executor.checkpointer
        if cp is not None:
            if cp.enabled and self.executor.threaded:
                # A last checkpoint at shutdown (only what changed since the previous one):
                # the restart then replays nothing and starts as warm as it stopped.
                try:
                    cp.request().result(FINAL_CHECKPOINT_TIMEOUT)
                except Exception as e:
                    log.warning("no checkpoint at shutdown: %s", e or type(e).__name__)
            self.executor.call(cp.abort).result()
        self.executor.stop()
        self.runner.close()
        if cp is not None:
            cp.store.close()
        # Free the states now, by reference counting, on the closing thread. Left to the
        # cycle collector (states, nodes and the executor refer to each other), a large
        # state is freed by whichever full collection comes next, a stop-the-world pause
        # of seconds in whatever still runs in this process (bench/write_stall.py measures
        # that write stall).
        with self.executor.lock:
            for st in list(self.executor.evictor.states.values()):
                st.release()
            self.executor.publisher.clear()
            if self.tier is not None:
                self.tier.close()  # keeps what the last checkpoint committed

    # -- views (the catalog's DDL) -----------------------------------------------------
    def create_view(self, name: str, sql: str) -> None:
        self.views.create_view(name, sql)

    def drop_view(self, name: str) -> None:
        self.views.drop_view(name)

    def explain_create(self, name: str, sql: str) -> str:
        """A dry run of CREATE VIEW (``ViewCatalog.explain_create``)."""
        return self.views.explain_create(name, sql)

    def check_drop_table(self, table: str) -> None:
        """FailedPrecondition when views still read ``table``."""
        self.views.check_drop_table(table)

    def params(self, view: str) -> list[Param | None]:
        """Per ``?`` parameter of ``view``, the base column it compares (None: computed)."""
        reader = self.reader(view)
        return self.views.param_types(reader.name) or [None] * len(reader.plan.key)

    def reader(self, view: str) -> Reader:
        """The reader of ``view`` (any case): its plan, its state, its nodes. NotFound
        naming the views there are when there is none."""
        reader = self.graph.readers.get(view.lower())
        if reader is None:
            known = ", ".join(sorted(self.graph.readers)) or "none"
            raise NotFound(f"unknown view {view!r}; views are: {known}")
        return reader

    # -- reads -------------------------------------------------------------------------
    def begin_read(self, view: str, keys: list[Any]) -> Read:
        """Check the keys and start a read of them (it may wait for fills: see ``Read``).
        Everything is checked before anything is queued."""
        reader, checked = self._checked(view, keys)
        return Read(self.executor, self.executor.publisher, reader, checked)

    def _checked(self, view: str, keys: list[Any]) -> tuple[Reader, list[Row]]:
        """The view's reader and its keys, each checked against the view's parameters.
        Among several keys, an error names the bad one by its position."""
        reader = self.reader(view)
        params = self.views.param_types(reader.name)
        if len(keys) == 1:
            return reader, [check_key(reader, keys[0], params)]
        if keys_fit(reader, keys, params):
            return reader, keys
        checked = []
        for i, k in enumerate(keys):
            try:
                checked.append(check_key(reader, k, params))
            except InvalidArgument as err:
                raise InvalidArgument(f"key {i} of {len(keys)}: {err}") from None
        return reader, checked

    def lookup(self, view: str, keys: list[tuple], *, min_lsn: int | None,
               timeout: float) -> tuple[list[str], list[tuple[list[tuple], int]]]:
        """The view's columns and, per key, its rows and the LSN they are exact at."""
        deadline = time.monotonic() + timeout
        reader, checked = self._checked(view, keys)
        ex = self.executor
        if min_lsn:
            ex.wait_for(min_lsn, deadline)
        read = Read(ex, ex.publisher, reader, checked, floor=min_lsn or 0).start()
        while read.waiter is not None:
            if not ex.wait_event(read.waiter.event, max(0.0, deadline - time.monotonic())):
                raise DeadlineExceeded(
                    f"lookup in view {reader.name!r} timed out waiting for an upquery"
                )
            read.resume()
        out = read.answer()
        for fn in self.read_observers:
            for k, (rows, lsn) in zip(checked, out, strict=True):
                fn(reader.name, k, rows, lsn)
        return reader.plan.columns, out

    # -- subscriptions -----------------------------------------------------------------
    def subscribe(self, view: str, keys: list[Any], *, from_lsn: int | None = None,
                  max_buffered: int | None = None) -> Subscription:
        """Start a subscription to ``keys`` of ``view`` (subscriptions.py). Keys are
        checked first; with ``from_lsn``, the keys' rows as of it are read by Spark
        (refused beyond the retention horizon) before anything is registered."""
        reader, checked = self._checked(view, keys)
        if not checked:
            raise InvalidArgument("a subscription needs at least one key")
        for i, k in enumerate(checked):
            if any(v is None for v in k):
                raise InvalidArgument(
                    f"key {i}: {k!r} has a NULL (`col = NULL` is never true: nothing to watch)")
        start = None
        if from_lsn is not None:
            start = rows_as_of(
                lambda sql, lsn: self.storage.query(sql, as_of=lsn)[1], reader,
                list(dict.fromkeys(checked)), from_lsn,
                lambda v: (r.sql if (r := self.graph.readers.get(v)) is not None else None))
        sub = Subscription(self.subscriptions, reader, checked, start,
                           max_buffered or DEFAULT_MAX_BUFFERED)
        limit = self.memory_limit
        self.executor.call(lambda: self.subscriptions.add(sub, limit)).result()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """The stream ended: unpin its keys (queued; nothing waits for it)."""
        sub.close()
        self.executor.call(lambda: self.subscriptions.remove(sub))

    def corrupt_for_test(self, view: str, key: Any) -> bool:
        """Test-only: plant a wrong answer (an extra copy of a row, or a made-up row) in one
        filled key of a view's reader, so tests can show the checkers catch it. Refused
        unless the server runs with PARTIALFLOW_TEST_HOOKS=1."""
        if os.environ.get("PARTIALFLOW_TEST_HOOKS") != "1":
            raise FailedPrecondition("test hooks are disabled (set PARTIALFLOW_TEST_HOOKS=1)")
        reader = self.reader(view)
        k = check_key(reader, key)
        st = reader.state

        def go() -> bool:
            bucket = st.bucket(k)
            if bucket is None:
                return False
            rows = st.bucket_rows(k)
            row = rows[0] if rows else tuple(k) + (None,) * (len(reader.node.columns) - len(k))
            st.apply_row(bucket, k, row, 1)
            self.executor.changed(st, k)
            return True

        return self.executor.call(go).result()

    # -- eviction and memory -----------------------------------------------------------
    def evict(self, view: str, key: tuple | None) -> int:
        reader = self.reader(view)
        st = reader.state
        ex = self.executor

        def go() -> int:
            keys = st.filled_keys() if key is None else [check_key(reader, key)]
            return sum(ex.evictor.evict_key(st, k) for k in keys)

        return ex.call(go).result()

    def set_memory_limit(self, limit: int | None) -> None:
        """Change the memory limit (evicting at once if over it)."""
        self.memory_limit = limit
        ex = self.executor
        ex.call(lambda: ex.evictor.set_memory_limit(limit)).result()

    def set_disk_limit(self, limit: int) -> int:
        """Change the disk tier's limit (the least recently shelved keys become holes at
        once if it is over); returns the one before. FailedPrecondition without a tier."""
        tier = self.tier
        if tier is None:
            raise FailedPrecondition("the server runs without a disk tier (serve --disk-limit)")
        if limit <= 0:
            raise InvalidArgument(f"invalid disk limit {limit}: must be positive")
        ex = self.executor

        def go() -> int:
            previous, tier.limit = tier.limit, limit
            ex.evictor.enforce_memory()
            return previous

        return ex.call(go).result()

    # -- introspection -----------------------------------------------------------------
    def explain(self, view: str) -> tuple[str, str]:
        reader = self.reader(view)
        with self.executor.lock:
            return self.graph.explain(reader.name), self.graph.dot(reader.name)

    def clustering(self) -> dict[str, list[str]]:
        """Per base table, the columns the live views' misses filter on (Graph.clustering)."""
        with self.executor.lock:
            return self.graph.clustering()

    def stats(self) -> DataflowStats:
        """The dataflow's figures now (``DataflowStats.as_dict``: as the stats RPC shows
        them)."""
        ex = self.executor
        with ex.lock:
            ex.account_reads()
            views = {}
            for name, reader in self.graph.readers.items():
                c = ex.stats.view(name)
                views[name] = ViewStats(
                    keys_filled=reader.state.keys_filled,
                    hits=c["hits"],
                    misses=c["misses"],
                    upqueries=c["upqueries"],
                    evictions=c["evictions"],
                    memory_bytes=sum(st.memory_bytes for st in reader.states()),
                )
            ev = ex.evictor
            subs = self.subscriptions.stats()
            return DataflowStats(
                applied_lsn=ex.applied_lsn,
                memory_limit=self.memory_limit or 0,
                memory_bytes=ev.partial_bytes + ev.full_bytes,
                partial_bytes=ev.partial_bytes,
                full_bytes=ev.full_bytes,
                views=views,
                upquery_ms=ex.stats.upquery_percentiles(),
                spark_jobs=self.runner.jobs,
                # The runner's own figures (the Spark runner: per-upquery footprint on the
                # base segments, a footer estimate; index fill batches).
                runner=self.runner.stats(),
                fills_in_flight=len(ex.fills.active),
                state_anomalies=sum(st.anomalies for st in ev.states.values()),
                subscriptions=subs["subscriptions"],
                subscribed_keys=subs["subscribed_keys"],
                counters=dict(ex.stats.counters),
                checkpoint=ex.checkpointer.stats() if ex.checkpointer else None,
                tier=self.tier.stats() if self.tier is not None else None,
            )

