"""The one place that builds the Spark session.

Every upquery, bulk load, compaction and direct query runs on this session. Settings are
chosen for a small embedded default (local master, UI off, few shuffle partitions); any
Spark master works, including a cluster or Spark Connect (``sc://``).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from pyspark.sql import SparkSession

from partialflow.server.errors import Unavailable

log = logging.getLogger(__name__)
_lock = threading.Lock()

# A JVM that fails to start has been seen as JAVA_GATEWAY_EXITED on a busy machine (the
# gateway's start-up outran its timeout); a second try usually works.
GATEWAY_ATTEMPTS = 3
_GATEWAY_BACKOFF = 2.0  # seconds before the second try, doubled after each failure


def _gateway_exited(err: BaseException) -> bool:
    condition = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
    try:
        name = condition() if condition else None
    except Exception:  # noqa: BLE001 - an error without a class is simply not this one
        name = None
    return name == "JAVA_GATEWAY_EXITED" or "JAVA_GATEWAY_EXITED" in str(err)


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
        session = _start(builder)
        if not master.startswith("sc://"):
            session.sparkContext.setLogLevel("ERROR")
        return session


def _start(builder: SparkSession.Builder) -> SparkSession:
    """``builder.getOrCreate()``, retried when the Java gateway exits during start-up;
    after the last try, Unavailable with one line that says what to check."""
    delay = _GATEWAY_BACKOFF
    for attempt in range(1, GATEWAY_ATTEMPTS + 1):
        try:
            return builder.getOrCreate()
        except Exception as err:
            if not _gateway_exited(err):
                raise
            if attempt == GATEWAY_ATTEMPTS:
                break
            log.warning(
                "Spark's Java gateway exited during start-up (attempt %d of %d); retrying in %.0f "
                "s",
                attempt,
                GATEWAY_ATTEMPTS,
                delay,
            )
            time.sleep(delay)
            delay *= 2
    raise Unavailable(
        f"Spark did not start: its Java gateway exited {GATEWAY_ATTEMPTS} times "
        "(JAVA_GATEWAY_EXITED). Check that `java -version` runs Java 17 (or set JAVA_HOME), "
        "that there is memory for the driver (PARTIALFLOW_SPARK_DRIVER_MEMORY, default 2g), "
        "and the Java errors printed above"
    )
