"""The Spark upquery runner: answers fills with one Spark plan per root state.

Implements ``partialflow.server.dataflow.runner.UpqueryRunner``. ``submit`` pins the
fill's snapshot on the executor thread, then a worker thread compiles each root state
(``state_plans``; a plan kept from an earlier fill on the same base data is reused,
``plan_cache``) and collects its rows; the reply goes back through the callback.

Index fills (one per write that misses an evict-on-miss join index, each at its own
snapshot) can arrive faster than Spark runs jobs on a small machine. They queue per index
state, and one worker at a time runs everything queued for that state together: for an
index right over a base table (the common case), one scan of the table's stored changes up
to the newest snapshot, consolidated per fill at its own LSN in Python.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from partialflow.operators.values import canonical_row
from partialflow.server.dataflow.bounds import MAX_VALUES
from partialflow.server.dataflow.fill import Fill
from partialflow.server.dataflow.runner import BoundReply, FillResults, Reply
from partialflow.server.spark_supervisor import SparkDown, generation_of, spark_failure
from partialflow.server.upquery.faults import FaultInjector
from partialflow.server.upquery.plan_cache import PlanCache
from partialflow.server.upquery.profile import (
    Clock,
    Phases,
    Profiler,
    codegen_compiles,
    spark_phases,
)
from partialflow.server.upquery.state_plans import Scans

log = logging.getLogger("partialflow.upquery")

# Index fills answered by one scan at most; the values of a batch's keys pushed into the
# scan as a filter at most (beyond, the whole table's changes are read and filtered here).
MAX_BATCH = 512
BATCH_FILTER_VALUES = 2000


class SparkUpqueryRunner:
    def __init__(self, spark: SparkSession, storage: Any, workers: int = 4) -> None:
        self.spark = spark
        self.storage = storage
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="upquery")
        self.faults = FaultInjector()
        # Bumped by every worker thread: a plain ``+= 1`` could lose counts.
        self._jobs = 0
        self._jobs_lock = threading.Lock()
        # Index fills waiting, per root states, and the root states a worker is draining.
        self._index_queue: dict[tuple[int, ...], list[tuple[Fill, Any, Reply]]] = {}
        self._draining: set[tuple[int, ...]] = set()
        # The per-miss footprint (``scan_stats``): how much of the base segments each
        # upquery's pushed-down filter can touch, estimated from Parquet footers.
        self._scan = Counter[str]()
        self._last_scan: dict[str, int] = {}
        self._index = Counter[str]()  # index fill batches (``index_stats``)
        # Each state's plan, built once per base data and reused with new keys; a plan
        # holds JVM objects of the session it was built on, so a new session drops them.
        self.plans = PlanCache()
        # Seconds per phase of each upquery (``profile.py``), for benchmarks and DEBUG logs.
        self.profiler = Profiler()
        on_restart = getattr(spark, "on_restart", None)
        if on_restart is not None:
            on_restart(self._restarted)

    @property
    def jobs(self) -> int:
        return self._jobs

    def start(self) -> None:
        # Warm the JVM's query path in the background: on a fresh JVM the first upquery
        # pays seconds of class loading and JIT that a reader should not wait for.
        threading.Thread(target=self._warm_up, name="spark-warm-up", daemon=True).start()

    def _restarted(self, generation: int) -> None:
        """A new Spark session replaced a dead one: its plans are gone with it."""
        self.plans.clear()
        self.start()

    def _failed(self, err: Exception, generation: int) -> Exception:
        """What a fill that failed with ``err`` reports: SparkDown (an Unavailable saying
        Spark is being restarted) when Spark died under it, else ``err`` itself."""
        return spark_failure(self.spark, err, generation) or err

    def _warm_up(self) -> None:
        try:
            df = self.spark.range(2000).selectExpr("id % 7 AS k", "id AS v")
            df.filter("k IN (1, 2)").groupBy("k").agg({"v": "max"}).collect()
        except Exception:  # only an optimisation
            log.debug("Spark warm-up failed", exc_info=True)

    def submit(self, fill: Fill, reply: Reply) -> None:
        # Pinned now, on the executor thread: compaction must keep this LSN readable.
        snapshot = self.storage.snapshot(fill.lsn)
        if fill.index:
            self._queue_index(fill, snapshot, reply)
            return
        submitted = time.perf_counter()

        def run() -> None:
            generation = generation_of(self.spark)
            try:
                results = self.run(fill, snapshot, Clock(submitted))
            except Exception as e:  # the executor turns this into a clean read error
                e = self._failed(e, generation)
                # Spark being down is logged once, by the supervisor, not per upquery.
                log.log(logging.DEBUG if isinstance(e, SparkDown) else logging.WARNING,
                        "upquery %d failed: %s", fill.fid,
                        str(e).splitlines()[0] if str(e) else e)
                reply(fill, None, e)
            else:
                reply(fill, results, None)
            finally:
                snapshot.close()

        try:
            self.pool.submit(run)
        except BaseException:  # e.g. shut down: don't leave the snapshot pinned
            snapshot.close()
            raise

    def load_bound(self, table: str, column: str, lsn: int, reply: BoundReply) -> None:
        """MIN and MAX of ``column`` over the stored changes up to ``lsn``, and its distinct
        values if there are at most MAX_VALUES (a key bound, ``bounds.py``)."""
        snapshot = self.storage.snapshot(lsn)  # pinned now, on the executor thread

        def run() -> None:
            generation = generation_of(self.spark)
            try:
                df = snapshot.table_changes_df(table).select(column)
                with self._jobs_lock:
                    self._jobs += 1
                # One pass for the range and an estimate of the distinct count; a second
                # for the values themselves only when few enough to keep.
                row = df.agg(F.min(column), F.max(column),
                             F.approx_count_distinct(column)).collect()[0]
                values = None
                if row[2] <= MAX_VALUES * 0.9:
                    with self._jobs_lock:
                        self._jobs += 1
                    got = df.distinct().limit(MAX_VALUES + 1).collect()
                    if len(got) <= MAX_VALUES:
                        values = [r[0] for r in got if r[0] is not None]
            except Exception as e:  # the bound is only an optimisation
                e = self._failed(e, generation)
                log.warning("key bound of %s.%s failed: %s", table, column,
                            str(e).splitlines()[0] if str(e) else e)
                reply(None, None, None, e)
            else:
                reply(row[0], row[1], values, None)
            finally:
                snapshot.close()

        try:
            self.pool.submit(run)
        except BaseException:
            snapshot.close()
            raise

    def run(self, fill: Fill, snapshot: Any, clock: Clock | None = None) -> FillResults:
        """Rows of each root state for its keys, all from the fill's snapshot."""
        clock = clock or Clock()
        clock.lap("queued")
        self.faults.before_scan()
        results: FillResults = {}
        tag = _tag_of(fill)
        _try(self.spark, "addTag", tag)
        rec = Phases(fill.fid, keys=sum(len(k) for k in fill.keys.values()),
                     roots=len(fill.roots), plan_cached=True)
        group = self._profile_group(fill) if self.profiler.detail else None
        compiled = codegen_compiles(self.spark) if group is not None else None
        try:
            scans: Scans = []
            for st in fill.roots:
                shape: dict[str, bool] = {}
                df = self.plans.frame(st, fill.keys[st], snapshot, scans,
                                      generation_of(self.spark), shape, self.spark)
                rec.plan_cached &= shape.get("cached", False)
                rec.unflushed |= shape.get("unflushed", False)
                clock.lap("plan")
                with self._jobs_lock:
                    self._jobs += 1
                got = df.collect()
                clock.lap("collect")
                if group is not None:
                    for k, v in spark_phases(df).items():
                        clock.seconds[k] = clock.seconds.get(k, 0.0) + v
                results[st.sid] = [canonical_row(tuple(r)) for r in got]
                clock.lap("convert")
        finally:
            _try(self.spark, "removeTag", tag)
            if group is not None:
                _try(self.spark.sparkContext, "setLocalProperty", "spark.jobGroup.id", None)
        if all(st.mode != "full" for st in fill.roots):  # a miss, not a view's full load
            self._record_scans(snapshot, scans)
        rec.seconds = clock.total()
        rec.job_group = group
        if compiled is not None:
            after = codegen_compiles(self.spark)
            rec.compiles = None if after is None else after - compiled
        self.profiler.record(rec)
        return results

    def _profile_group(self, fill: Fill) -> str | None:
        """A job group for this fill's jobs, so the profile can find them later (classic
        Spark only: through Connect there is no SparkContext here)."""
        group = f"partialflow-profile-{fill.fid}"
        try:
            self.spark.sparkContext.setJobGroup(group, "upquery", False)
        except Exception:  # noqa: BLE001 - only a figure
            return None
        return group

    def _record_scans(self, snapshot: Any, scans: Scans) -> None:
        """Add one upquery's footprint: the row groups and bytes of the base segments its
        pushed-down filters cannot skip by footer min/max (an estimate, not Spark's
        input metrics). Never fails the upquery: it is only a figure."""
        try:
            fp = None
            for table, filters in scans:
                one = snapshot.footprint(table, filters)
                fp = one if fp is None else fp + one
        except Exception:
            log.debug("upquery footprint failed", exc_info=True)
            return
        if fp is None:
            return
        last = {
            "row_groups_scanned": fp.row_groups_scanned,
            "row_groups_total": fp.row_groups_total,
            "bytes_scanned": fp.bytes_scanned,
            "bytes_total": fp.bytes_total,
        }
        with self._jobs_lock:
            self._scan["upqueries"] += 1
            self._scan.update(last)
            self._last_scan = last

    def stats(self) -> dict[str, Any]:
        """What the dataflow's stats show of this runner: scans and index batches."""
        return {"upquery_scan": self.scan_stats(), **self.index_stats()}

    def scan_stats(self) -> dict[str, Any]:
        """Totals over all measured upqueries, the per-upquery means and the last one."""
        with self._jobs_lock:
            total = dict(self._scan)
            last = dict(self._last_scan)
        n = total.get("upqueries", 0)
        per = {
            f"{k}_per_upquery": round(total.get(k, 0) / n, 2) if n else 0.0
            for k in ("row_groups_scanned", "row_groups_total", "bytes_scanned", "bytes_total")
        }
        return {**total, **per, "last": last}

    def index_stats(self) -> dict[str, int]:
        """Index fills drained from the queue: batches, fills, the largest batch and the
        longest queue seen (a queue longer than a batch means Spark falls behind)."""
        with self._jobs_lock:
            return {f"index_{k}": self._index[k]
                    for k in ("batches", "batch_fills", "batch_max", "queue_max")}

    # -- index fills: queued per index state, drained in batches -------------------------
    def _queue_index(self, fill: Fill, snapshot: Any, reply: Reply) -> None:
        key = tuple(st.sid for st in fill.roots)
        with self._jobs_lock:
            self._index_queue.setdefault(key, []).append((fill, snapshot, reply))
            if key in self._draining:
                return  # the worker draining this state takes it next
            self._draining.add(key)
        try:
            self.pool.submit(self._drain, key)
        except BaseException:
            with self._jobs_lock:
                self._draining.discard(key)
                queued = self._index_queue.pop(key, [])
            for _, snap, _ in queued:
                snap.close()
            raise

    def _drain(self, key: tuple[int, ...]) -> None:
        while True:
            with self._jobs_lock:
                queued = self._index_queue.pop(key, [])
                if not queued:
                    self._draining.discard(key)
                    return
                batch, rest = queued[:MAX_BATCH], queued[MAX_BATCH:]
                if rest:
                    self._index_queue[key] = rest
                # How well index fills share scans, and how far behind the queue runs.
                self._index["batches"] += 1
                self._index["batch_fills"] += len(batch)
                self._index["batch_max"] = max(self._index["batch_max"], len(batch))
                self._index["queue_max"] = max(self._index["queue_max"], len(queued))
            generation = generation_of(self.spark)
            try:
                try:
                    replies = self._run_batch([(f, snap) for f, snap, _ in batch])
                except Exception as e:
                    if len(batch) == 1 or spark_failure(self.spark, e, generation):
                        raise
                    # Seen under load: the newest snapshot's scan failed (a segment file
                    # gone). Each fill on its own snapshot is slower but independent.
                    log.warning("index upquery of %d fills failed (%s); running them one "
                                "by one", len(batch), str(e).splitlines()[0] if str(e) else e)
                    for fill, snap, reply in batch:
                        try:
                            result = self.run(fill, snap)
                        except Exception as e1:
                            reply(fill, None, self._failed(e1, generation))
                        else:
                            reply(fill, result, None)
                    continue
            except Exception as e:
                e = self._failed(e, generation)
                log.log(logging.DEBUG if isinstance(e, SparkDown) else logging.WARNING,
                        "index upquery %d failed: %s", batch[0][0].fid,
                        str(e).splitlines()[0] if str(e) else e)
                for fill, _, reply in batch:  # one, or all of them when Spark died
                    reply(fill, None, e)
            else:
                for fill, _, reply in batch:
                    reply(fill, replies[fill.fid], None)
            finally:
                for _, snap, _ in batch:
                    snap.close()

    def _run_batch(self, batch: list[tuple[Fill, Any]]) -> dict[int, FillResults]:
        """Each fill's rows at its own snapshot. An index state right over a base table
        (the common case) is answered for every fill by one scan of the table's stored
        changes up to the newest snapshot, consolidated per fill in Python; anything else
        runs fill by fill.

        One scan serves every snapshot at or above the newest one's horizon, whatever
        flushes and compactions happened between them."""
        table = _base_table_of(batch[0][0])
        if len(batch) == 1 or table is None:
            return {fill.fid: self.run(fill, snap) for fill, snap in batch}
        # The newest snapshot's stored changes hold every older snapshot's rows with their
        # own LSNs (a flush moves rows, it does not change them) except where a compaction
        # consolidated them: rows up to its horizon get _lsn = horizon. Compaction keeps
        # its horizon at or below every pinned snapshot (each queued fill pins its own),
        # so a fill below the newest snapshot's horizon should not occur; one that does
        # is answered from its own snapshot.
        newest = max(batch, key=lambda b: b[0].lsn)[1]
        horizon = newest.table_view(table).horizon
        shared = [(f, s) for f, s in batch if f.lsn >= horizon]
        out = {f.fid: self.run(f, s) for f, s in batch if f.lsn < horizon}
        out.update(self._scan_changes(shared, table))
        return out

    def _scan_changes(self, batch: list[tuple[Fill, Any]], table: str) -> dict[int, FillResults]:
        if not batch:
            return {}
        if len(batch) == 1:
            fill, snap = batch[0]
            return {fill.fid: self.run(fill, snap)}
        self.faults.before_scan()
        st = batch[0][0].roots[0]
        cols = st.partial_cols
        wanted = [{k for k in f.keys[f.roots[0]] if None not in k} for f, _ in batch]
        values = [sorted({k[i] for ks in wanted for k in ks}, key=repr) for i in range(len(cols))]
        parent = st.node.parents[_side_of(st)]
        filters = {parent.columns[c]: v for c, v in zip(cols, values, strict=True)}
        if any(len(v) > BATCH_FILTER_VALUES for v in values):
            filters = {}
        newest = max(batch, key=lambda b: b[0].lsn)[1]
        tags = [_tag_of(fill) for fill, _ in batch]
        for tag in tags:
            _try(self.spark, "addTag", tag)
        try:
            with self._jobs_lock:
                self._jobs += 1
            changes = [tuple(r) for r in newest.table_changes_df(table, filters).collect()]
        finally:
            for tag in tags:
                _try(self.spark, "removeTag", tag)
        self._record_scans(newest, [(table, filters or None)])
        by_key: dict[tuple, list[tuple]] = {}  # fill key -> its stored changes
        for r in changes:
            by_key.setdefault(tuple([r[c] for c in cols]), []).append(r)
        out: dict[int, FillResults] = {}
        for (fill, _), keys in zip(batch, wanted, strict=True):
            counts: dict[tuple, int] = {}
            for k in keys:
                for r in by_key.get(k, ()):
                    if r[-2] <= fill.lsn:  # _lsn: in this fill's snapshot
                        row = r[:-2]
                        counts[row] = counts.get(row, 0) + r[-1]
            rows = [canonical_row(row) for row, n in counts.items() for _ in range(n)]
            out[fill.fid] = {fill.roots[0].sid: rows}
        return out

    def cancel(self, fill: Fill) -> None:
        try:
            if hasattr(self.spark, "interruptTag"):
                self.spark.interruptTag(_tag_of(fill))
        except Exception:  # best effort: the reply is ignored anyway
            pass

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _side_of(st: Any) -> int:
    return next(s for s, x in st.node.sides.items() if x is st)


def _base_table_of(fill: Fill) -> str | None:
    """The base table of the fill's one root when that root is a join side index right
    over it, keyed by some of its columns (what a batch of index fills can share)."""
    if len(fill.roots) != 1:
        return None
    st = fill.roots[0]
    if st.kind != "rows" or st.node.view is not None or not st.partial_cols:
        return None
    parent = st.node.parents[_side_of(st)]
    return parent.table


def _tag_of(fill: Fill) -> str:
    return f"partialflow-fill-{fill.fid}"


def _try(obj: Any, method: str, *args: Any) -> None:
    try:
        getattr(obj, method)(*args)
    except Exception:
        pass
