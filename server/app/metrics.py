"""Prometheus metrics: a collector that reads the engine's stats at scrape time, plus the
upquery latency histogram, served over HTTP by prometheus-client.

Counters and gauges are not kept twice: ``EngineCollector`` turns ``Engine.stats()`` (the
dataflow's, storage's and the engine's own figures) into metric families when Prometheus
scrapes. Only the latency histogram needs per-event bookkeeping; the executor reports each
finished fill to ``observe_upquery`` on its own thread, which costs one bucket increment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from partialflow.server.errors import Unavailable

log = logging.getLogger(__name__)

# Spark upqueries take from a few ms (cached plans, small tables) to minutes (large scans).
UPQUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

# Per-view counters in Dataflow.stats()["views"][name] -> (metric, help).
_VIEW_COUNTERS = {
    "hits": ("partialflow_view_hits", "Lookups of a view answered from filled state."),
    "misses": ("partialflow_view_misses", "Lookups of a view that found a hole."),
    "upqueries": ("partialflow_view_upqueries", "Upqueries (Spark fills) issued for a view."),
    "evictions": ("partialflow_view_evictions", "Keys evicted from a view's reader."),
}
_VIEW_GAUGES = {
    "keys_filled": ("partialflow_view_keys_filled", "Keys filled in a view's reader."),
    "memory_bytes": ("partialflow_view_state_bytes", "Bytes of state along a view's graph."),
}
# Storage figures in stats()["storage"] -> (metric, help, is a counter).
_STORAGE = {
    "flushes": ("partialflow_storage_flushes", "Memtable flushes to Parquet segments.", True),
    "compactions": ("partialflow_storage_compactions", "Segment compactions.", True),
    "fsyncs": ("partialflow_wal_fsyncs", "WAL fsyncs (one per commit group).", True),
    "wal_bytes": ("partialflow_wal_bytes", "Bytes in the write-ahead log.", False),
    "memtable_rows": ("partialflow_memtable_rows", "Rows logged but not yet flushed.", False),
    "pinned_snapshots": ("partialflow_pinned_snapshots", "Snapshots held by reads.", False),
    # A full disk (storage/space.py): writes are refused, background work retried.
    "disk_free_bytes": ("partialflow_disk_free_bytes",
                        "Free bytes on the data directory's filesystem.", False),
    "disk_reserve_bytes": ("partialflow_disk_reserve_bytes",
                           "Free space kept beyond queued writes and the next flush.", False),
    "disk_short": ("partialflow_disk_short",
                   "1 from a write refused for lack of space until a reserve is spare.", False),
    "writes_refused_disk_full": ("partialflow_writes_refused_disk_full",
                                 "Writes refused with RESOURCE_EXHAUSTED for lack of space.", True),
    "flush_failures": ("partialflow_storage_flush_failures",
                       "Background flushes that failed (retried with backoff).", True),
    "compaction_failures": ("partialflow_storage_compaction_failures",
                            "Background compactions that failed (retried with backoff).", True),
    "index_failures": ("partialflow_storage_index_failures",
                       "Row index updates that found the disk full (retried).", True),
}
# Dataflow-wide figures that are not counters of executor events.
_NOT_EVENTS = {
    "lsn",
    "memory_limit",
    "memory_bytes",
    "partial_bytes",
    "full_bytes",
    "views",
    "upquery_ms",
    "spark_jobs",
    "busy_ns",
    "state_anomalies",
    "upquery_scan",
}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _counter(name: str, doc: str, value: Any) -> Iterator[Metric]:
    if _num(value) is not None:
        yield CounterMetricFamily(name, doc, value=_num(value))


def _gauge(name: str, doc: str, value: Any) -> Iterator[Metric]:
    if _num(value) is not None:
        yield GaugeMetricFamily(name, doc, value=_num(value))


class EngineCollector(Collector):
    """Metric families from ``engine.stats()``, computed at scrape time."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def describe(self) -> list[Metric]:
        # Describing by collecting would run stats() at registration; an empty description
        # tells the registry not to check names, which is what dynamic collectors do.
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.engine.stats()
        except Exception:  # a scrape must never take the server down; say so instead
            log.exception("collecting metrics failed")
            yield GaugeMetricFamily("partialflow_stats_ok", "1 if stats could be read.", value=0)
            return
        yield GaugeMetricFamily("partialflow_stats_ok", "1 if stats could be read.", value=1)
        yield from self._views(stats.get("views") or {})
        yield from self._lsns(stats)
        yield from self._memory(stats)
        yield from self._writes(stats.get("writes") or {})
        yield from self._storage(stats.get("storage") or {})
        yield from self._dataflow(stats)
        yield from self._verifier(stats.get("verifier") or {})
        yield from self._checkpoint(stats.get("checkpoint") or {})
        yield from self._tier(stats)
        yield from self._spark(stats.get("spark") or {})
        yield from self._follow(stats.get("follow") or {})

    def _follow(self, follow: dict) -> Iterator[Metric]:
        """Following an upstream PostgreSQL (serve --follow): alert on lag and on
        partialflow_follow_streaming staying 0."""
        if not follow:
            return
        yield GaugeMetricFamily("partialflow_follow_streaming",
                                "1 while the upstream's changes stream in.",
                                value=1.0 if follow.get("state") == "streaming" else 0.0)
        yield from _gauge("partialflow_follow_lag_bytes",
                          "Upstream WAL bytes not yet applied.", follow.get("lag_bytes"))
        yield from _gauge("partialflow_follow_lag_seconds",
                          "Age of the last applied upstream commit while behind (0 when "
                          "caught up).", follow.get("lag_seconds"))
        yield from _counter("partialflow_follow_transactions",
                            "Upstream transactions applied.", follow.get("transactions_applied"))
        yield from _counter("partialflow_follow_rows", "Upstream rows applied.",
                            follow.get("rows_applied"))
        yield from _counter("partialflow_follow_resnapshots",
                            "Copies of the upstream tables after a lost or dropped slot.",
                            follow.get("resnapshots"))
        yield from _counter("partialflow_follow_retries",
                            "Reconnects to the upstream after a failure.", follow.get("retries"))

    def _spark(self, spark: dict) -> Iterator[Metric]:
        """The Spark driver's state (spark_supervisor.py): alert on partialflow_spark_up
        being 0 for longer than a restart takes."""
        if "up" not in spark:
            return
        yield GaugeMetricFamily(
            "partialflow_spark_up",
            "1 while a live Spark session serves misses, query() and loads; 0 while it is "
            "being restarted.",
            value=1.0 if spark["up"] else 0.0,
        )
        yield from _gauge("partialflow_spark_down_seconds",
                          "Seconds Spark has been down (0 while up).", spark.get("down_seconds"))
        yield from _counter("partialflow_spark_restarts",
                            "Spark sessions rebuilt after the driver died.", spark.get("restarts"))
        yield from _counter("partialflow_spark_restart_failures",
                            "Attempts to rebuild the Spark session that failed.",
                            spark.get("restart_failures"))

    def _views(self, views: dict) -> Iterator[Metric]:
        for key, (name, doc) in _VIEW_COUNTERS.items():
            family = CounterMetricFamily(name, doc, labels=["view"])
            for view, figures in sorted(views.items()):
                if (v := _num(figures.get(key))) is not None:
                    family.add_metric([view], v)
            yield family
        for key, (name, doc) in _VIEW_GAUGES.items():
            gauge = GaugeMetricFamily(name, doc, labels=["view"])
            for view, figures in sorted(views.items()):
                if (v := _num(figures.get(key))) is not None:
                    gauge.add_metric([view], v)
            yield gauge

    def _lsns(self, stats: dict) -> Iterator[Metric]:
        written = _num(stats.get("lsn"))
        applied = _num(stats.get("applied_lsn"))
        yield from _gauge("partialflow_lsn_written", "Last durable write's LSN.", written)
        yield from _gauge("partialflow_lsn_applied", "Last LSN the dataflow has applied.", applied)
        flushed = (stats.get("storage") or {}).get("flushed_lsn")
        yield from _gauge("partialflow_lsn_flushed", "Last LSN flushed to Parquet.", flushed)
        if written is not None and applied is not None:
            yield GaugeMetricFamily(
                "partialflow_freshness_lag_lsns",
                "Writes durable but not yet reflected in views (written - applied LSN).",
                value=max(0.0, written - applied),
            )

    def _memory(self, stats: dict) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "partialflow_state_bytes", "Bytes of dataflow state by kind.", labels=["kind"]
        )
        for kind in ("partial", "full"):
            if (v := _num(stats.get(f"{kind}_bytes"))) is not None:
                family.add_metric([kind], v)
        yield family
        yield from _gauge(
            "partialflow_memory_limit_bytes",
            "State memory limit (0: none).",
            stats.get("memory_limit") or 0,
        )

    def _writes(self, writes: dict) -> Iterator[Metric]:
        yield from _counter("partialflow_writes", "Acknowledged writes.", writes.get("writes"))
        rows = CounterMetricFamily(
            "partialflow_rows_written", "Rows in acknowledged writes.", labels=["op"]
        )
        for op, key in (("insert", "rows_inserted"), ("delete", "rows_deleted")):
            if (v := _num(writes.get(key))) is not None:
                rows.add_metric([op], v)
        yield rows
        yield from _counter("partialflow_bulk_loads", "Completed bulk loads.", writes.get("loads"))
        yield from _counter(
            "partialflow_bulk_load_rows", "Rows written by bulk loads.", writes.get("load_rows")
        )

    def _storage(self, storage: dict) -> Iterator[Metric]:
        for key, (name, doc, counter) in _STORAGE.items():
            yield from (_counter if counter else _gauge)(name, doc, storage.get(key))

    def _dataflow(self, stats: dict) -> Iterator[Metric]:
        yield from _counter(
            "partialflow_spark_jobs", "Spark jobs run for upqueries.", stats.get("spark_jobs")
        )
        busy = _num(stats.get("busy_ns"))
        if busy is not None:
            yield CounterMetricFamily(
                "partialflow_executor_busy_seconds",
                "Time the executor spent on packets.",
                value=busy / 1e9,
            )
        # Footer estimates of what upqueries' key filters can touch (not Spark's input
        # metrics): divide by partialflow_upquery_scans for a per-miss figure.
        scan = stats.get("upquery_scan") or {}
        for key, doc in (
            ("upqueries", "Upqueries whose base-segment footprint was estimated."),
            ("row_groups_scanned", "Parquet row groups upquery filters could not skip "
                                   "(footer min/max estimate)."),
            ("row_groups_total", "Parquet row groups of the segments upqueries scanned."),
            ("bytes_scanned", "Compressed bytes of the row groups upquery filters could not "
                              "skip (footer estimate)."),
        ):
            # (A counter's name gets "_total" appended: row_groups_total would read
            # ..._total_total.)
            name = {"upqueries": "partialflow_upquery_scans",
                    "row_groups_total": "partialflow_upquery_row_groups_in_segments"}.get(
                key, f"partialflow_upquery_{key}")
            yield from _counter(name, doc, scan.get(key))
        yield from _gauge(
            "partialflow_state_anomalies",
            "State consistency anomalies seen.",
            stats.get("state_anomalies"),
        )
        events = CounterMetricFamily(
            "partialflow_dataflow_events",
            "Executor events: writes_applied, fills, evictions, memory_evictions, join_misses...",
            labels=["event"],
        )
        for key, value in sorted(stats.items()):
            num = _num(value)
            # (The disk tier's figures, tier_*, are metrics of their own: ``_tier``.)
            if (key not in _NOT_EVENTS and num is not None and key != "applied_lsn"
                    and not key.startswith("tier_")):
                events.add_metric([key], num)
        yield events


    def _verifier(self, verifier: dict) -> Iterator[Metric]:
        # The background read sampler (serve --verify-sample, server/verifier.py).
        for key, doc in (
            ("checks", "Sampled reads re-checked against Spark at their LSN."),
            ("mismatches", "Sampled reads whose rows differed from Spark's at their LSN."),
            ("dropped", "Sampled reads dropped because the check queue was full."),
            ("errors", "Sampled reads that could not be checked (Spark failed)."),
        ):
            yield from _counter(f"partialflow_verifier_{key}", doc, verifier.get(key))


    def _checkpoint(self, ck: dict) -> Iterator[Metric]:
        # Dataflow checkpoints (serve --checkpoint-interval, server/dataflow/checkpointer.py).
        for key, doc in (
            ("taken", "Checkpoints written since start."),
            ("failed", "Checkpoints that failed since start."),
            ("compactions", "Checkpoint chains merged into one full file."),
        ):
            yield from _counter(f"partialflow_checkpoints_{key}", doc, ck.get(key))
        for key, doc in (
            ("last_lsn", "LSN of the newest checkpoint."),
            ("last_age_s", "Seconds since the newest checkpoint was written."),
            ("last_duration_s", "Seconds the newest checkpoint took, cut to manifest."),
            ("last_bytes", "Bytes the newest checkpoint wrote (its own file)."),
            ("chain_bytes", "Bytes recovery would read (the newest checkpoint's chain)."),
            ("recovery_s", "Seconds recovery took at start."),
            ("recovered_keys", "Keys restored from a checkpoint at start."),
            ("replayed_writes", "Logged writes replayed after the checkpoint at start."),
        ):
            yield from _gauge(f"partialflow_checkpoint_{key}", doc, ck.get(key))


    def _tier(self, stats: dict) -> Iterator[Metric]:
        # The disk tier (serve --disk-limit, server/dataflow/tier.py); absent without one.
        if "tier_limit" not in stats:
            return
        for key, doc in (
            ("limit", "Bytes the disk tier may hold (--disk-limit)."),
            ("bytes", "Bytes of keys shelved in the disk tier."),
            ("keys", "Keys shelved in the disk tier."),
        ):
            yield from _gauge(f"partialflow_tier_{key}", doc, stats.get(f"tier_{key}"))
        yield GaugeMetricFamily("partialflow_tier_broken",
                                "1 once the disk tier failed (its keys became holes; see the "
                                "log).", value=1.0 if stats.get("tier_broken") else 0.0)
        for key, doc in (
            ("shelved", "Keys moved from memory to the disk tier."),
            ("unshelved", "Keys brought back from the disk tier (read or written)."),
            ("read", "Keys readers read from the disk tier themselves (not brought back "
                     "first)."),
            ("evictions", "Shelved keys made holes by the disk limit."),
        ):
            yield from _counter(f"partialflow_tier_{key}", doc, stats.get(f"tier_{key}"))


class Metrics:
    """One server's metrics: its own registry (so several servers can share a process), the
    stats collector, the upquery histogram, and the HTTP endpoint once started."""

    def __init__(self, engine: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(EngineCollector(engine))
        self.upquery_seconds = Histogram(
            "partialflow_upquery_duration_seconds",
            "Time from issuing an upquery to its reply being applied.",
            labelnames=["view", "outcome"],
            buckets=UPQUERY_BUCKETS,
            registry=self.registry,
        )
        self._httpd: Any = None
        self._executor = getattr(getattr(engine, "dataflow", None), "executor", None)
        if self._executor is not None and hasattr(self._executor, "observers"):
            self._executor.observers.append(self.observe)

    def observe(self, event: str, fields: dict) -> None:
        """Executor hook (runs on the executor thread: keep it cheap)."""
        if event == "upquery":
            outcome = "ok" if fields.get("ok", True) else "error"
            self.upquery_seconds.labels(fields.get("view") or "", outcome).observe(
                float(fields.get("ms", 0.0)) / 1000.0
            )

    def serve(
        self, host: str, port: int, certfile: str | None = None, keyfile: str | None = None
    ) -> int:
        """Serve ``/metrics`` on ``host:port`` (HTTPS with a cert and key); returns the port."""
        try:
            self._httpd, _ = start_http_server(
                port, addr=host, registry=self.registry, certfile=certfile, keyfile=keyfile
            )
        except OSError as err:
            raise Unavailable(f"cannot serve metrics on {host}:{port}: {err.strerror}") from None
        return int(self._httpd.server_port)

    def close(self) -> None:
        """Stop the HTTP endpoint and unhook from the executor (idempotent)."""
        observers = getattr(self._executor, "observers", None)
        if observers is not None and self.observe in observers:
            observers.remove(self.observe)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
