"""The Spark upquery runner: answers fills with one Spark plan per root state.

Implements ``partialflow.server.dataflow.runner.UpqueryRunner``. ``submit`` pins the
fill's snapshot on the executor thread, then a worker thread compiles each root state
(``state_plans``) and collects its rows; the reply goes back through the callback.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import SparkSession

from partialflow.operators.values import canonical_row
from partialflow.server.dataflow.fill import Fill
from partialflow.server.dataflow.runner import FillResults, Reply
from partialflow.server.upquery.faults import FaultInjector
from partialflow.server.upquery.state_plans import state_frame

log = logging.getLogger("partialflow.upquery")


class SparkUpqueryRunner:
    def __init__(self, spark: SparkSession, storage: Any, workers: int = 4) -> None:
        self.spark = spark
        self.storage = storage
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="upquery")
        self.faults = FaultInjector()
        # Bumped by every worker thread: a plain ``+= 1`` could lose counts.
        self._jobs = 0
        self._jobs_lock = threading.Lock()

    @property
    def jobs(self) -> int:
        return self._jobs

    def start(self) -> None:
        # Warm the JVM's query path in the background: on a fresh JVM the first upquery
        # pays seconds of class loading and JIT that a reader should not wait for.
        threading.Thread(target=self._warm_up, name="spark-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        try:
            df = self.spark.range(2000).selectExpr("id % 7 AS k", "id AS v")
            df.filter("k IN (1, 2)").groupBy("k").agg({"v": "max"}).collect()
        except Exception:  # only an optimisation
            log.debug("Spark warm-up failed", exc_info=True)

    def submit(self, fill: Fill, reply: Reply) -> None:
        # Pinned now, on the executor thread: compaction must keep this LSN readable.
        snapshot = self.storage.snapshot(fill.lsn)

        def run() -> None:
            try:
                results = self.run(fill, snapshot)
            except Exception as e:  # the executor turns this into a clean read error
                log.warning(
                    "upquery %d failed: %s", fill.fid, str(e).splitlines()[0] if str(e) else e
                )
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

    def run(self, fill: Fill, snapshot: Any) -> FillResults:
        """Rows of each root state for its keys, all from the fill's snapshot."""
        self.faults.before_scan()
        results: FillResults = {}
        tag = _tag_of(fill)
        _try(self.spark, "addTag", tag)
        try:
            for st in fill.roots:
                df = state_frame(st, fill.keys[st], snapshot, {})
                with self._jobs_lock:
                    self._jobs += 1
                results[st.sid] = [canonical_row(tuple(r)) for r in df.collect()]
        finally:
            _try(self.spark, "removeTag", tag)
        return results

    def cancel(self, fill: Fill) -> None:
        try:
            if hasattr(self.spark, "interruptTag"):
                self.spark.interruptTag(_tag_of(fill))
        except Exception:  # best effort: the reply is ignored anyway
            pass

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _tag_of(fill: Fill) -> str:
    return f"partialflow-fill-{fill.fid}"


def _try(spark: SparkSession, method: str, tag: str) -> None:
    try:
        getattr(spark, method)(tag)
    except Exception:
        pass
