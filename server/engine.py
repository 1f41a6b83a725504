"""The engine: what the service calls. Owns storage and the dataflow, and turns SQL
statements into their calls.

Statements arrive typed (``statements.parse``) and ``dispatch.run`` turns each into the
engine's calls: DDL onto storage (tables) and the dataflow's view catalog (views), a plain
SELECT on Spark at a snapshot (``query``). Everything the engine
refuses raises a ``partialflow.server.errors`` class naming the problem, before anything
is changed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from partialflow.server import dispatch, sqltx
from partialflow.server.bulk import BulkLoader, Progress
from partialflow.server.checkpoint import CheckpointStore
from partialflow.server.config import Config
from partialflow.server.dataflow import Dataflow
from partialflow.server.dataflow.tier import Tier
from partialflow.server.dispatch import ResultSet
from partialflow.server.engine_stats import EngineStats, WriteCounts
from partialflow.server.errors import FailedPrecondition, InvalidArgument, OutOfRange
from partialflow.server.spark_supervisor import SparkSupervisor, supervised
from partialflow.server.statements import Statement, parse
from partialflow.server.storage import Storage, TableChange
from partialflow.server.upquery import SparkUpqueryRunner
from partialflow.server.verifier import Verifier, attach_verifier

log = logging.getLogger(__name__)
# sqlglot logs a warning for every statement it falls back to parsing as a raw Command;
# the engine refuses those itself with a clearer message.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def open_tier(config: Config) -> Tier:
    """The disk tier's store under the data directory. One SQLite can't open (a damaged
    file) is moved aside and a new one made: it only holds copies of keys, and a store that
    does not match the checkpoint makes those keys holes anyway. A directory that can't be
    made stops the start (OSError), as a checkpoint directory that can't be used does."""
    path = Path(config.data_dir) / "tier" / "tier.db"
    if config.memory_limit is None:
        log.warning("--disk-limit without --memory-limit: nothing is pushed out of memory, "
                    "so the disk tier stays empty")
    try:
        return Tier(path, config.disk_limit or 0)
    except sqlite3.Error as e:
        aside = path.with_name(f"tier.db.damaged-{int(time.time())}")
        log.error("disk tier %s can't be opened (%s): moved to %s; a new one is made and the "
                  "keys it held start as holes", path, e, aside.name)
        for suffix in ("", "-wal", "-shm"):
            old = Path(f"{path}{suffix}")
            if old.exists():
                old.replace(f"{aside}{suffix}")
        return Tier(path, config.disk_limit or 0)


def _test_checkpoint_delay() -> float:
    """Crash tests slow checkpoint writes down (PARTIALFLOW_TEST_CHECKPOINT_DELAY seconds
    per chunk), honoured only with PARTIALFLOW_TEST_HOOKS=1 like every test hook."""
    if os.environ.get("PARTIALFLOW_TEST_HOOKS") != "1":
        return 0.0
    return float(os.environ.get("PARTIALFLOW_TEST_CHECKPOINT_DELAY") or 0)


class WriteTicket:
    """A write the engine submitted (``Engine.submit_many``): ``wait()`` is storage's,
    and counts the write in ``stats()["writes"]`` once (when it is durable)."""

    def __init__(self, ticket: Any, count: Callable[[], None] | None) -> None:
        self._ticket, self._count, self.lsn = ticket, count, int(ticket.lsn)

    @property
    def storage_ticket(self) -> Any:
        return self._ticket

    def wait(self) -> int:
        lsn = int(self._ticket.wait())
        count, self._count = self._count, None
        if count is not None:
            count()
        return lsn


class Engine:
    """Storage plus dataflow behind one object; every method is safe to call concurrently."""

    def __init__(self, config: Config, spark: Any) -> None:
        self.config = config
        # Everything below holds the supervisor, never a session: when the Spark driver
        # dies the supervisor replaces the session under them (spark_supervisor.py).
        self.spark: SparkSupervisor = supervised(spark, config.spark_master, config.spark_conf)
        spark = self.spark
        # Checkpoints first: storage must keep the log from the oldest one kept, and its
        # background threads start in open().
        path = config.checkpoint_path
        self.checkpoints: CheckpointStore | None = None
        if path is not None:
            try:
                self.checkpoints = CheckpointStore(
                    Path(path), on_retained=lambda lsn: self.storage.hold_wal(lsn),
                    chunk_delay=_test_checkpoint_delay())
            except OSError as e:
                raise FailedPrecondition(
                    f"cannot use the checkpoint directory {path}: {e.strerror or e} "
                    "(--checkpoint-dir, or --checkpoint-interval 0 for no checkpoints)"
                ) from None
        self.storage = Storage(
            config.data_dir,
            spark,
            flush_rows=config.flush_rows,
            flush_interval=config.flush_interval,
            retention_lsns=config.retention_lsns,
            max_segments=config.max_segments,
            disk_reserve=config.disk_reserve,
            wal_hold=self.checkpoints.newest_lsn() if self.checkpoints is not None else None,
        )
        self.storage.open()
        self.verifier: Verifier | None = None
        dataflow: Dataflow | None = None
        try:
            self.loader = BulkLoader(self.storage, spark, config.data_dir)
            dataflow = Dataflow(
                self.storage,
                SparkUpqueryRunner(spark, self.storage),
                memory_limit=config.memory_limit,
                upquery_timeout=config.upquery_timeout,
                checkpoints=self.checkpoints,
                checkpoint_interval=config.checkpoint_interval,
                index_prefetch=config.index_prefetch,
                tier=None if config.disk_limit is None else open_tier(config),
            )
            dataflow.start()
            self.dataflow = dataflow
            self.recluster()  # the recovered views choose how segments are clustered
            self.verifier = attach_verifier(
                self.storage,
                self.dataflow,
                sample=config.verify_sample,
                max_per_second=config.verify_max_per_second,
            )
        except BaseException:
            if dataflow is not None:
                dataflow.close()
            elif self.checkpoints is not None:
                self.checkpoints.close()
            self.storage.close()
            raise
        self.spark.start()  # the watchdog
        # Write throughput for stats and metrics: storage counts LSNs, not rows.
        self._writes = WriteCounts()
        # Tables another system owns (followed from an upstream PostgreSQL: server/follow),
        # lower-cased name -> that system: the write API refuses them; the follower writes
        # through ``write_many(..., origin="follow")``.
        self.read_only: dict[str, str] = {}
        # The follower, when following (the service and the PostgreSQL front end ask it
        # for min_upstream_lsn and Result.upstream_lsn); set by the app.
        self.follower: Any = None
        self._closed = False

    def close(self) -> None:
        """Stop the dataflow, then close storage (flushing what it must). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.spark.close()  # stops the watchdog; the session stays its owner's
        try:
            if self.verifier is not None:
                self.verifier.close()
            self.dataflow.close()
        finally:
            self.storage.close()

    def recluster(self) -> None:
        """Tell storage which columns to cluster each table's segments by: those the live
        views' misses filter on (plain data: storage must not know the dataflow)."""
        self.storage.set_clustering(self.dataflow.clustering())

    # -- statements -------------------------------------------------------------------

    def execute(self, sql: str) -> ResultSet:
        """Run one statement (DDL, INSERT ... VALUES, EXPLAIN or SELECT) and return its result,
        or a transaction block (``BEGIN; ...; COMMIT``: ``sqltx``) as one write."""
        if sqltx.is_transaction(sql):
            changes = sqltx.changes(self, sql)
            lsn = self.write_many(changes) if changes else self.storage.last_lsn
            return ResultSet([], [], lsn)  # ROLLBACK or no rows: nothing written
        return self.run(parse(sql))

    def run(self, stmt: Statement) -> ResultSet:
        """Run one typed statement (``statements.parse``): ``dispatch.run``."""
        return dispatch.run(self, stmt)

    def reorder(self, table: str, listed: list[str], rows: list[tuple]) -> list[tuple]:
        """Rows given for a column list, in the table's column order (NULL for the rest)."""
        names = [c.name for c in self.storage.table(table).columns]
        return dispatch.reorder(names, table, listed, rows)

    # -- writes -----------------------------------------------------------------------

    def write(
        self,
        table: str,
        inserts: Sequence[Sequence[Any]] = (),
        deletes: Sequence[Sequence[Any]] = (),
    ) -> int:
        """One atomic, durable write; returns its LSN. A write without rows is refused
        (InvalidArgument) and uses no LSN."""
        self.check_writable(table)
        if not inserts and not deletes:
            raise InvalidArgument(f"write to {table}: a write needs at least one row")
        return self._write(table, inserts, deletes)

    def check_writable(self, table: str) -> None:
        """FailedPrecondition for a table followed from elsewhere (writes go there)."""
        owner = self.read_only.get(table.lower())
        if owner is not None:
            raise FailedPrecondition(
                f"table {table} is read-only here: it follows {owner}; write to it there")

    def _write(
        self, table: str, inserts: Sequence[Sequence[Any]], deletes: Sequence[Sequence[Any]]
    ) -> int:
        return self._submit([TableChange(table, inserts, deletes)], None).wait()

    def write_many(
        self,
        changes: Sequence[TableChange],
        *,
        upstream_lsn: int | None = None,
        origin: str | None = None,
    ) -> int:
        """One transaction: ``changes`` to any tables, applied in order at one LSN, durable
        as one unit, checked as a whole (any error refuses all of it), and applied by the
        dataflow as one update, so no read, subscription or checkpoint sees a part of it;
        returns its LSN. Without rows it is refused (InvalidArgument) unless it carries
        ``upstream_lsn``, which is stored with it (``storage.upstream_lsn``).

        Tables followed from an upstream database are read-only here, except to the
        follower itself (``origin="follow"``), which applies the upstream's transactions."""
        return self.submit_many(changes, upstream_lsn=upstream_lsn, origin=origin).wait()

    def submit_many(
        self,
        changes: Sequence[TableChange],
        *,
        upstream_lsn: int | None = None,
        origin: str | None = None,
        after: WriteTicket | None = None,
    ) -> WriteTicket:
        """``write_many`` without the wait: checked and given its LSN now (refusals raise
        here); the ticket's ``wait()`` returns it once durable, or raises why the commit
        failed. The follower submits several upstream commits at once to share fsyncs,
        each ``after`` the one before: if one is refused, those after it are too."""
        if origin != "follow":
            for change in changes:
                self.check_writable(change.table)
        if upstream_lsn is None and isinstance(changes, (list, tuple)) and not any(
            isinstance(c, TableChange) and (c.inserts or c.deletes) for c in changes
        ):
            raise InvalidArgument("transaction: a write needs at least one row")
        return self._submit(changes, upstream_lsn, after)

    def _submit(self, changes: Sequence[TableChange], upstream_lsn: int | None,
                after: WriteTicket | None = None) -> WriteTicket:
        ticket = self.storage.submit_many(
            changes, upstream_lsn=upstream_lsn,
            after=after.storage_ticket if after is not None else None)
        # Counted once durable: a commit that fails counts nothing.
        return WriteTicket(ticket, lambda: self._writes.write(changes))

    def load(
        self,
        table: str,
        path: str,
        *,
        fmt: str = "parquet",
        header: bool = False,
        force: bool = False,
        options: Mapping[str, str] | None = None,
        active: Callable[[], bool] = lambda: True,
    ) -> Iterator[Progress]:
        """Bulk-load a Parquet or CSV file (read by Spark) as one atomic write; yields
        progress, the last event carrying the LSN. See ``partialflow.server.bulk``."""
        self.check_writable(table)
        events = self.loader.load(
            table,
            path,
            self._load_write,
            fmt=fmt,
            header=header,
            force=force,
            options=options,
            active=active,
        )
        for event in events:
            if event.phase == "done":
                self._writes.load(event.rows)
            yield event

    def _load_write(self, table: str, rows: list[tuple]) -> int:
        # An empty file still loads as one (empty) write: its LSN records the load.
        return self._write(table, rows, ())

    def insert(self, table: str, rows: Sequence[Sequence[Any]]) -> int:
        """Insert rows atomically; returns the LSN."""
        return self.write(table, inserts=rows)

    def delete(self, table: str, rows: Sequence[Sequence[Any]]) -> int:
        """Delete one occurrence of each row atomically; returns the LSN."""
        return self.write(table, deletes=rows)

    def update(
        self, table: str, old_rows: Sequence[Sequence[Any]], new_rows: Sequence[Sequence[Any]]
    ) -> int:
        """Replace old rows by new ones pairwise in one atomic write; returns the LSN."""
        if len(old_rows) != len(new_rows):
            raise InvalidArgument(
                f"update of {table}: {len(old_rows)} old rows but {len(new_rows)} new rows"
            )
        return self.write(table, inserts=new_rows, deletes=old_rows)

    # -- reads ------------------------------------------------------------------------

    def query(self, sql: str, as_of: int | None = None) -> ResultSet:
        """Run a SELECT over the base tables on Spark at the latest LSN or ``as_of``.

        Storage parses and vets the statement itself (Spark dialect, read-only, base tables
        only), so it is passed through as written.
        """
        if as_of is not None and as_of < 0:
            raise InvalidArgument(f"as_of must not be negative, got {as_of}")
        text = sql.strip().rstrip(";").strip()
        columns, rows, lsn = self.storage.query(text, as_of=as_of)
        return ResultSet(list(columns), rows if isinstance(rows, list) else list(rows), lsn)

    def lookup(
        self, view: str, keys: list[tuple], *, min_lsn: int | None, timeout: float | None
    ) -> tuple[list[str], list[tuple[list[tuple], int]]]:
        """The view's columns and, per key, its rows and the LSN they are exact at.

        A ``min_lsn`` beyond the last acknowledged write is refused at once (OutOfRange):
        no wait could reach it, as every LSN a client holds is at most that one."""
        if min_lsn is not None:
            if min_lsn < 0:
                raise InvalidArgument(f"min_lsn must not be negative, got {min_lsn}")
            last = self.storage.last_lsn
            if min_lsn > last:
                raise OutOfRange(
                    f"min_lsn {min_lsn} is beyond the last acknowledged write (LSN {last})"
                )
        limit = self.config.upquery_timeout
        timeout = limit if timeout is None else max(0.0, min(timeout, limit))
        return self.dataflow.lookup(view, keys, min_lsn=min_lsn, timeout=timeout)

    def subscribe(self, view: str, keys: list[tuple], *, from_lsn: int | None = None,
                  max_buffered: int | None = None) -> Any:
        """A subscription to ``keys`` of ``view`` (dataflow/subscriptions.py): take events
        with ``next_event``, end it with ``unsubscribe``. A ``from_lsn`` beyond the last
        acknowledged write is refused (OutOfRange), as ``min_lsn`` is."""
        if from_lsn is not None:
            if from_lsn < 0:
                raise InvalidArgument(f"from_lsn must not be negative, got {from_lsn}")
            last = self.storage.last_lsn
            if from_lsn > last:
                raise OutOfRange(
                    f"from_lsn {from_lsn} is beyond the last acknowledged write (LSN {last})")
        return self.dataflow.subscribe(view, keys, from_lsn=from_lsn, max_buffered=max_buffered)

    def unsubscribe(self, sub: Any) -> None:
        self.dataflow.unsubscribe(sub)

    def view_schema(self, view: str) -> dict[str, Any]:
        """A view's name, SQL, visible columns and parameters, for front ends that must type
        them (the PostgreSQL protocol): ``keys`` holds, per ``?`` parameter in order, the
        view's column it keys (its name in the plan), the base column it compares and that
        column's type (None when computed). NotFound for an unknown view."""
        reader = self.dataflow.reader(view)
        plan = reader.plan
        params = self.dataflow.params(view)
        keys = [(plan.root.columns[c], p.name if p else None, p.type if p else None)
                for c, p in zip(plan.key, params, strict=False)]
        return {"name": reader.name, "sql": reader.sql, "columns": list(plan.columns),
                "keys": keys}

    def evict(self, view: str, key: tuple | None) -> int:
        """Evict ``key`` of ``view`` (or keys of the dataflow's choosing); returns the count."""
        return self.dataflow.evict(view, key)

    def explain(self, view: str) -> tuple[str, str]:
        """The view's dataflow graph as (text tree, Graphviz DOT)."""
        return self.dataflow.explain(view)

    # -- administration ---------------------------------------------------------------

    def flush(self) -> int:
        """Flush logged writes to Parquet segments; returns the last LSN."""
        self.storage.flush()
        return self.storage.last_lsn

    def checkpoint(self, timeout: float = 600.0) -> dict:
        """Take a dataflow checkpoint now; returns its seq, LSN, kind, bytes, duration."""
        return self.dataflow.checkpoint(timeout)

    def compact(self, table: str | None = None) -> dict:
        """Compact one table (or all); returns storage's report."""
        return self.storage.compact(table)

    def figures(self) -> EngineStats:
        """The dataflow's figures (``DataflowStats``) with storage's, the write counters,
        the verifier's, Spark's (up or down since when, restarts: ``SparkSupervisor.stats``)
        and the follower's, taken now."""
        verifier, follower = self.verifier, self.follower
        return EngineStats(
            dataflow=self.dataflow.stats(),
            lsn=self.storage.last_lsn,
            memory_limit=self.config.memory_limit,
            storage=self.storage.stats(),
            writes=self._writes.as_dict(),
            verifier=verifier.stats() if verifier is not None else None,
            spark=self.spark.stats(),
            follow=follower.stats() if follower is not None else None,
        )

    def stats(self) -> dict:
        """``figures()`` under the names clients see: dataflow statistics (per view under
        ``views``) plus ``lsn``, ``applied_lsn``, ``memory_limit``, ``storage``, ``writes``
        (writes, rows, bulk loads), ``spark`` and, when there, ``verifier`` and ``follow``
        (``EngineStats.as_dict``)."""
        return self.figures().as_dict()
