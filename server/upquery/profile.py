"""Where an upquery's time goes: timestamps per phase, kept for the last fills.

Each upquery the runner answers records a ``Phases``: the seconds spent waiting for a
worker (``queued``), building its Spark plan in Python (``plan``: the plan cache's lookup,
or a new plan built call by call over Py4J, reading the snapshot's tables and shipping
their unflushed rows to Spark), the Spark action (``collect``) and turning the rows into
the dataflow's values (``convert``). On a classic (Py4J) session the collect is split
further from Spark's own bookkeeping: its query phases (``spark_analysis``,
``spark_optimization``, ``spark_planning``, from the query's ``QueryPlanningTracker``),
and, when ``jobs`` is on, the jobs it ran (from Spark's status store, read when the
profile is asked for: ``spark_jobs`` from submission to completion, ``spark_tasks`` of
executor run time summed over tasks, ``spark_task_deserialize``, and the task count).
What remains of ``collect`` after the jobs is the result's trip to Python, and on the
driver the physical plan's preparation, including compiling generated code
(``compiles``: classes Janino compiled while the upquery ran).

The records go to the ``partialflow.upquery.profile`` logger at DEBUG (one line per
upquery) and into a ring a benchmark reads with ``summary()``. Taking the timestamps costs
a few microseconds; the Spark-side figures cost Py4J calls, so they are taken only when
``detail`` is set (a benchmark sets it; the server leaves it off).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("partialflow.upquery.profile")

KEEP = 2048  # upqueries remembered

# The phases of a record, in the order they happen.
PHASES = ("queued", "plan", "collect", "convert", "total")
SPARK_PHASES = ("spark_analysis", "spark_optimization", "spark_planning")
JOB_FIGURES = ("spark_jobs", "spark_tasks", "spark_task_deserialize", "spark_result")


@dataclass
class Phases:
    """One upquery's seconds per phase, and what shaped it."""

    fid: int
    keys: int = 0
    roots: int = 0
    plan_cached: bool = False  # every root's plan came from the plan cache
    unflushed: bool = False  # some table had unflushed rows at the snapshot
    seconds: dict[str, float] = field(default_factory=dict)
    job_group: str | None = None
    tasks: int = 0
    compiles: int | None = None  # generated classes compiled meanwhile (detail only)


class Profiler:
    """Per-upquery phase records (thread-safe)."""

    def __init__(self) -> None:
        self.detail = False  # Spark-side figures (query phases, jobs): costs Py4J calls
        self._records: deque[Phases] = deque(maxlen=KEEP)
        self._lock = threading.Lock()

    def record(self, rec: Phases) -> None:
        with self._lock:
            self._records.append(rec)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("upquery %d keys=%d cached=%s unflushed=%s %s", rec.fid, rec.keys,
                      rec.plan_cached, rec.unflushed,
                      " ".join(f"{k}={v * 1000:.1f}ms" for k, v in rec.seconds.items()))

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def records(self, spark: Any = None) -> list[Phases]:
        """The kept records, with their Spark jobs' figures filled in (if ``spark``)."""
        with self._lock:
            recs = list(self._records)
        if spark is not None:
            for rec in recs:
                if rec.job_group is not None:
                    _job_figures(spark, rec)
        return recs

    def summary(self, spark: Any = None) -> dict[str, Any]:
        """Median and p90 milliseconds per phase over the kept records, and counts."""
        recs = self.records(spark)
        out: dict[str, Any] = {
            "upqueries": len(recs),
            "plan_cached": sum(r.plan_cached for r in recs),
            "unflushed": sum(r.unflushed for r in recs),
            "tasks_p50": statistics.median([r.tasks for r in recs]) if recs else 0,
            "compiles_mean": round(statistics.fmean(c), 2) if (
                c := [r.compiles for r in recs if r.compiles is not None]) else None,
        }
        for name in PHASES + SPARK_PHASES + JOB_FIGURES:
            xs = sorted(r.seconds[name] for r in recs if name in r.seconds)
            if xs:
                out[f"{name}_p50_ms"] = round(statistics.median(xs) * 1000, 2)
                out[f"{name}_p90_ms"] = round(xs[min(len(xs) - 1, int(0.9 * len(xs)))] * 1000, 2)
        return out


class Clock:
    """Stamps phases of one upquery: ``lap(name)`` adds the time since the last lap."""

    def __init__(self, start: float | None = None) -> None:
        self.t0 = self.t = start if start is not None else time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.t
        self.t = now

    def total(self) -> dict[str, float]:
        self.seconds["total"] = time.perf_counter() - self.t0
        return self.seconds


def spark_phases(df: Any) -> dict[str, float]:
    """Seconds of the query's analysis, optimization and planning after an action ran on
    ``df`` (classic sessions only: empty through Spark Connect or on any failure)."""
    try:
        phases = df._jdf.queryExecution().tracker().phases()
        out = {}
        for name in ("analysis", "optimization", "planning"):
            got = phases.get(name)  # a Scala Option
            if got.isDefined():
                ph = got.get()
                out[f"spark_{name}"] = (ph.endTimeMs() - ph.startTimeMs()) / 1000
        return out
    except Exception:  # noqa: BLE001 - only a figure
        return {}


def codegen_compiles(spark: Any) -> int | None:
    """Java classes Spark has compiled for generated code so far (a process-wide count:
    read before and after a lone upquery, the difference is what it compiled)."""
    try:
        metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
        return int(metrics.METRIC_COMPILATION_TIME().getCount())
    except Exception:  # noqa: BLE001 - only a figure (and none through Connect)
        return None


def _job_figures(spark: Any, rec: Phases) -> None:
    """Fill ``rec`` from Spark's status store: its jobs' wall time, the tasks' run and
    deserialize time, and the task count. Done once per record."""
    group, rec.job_group = rec.job_group, None
    try:
        sc = spark.sparkContext
        store = sc._jsc.sc().statusStore()
        jobs = list(sc.statusTracker().getJobIdsForGroup(group))
        wall = run = deser = 0.0
        tasks = 0
        for jid in jobs:
            job = store.job(jid)
            sub, done = job.submissionTime(), job.completionTime()
            if sub.isDefined() and done.isDefined():
                wall += (done.get().getTime() - sub.get().getTime()) / 1000
            info = sc.statusTracker().getJobInfo(jid)
            for sid in info.stageIds if info is not None else ():
                stage = store.lastStageAttempt(sid)
                run += stage.executorRunTime() / 1000
                deser += stage.executorDeserializeTime() / 1000
                tasks += stage.numTasks()
    except Exception:  # noqa: BLE001 - only a figure
        log.debug("no job figures for %s", group, exc_info=True)
        return
    rec.seconds["spark_jobs"] = wall
    rec.seconds["spark_tasks"] = run
    rec.seconds["spark_task_deserialize"] = deser
    # The collect less the query phases and the jobs: the result's trip to Python.
    rest = rec.seconds.get("collect", 0.0) - wall - sum(
        rec.seconds.get(p, 0.0) for p in SPARK_PHASES)
    rec.seconds["spark_result"] = max(0.0, rest)
    rec.tasks = tasks
