"""The one place that builds the Spark session (and tears a dead one down: ``teardown``,
used by ``spark_supervisor`` when it replaces a driver that died).

Every upquery, bulk load, compaction and direct query runs on this session. Settings are
chosen for a small embedded default (local master, UI off, few shuffle partitions); any
Spark master works: ``local[N]``, a cluster (``spark://``, ``yarn``, ``k8s://``), whose
executors then run every job, or Spark Connect (``sc://``).

``conf`` (``--spark-conf KEY=VALUE``) is passed through after the defaults, so it can
override them; Hadoop options for S3 or HDFS go as ``spark.hadoop.*``. Through Spark
Connect only runtime SQL settings can be changed by a client: the session's JVM belongs to
the Connect server, so anything else (``spark.hadoop.*``, memory, the UI) is refused at
start-up with the reason, and must be given to the Connect server itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import SparkSession

from partialflow.server.errors import InvalidArgument, Unavailable

log = logging.getLogger(__name__)
_lock = threading.Lock()

# A JVM that fails to start has been seen as JAVA_GATEWAY_EXITED on a busy machine (the
# gateway's start-up outran its timeout); a second try usually works.
GATEWAY_ATTEMPTS = 3
_GATEWAY_BACKOFF = 2.0  # seconds before the second try, doubled after each failure

# Session (SQL) settings: a Spark Connect client may set these too.
_SQL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    # Views are maintained in Python with SQL's NULL-on-error arithmetic; run Spark the
    # same way so upquery replies and incremental updates agree exactly.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Small scans dominate (key-filtered upqueries); don't adaptively re-plan them into
    # many stages.
    "spark.sql.adaptive.enabled": "false",
    # An IN list of two or more values becomes an InSet, whose values generated code reads
    # from a set object instead of inlining them: an upquery's key filter (``IN (k, NULL)``,
    # ``upquery/plan_cache.py``) then compiles to the same code for every key, and Spark's
    # code cache spares each miss a Janino compile. The switch form would inline them.
    "spark.sql.optimizer.inSetConversionThreshold": "1",
    "spark.sql.optimizer.inSetSwitchThreshold": "0",
}


def _driver_defaults() -> dict[str, str]:
    """Settings of the driver's own JVM (classic Spark only)."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": "2",
        "spark.driver.memory": os.environ.get("PARTIALFLOW_SPARK_DRIVER_MEMORY", "2g"),
        # PySpark 4 records the Python call site of every Column function (F.col, select,
        # ...) for error messages: several Py4J round trips and a stack walk per call. An
        # upquery builds its plan from dozens of such calls, and profiling a cold read
        # showed most of its time there rather than in the Spark job; the call sites are
        # never shown to users. A static setting: it can only be given before the session
        # starts, so a Spark Connect client cannot set it (Connect refused it at every
        # start, with a warning), and through Connect there are no Py4J round trips to save.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }


def _gateway_exited(err: BaseException) -> bool:
    condition = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
    try:
        name = condition() if condition else None
    except Exception:  # noqa: BLE001 - an error without a class is simply not this one
        name = None
    return name == "JAVA_GATEWAY_EXITED" or "JAVA_GATEWAY_EXITED" in str(err)


def is_connect(master: str) -> bool:
    """True for a Spark Connect address (``sc://host:port``)."""
    return master.startswith("sc://")


def spark_session(
    master: str = "local[2]",
    *,
    app_name: str = "partialflow",
    conf: Sequence[tuple[str, str]] = (),
) -> SparkSession:
    """Return the process-wide Spark session, creating it on first use."""
    with _lock:
        # Executors that run Python must run this interpreter (the one with partialflow's
        # dependencies), not whatever ``python3`` is on their PATH. A user's value wins:
        # on other machines the path may differ.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if is_connect(master):
            return _connect_session(master, app_name, conf)
        builder = SparkSession.builder.appName(app_name).master(master)
        for key, value in {**_driver_defaults(), **_SQL_DEFAULTS, **dict(conf)}.items():
            builder = builder.config(key, value)
        session = _start(builder)
        session.sparkContext.setLogLevel("ERROR")
        return session


def _connect_session(
    master: str, app_name: str, conf: Sequence[tuple[str, str]]
) -> SparkSession:
    """A Spark Connect session with the SQL defaults and ``conf`` set on it; a setting the
    Connect server does not let a client change is refused, naming it."""
    try:
        session = _start(SparkSession.builder.appName(app_name).remote(master))
    except ImportError as err:  # pyspark's check of the Connect client's packages
        raise Unavailable(
            f"Spark Connect ({master}) needs packages that are not installed: "
            f"{str(err).splitlines()[0]} (pip install 'partialflow[connect]')"
        ) from None
    _short_retries(session)
    for key, value in {**_SQL_DEFAULTS, **dict(conf)}.items():
        try:
            session.conf.set(key, value)
        except Exception as err:  # noqa: BLE001 - the server's refusal, reworded once
            if key in dict(conf):
                raise InvalidArgument(
                    f"--spark-conf {key} cannot be set through Spark Connect ({master}): it "
                    "configures the Connect server's own Spark, which a client cannot change; "
                    "give it to the Connect server (start-connect-server.sh --conf "
                    f"{key}=...)"
                ) from None
            log.warning("Spark Connect refused %s=%s: %s", key, value, str(err).splitlines()[0])
    return session


# The Connect client retries a call to an unreachable server for at least 10 minutes by
# default: a read waiting on that would time out instead of failing with UNAVAILABLE, and
# the supervisor could not tell a restarted Connect server from a slow one. These retries
# span about 10 s (50 ms growing 4x per try, at most 5 s apart), enough for a blip.
CONNECT_RETRIES = 5
CONNECT_MAX_BACKOFF_MS = 5000


def _short_retries(session: SparkSession) -> None:
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        session.client.set_retry_policies(
            [DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=CONNECT_MAX_BACKOFF_MS)])
    except Exception:  # noqa: BLE001 - another client version: keep its own retries
        log.warning("could not shorten the Spark Connect client's retries", exc_info=True)


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


# -- tearing a dead session down (spark_supervisor.py replaces it) ------------------------
STOP_TIMEOUT = 10.0  # waited for an old session's stop() before abandoning it


def bounded(fn: Callable[[], Any], timeout: float) -> bool:
    """Run ``fn`` in a thread for at most ``timeout`` seconds; True if it returned."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - stopping a dead session fails; that is fine
            log.debug("stopping the old Spark session: %s", e)
        finally:
            done.set()

    threading.Thread(target=run, name="spark-stop", daemon=True).start()
    return done.wait(timeout)


def teardown(session: Any, gateway: Any, *, connect: bool) -> None:
    """Drop a dead (or unresponsive) session without waiting on it, and clear PySpark's
    process-wide references to it so the next builder starts a new driver."""
    if connect:
        bounded(session.stop, STOP_TIMEOUT)
        with contextlib.suppress(Exception):  # ImportError too: no Connect client, no state
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            if ConnectSession._default_session is session:
                ConnectSession._default_session = None
            active = getattr(ConnectSession._active_session, "session", None)
            if active is session:
                ConnectSession._active_session.session = None
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    # Not session.stop(): on a dead gateway it fails half-way, and it clears PySpark's
    # process-wide session and calls the JVM through the process-wide gateway, which may
    # already be a new driver's (another supervisor adopting the same session).
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()  # unresponsive rather than dead: nothing would ever answer a stop()
    sc = session.sparkContext
    sc._jsc = None  # a later stop() of this context is then a no-op
    with contextlib.suppress(Exception):
        if sc._accumulatorServer is not None:
            sc._accumulatorServer.shutdown()
            sc._accumulatorServer = None
    with SparkContext._lock:
        # Only this session's: another supervisor may have put a new one in place already.
        if SparkContext._active_spark_context is sc:
            SparkContext._active_spark_context = None
        if gateway is not None and SparkContext._gateway is gateway:
            SparkContext._gateway = None
            SparkContext._jvm = None
    if SparkSession._instantiatedSession is session:
        SparkSession._instantiatedSession = None
    if SparkSession._activeSession is session:
        SparkSession._activeSession = None
    with contextlib.suppress(Exception):
        if SQLContext._instantiatedContext is not None and (
            SQLContext._instantiatedContext.sparkSession is session
        ):
            SQLContext._instantiatedContext = None
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.close()  # its sockets to the dead JVM
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.wait(timeout=STOP_TIMEOUT)
