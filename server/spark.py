"""The one place that builds the Spark session.

Every upquery, bulk load, compaction and direct query runs on this session. Settings are
chosen for a small embedded default (local master, UI off, few shuffle partitions); any
Spark master works, including a cluster or Spark Connect (``sc://``).
"""

from __future__ import annotations

import os
import threading

from pyspark.sql import SparkSession

_lock = threading.Lock()


def spark_session(master: str = "local[2]", *, app_name: str = "partialflow") -> SparkSession:
    """Return the process-wide Spark session, creating it on first use."""
    with _lock:
        # Quiet Spark's own console banner; errors still surface as exceptions.
        os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
        builder = SparkSession.builder.appName(app_name)
        if master.startswith("sc://"):
            builder = builder.remote(master)
        else:
            builder = builder.master(master)
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            # Views are maintained in Python with SQL's NULL-on-error arithmetic; run Spark
            # the same way so upquery replies and incremental updates agree exactly.
            .config("spark.sql.ansi.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # Small scans dominate (key-filtered upqueries); don't broadcast-timeout or
            # adaptively re-plan them into many stages.
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.driver.memory", os.environ.get("PARTIALFLOW_SPARK_DRIVER_MEMORY", "2g"))
        )
        session = builder.getOrCreate()
        if not master.startswith("sc://"):
            session.sparkContext.setLogLevel("ERROR")
        return session
