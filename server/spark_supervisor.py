"""The server's Spark session, watched and replaced when it dies.

A Spark driver can go away under a running server: the OOM killer ends the driver JVM
(local or standalone master), a Spark Connect server restarts, or the JVM stops
answering. PySpark never recovers from that by itself: the dead Py4J gateway stays the
process-wide one, so every later call fails with ``ConnectionRefusedError`` for as long
as the process lives. ``SparkSupervisor`` owns the session instead:

- It stands in for the ``SparkSession`` (attribute access is forwarded to the current
  session), so storage, the upquery runner and the bulk loader keep calling ``spark.read``
  and ``spark.sql`` as before and reach whichever session is current.
- A watchdog thread notices a dead driver (the JVM process exited, or a ping that fails or
  does not answer within ``PING_TIMEOUT``), and so does any Spark call that fails without
  an answer from Spark (``failure``). Then Spark is *down*: the old session is torn down
  without waiting on the dead gateway, a new one is built with the same master and
  settings, retried with backoff (``RESTART_BACKOFF``), and the listeners are told (the
  plan cache drops its compiled plans, the health service flips).
- While Spark is down every use of the session raises ``SparkDown`` (an ``Unavailable``):
  a miss, ``query()``, a load and a compaction fail at once with a message saying Spark is
  being restarted, and a retry works once it is back. ``guard`` turns the failures of work
  that was running when Spark died (or that ran on a session since replaced) into the
  same error, so no ``ConnectionRefusedError`` or Py4J error ever reaches a client.

``generation`` counts sessions: anything built from a session (a compiled plan) is only
valid for the generation it was built on.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from partialflow.server.errors import PartialflowError, Unavailable
from partialflow.server.spark import (
    STOP_TIMEOUT,
    bounded,
    is_connect,
    spark_session,
    teardown,
)

log = logging.getLogger("partialflow.spark")

WATCH_INTERVAL = 0.5  # seconds between checks that the driver process is alive
PING_INTERVAL = 5.0  # seconds between pings of the driver through its gateway
# A ping that has not answered by then means the driver is unresponsive. Generous: a
# driver in a long garbage collection on a busy machine is slow, not dead, and a restart
# throws away every job in flight.
PING_TIMEOUT = 30.0
# A check after a failed call: a dead driver refuses at once. One that is merely slow to
# answer is not declared dead here (only the watchdog's longer PING_TIMEOUT does that):
# the request is told to retry, and Spark is left alone.
PROBE_TIMEOUT = 5.0
RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # seconds before each further attempt


_SILENT = "Spark did not answer a ping within"


class SparkDown(Unavailable):
    """Spark is down (and being restarted): the request needs Spark; retry later."""


def _utc(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_GRPC_DETAILS = re.compile(r'status = StatusCode\.(\w+)\s+details = "([^"]*)"')


def _first_line(err: BaseException) -> str:
    """One line saying what failed; for a gRPC error (Spark Connect) its status and
    details, which its first line ("<_MultiThreadedRendezvous of RPC that terminated
    with:") does not say."""
    text = str(err).strip()
    found = _GRPC_DETAILS.search(text)
    if found:
        return f"{found.group(1)}: {found.group(2)}"[:300]
    return text.splitlines()[0][:300] if text else type(err).__name__


def _answered_by_spark(err: BaseException) -> bool:
    """True for an error Spark itself raised (an analysis error, a failed task): proof the
    driver is alive, so the error is the request's own."""
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors.exceptions.captured import CapturedException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    if isinstance(err, (Py4JJavaError, CapturedException)):
        return True
    # A Spark Connect server's own errors arrive converted to the same exception classes.
    name = type(err).__module__
    return name.startswith("pyspark.errors.exceptions.connect") and not _grpc_unavailable(err)


def _grpc_unavailable(err: BaseException) -> bool:
    text = str(err)
    return "UNAVAILABLE" in text or "INVALID_HANDLE" in text or "Connection refused" in text


class SparkSupervisor:
    """The current Spark session, its liveness, and its replacement (module docstring)."""

    def __init__(
        self,
        master: str = "local[2]",
        conf: Sequence[tuple[str, str]] = (),
        *,
        app_name: str = "partialflow",
        session: Any = None,
        build: Callable[..., Any] = spark_session,
        ping_interval: float = PING_INTERVAL,
        ping_timeout: float = PING_TIMEOUT,
        backoff: Sequence[float] = RESTART_BACKOFF,
    ) -> None:
        self.master = master
        self.conf = tuple(conf)
        self.app_name = app_name
        self._build = build
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.backoff = tuple(backoff)
        self._cv = threading.Condition()
        self._session = session if session is not None else self._new_session()
        self._gateway = _gateway_of(self._session)
        self.generation = 1
        self._down_since: float | None = None  # wall clock, for stats and messages
        self._down_mono: float | None = None
        self._reason = ""
        self._restarts = 0
        self._restart_failures = 0
        self._last_down: dict[str, Any] | None = None  # the last outage, once over
        self._listeners: list[Callable[[bool], None]] = []
        self._restarted: list[Callable[[int], None]] = []
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- the session ---------------------------------------------------------------------
    def _new_session(self) -> Any:
        return self._build(self.master, app_name=self.app_name, conf=self.conf)

    @property
    def session(self) -> Any:
        """The live session; SparkDown while there is none."""
        with self._cv:
            if self._down_since is None:
                return self._session
        raise self.down_error()

    def __getattr__(self, name: str) -> Any:
        # Only reached for what this class lacks: the session's own API (read, sql, ...).
        if name.startswith("__") or name in ("_session", "_cv", "_down_since"):
            raise AttributeError(name)
        return getattr(self.session, name)

    @property
    def up(self) -> bool:
        with self._cv:
            return self._down_since is None

    def down_error(self) -> SparkDown:
        with self._cv:
            since, reason = self._down_since, self._reason
        when = f" since {_utc(since)}" if since is not None else ""
        return SparkDown(
            f"Spark is down{when} ({reason}) and is being restarted; retry shortly "
            "(lookups of filled keys and writes still work)"
        )

    # -- listeners -----------------------------------------------------------------------
    def add_listener(self, fn: Callable[[bool], None]) -> None:
        """``fn(up)`` on every change between up and down (not called for the current one)."""
        with self._cv:
            self._listeners.append(fn)

    def on_restart(self, fn: Callable[[int], None]) -> None:
        """``fn(generation)`` once a new session is in place: drop what the old one built."""
        with self._cv:
            self._restarted.append(fn)

    def _tell(self, fns: list[Callable[..., None]], arg: Any) -> None:
        for fn in fns:
            try:
                fn(arg)
            except Exception:  # one listener's failure must not stop recovery
                log.exception("Spark listener failed")

    # -- failures --------------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self) -> Iterator[Any]:
        """Run Spark work: yields the session; a failure caused by Spark dying (or by the
        session being replaced meanwhile) leaves as SparkDown, any other as it was."""
        generation = self.generation
        session = self.session
        try:
            yield session
        except Exception as err:
            down = self.failure(err, generation)
            if down is None:
                raise
            raise down from err

    def failure(self, err: BaseException, generation: int | None = None) -> SparkDown | None:
        """SparkDown if ``err`` (raised by work begun on ``generation``) comes from Spark
        being down or replaced; None if Spark is alive and the error is the work's own."""
        if isinstance(err, SparkDown):
            return err
        if (isinstance(err, PartialflowError) or _answered_by_spark(err)) and (
                generation is None or generation == self.generation):
            return None
        if self._closed:  # the server is stopping and has stopped Spark
            return SparkDown("Spark was stopped: the server is shutting down")
        if not self.up:
            return self.down_error()
        if generation is not None and generation != self.generation:
            return SparkDown(
                "Spark was restarted while this request ran on the previous session; retry"
            )
        reason = self._probe(PROBE_TIMEOUT)
        if reason is None:
            return None
        if reason.startswith(_SILENT):
            return SparkDown(
                f"Spark is not answering ({reason}); retry shortly: {_first_line(err)}")
        self.mark_down(f"{reason}; a request failed with: {_first_line(err)}")
        return self.down_error()

    def mark_down(self, reason: str) -> None:
        """Spark is down: fail what needs it and have the watchdog restart it."""
        with self._cv:
            if self._down_since is not None or self._closed:
                return
            self._down_since = time.time()
            self._down_mono = time.monotonic()
            self._reason = reason
            listeners = list(self._listeners)
            self._cv.notify_all()
        log.error("Spark is down: %s; restarting it", reason)
        self._tell(listeners, False)

    def _probe(self, timeout: float) -> str | None:
        """Why the current session is dead or unresponsive, or None if it answers."""
        with self._cv:
            session, proc = self._session, getattr(self._gateway, "proc", None)
        if proc is not None and proc.poll() is not None:
            return f"the Spark driver JVM exited (status {proc.returncode})"
        box: dict[str, Any] = {}

        def ping() -> None:
            try:
                if is_connect(self.master):
                    session.range(1).collect()
                else:
                    session.sparkContext._jvm.java.lang.System.currentTimeMillis()
                box["ok"] = True
            except BaseException as e:  # noqa: BLE001 - the answer is the point
                box["error"] = e

        t = threading.Thread(target=ping, name="spark-ping", daemon=True)
        t.start()
        t.join(timeout)
        if "ok" in box:
            return None
        if proc is not None:  # a killed JVM's socket closes a moment before it is reaped
            with contextlib.suppress(Exception):
                proc.wait(timeout=1.0)
            if proc.poll() is not None:
                return f"the Spark driver JVM exited (status {proc.returncode})"
        if "error" in box:
            return f"Spark does not answer: {_first_line(box['error'])}"
        return f"{_SILENT} {timeout:g} s"

    # -- the watchdog and restarts -----------------------------------------------------
    def start(self) -> None:
        """Start the watchdog thread (idempotent)."""
        with self._cv:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._watch, name="spark-watchdog",
                                            daemon=True)
        self._thread.start()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on close or a change; True if closed."""
        with self._cv:
            if not self._closed:
                self._cv.wait(seconds)
            return self._closed

    def _watch(self) -> None:
        next_ping = time.monotonic() + self.ping_interval
        while True:
            if not self.up:
                self._restart()
                next_ping = time.monotonic() + self.ping_interval
            if self._wait(WATCH_INTERVAL):
                return
            if not self.up:
                continue
            with self._cv:
                proc = getattr(self._gateway, "proc", None)
                session = self._session
            if _stopped(session):
                # Its owner stopped it (a test's shared session at the end of the run):
                # not a death, nothing to replace.
                log.debug("the Spark session was stopped by its owner; not watching it")
                return
            if proc is not None and proc.poll() is not None:
                self.mark_down(f"the Spark driver JVM exited (status {proc.returncode})")
            elif time.monotonic() >= next_ping:
                reason = self._probe(self.ping_timeout)
                if reason is not None and not self._closed:
                    self.mark_down(reason)
                next_ping = time.monotonic() + self.ping_interval

    def _restart(self) -> None:
        """Tear the dead session down and build new ones until one answers."""
        attempt = 0
        while True:
            with self._cv:
                if self._closed:
                    return
                old, gateway = self._session, self._gateway
            teardown(old, gateway, connect=is_connect(self.master))
            new = None
            try:
                new = self._new_session()
                new.range(1).collect()  # answers a job, not only a handshake
            except Exception as e:  # noqa: BLE001 - retried below
                if new is not None:  # half alive: the next attempt must not reuse it
                    teardown(new, _gateway_of(new), connect=is_connect(self.master))
                delay = self.backoff[min(attempt, len(self.backoff) - 1)]
                attempt += 1
                with self._cv:
                    self._restart_failures += 1
                log.warning("Spark restart attempt %d failed (%s); next in %.0f s",
                            attempt, _first_line(e), delay)
                if self._wait(delay):
                    return
                continue
            with self._cv:
                assert self._down_since is not None and self._down_mono is not None
                seconds = time.monotonic() - self._down_mono
                self._last_down = {"since": _utc(self._down_since), "seconds": round(seconds, 1),
                                   "reason": self._reason}
                self._session, self._gateway = new, _gateway_of(new)
                self.generation += 1
                self._restarts += 1
                self._down_since = self._down_mono = None
                generation = self.generation
                restarted, listeners = list(self._restarted), list(self._listeners)
            log.warning("Spark is back after %.1f s (restart %d, %d failed attempts)",
                        seconds, self._restarts, attempt)
            self._tell(restarted, generation)
            self._tell(listeners, True)
            return

    # -- figures and shutdown -------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """``stats()["spark"]``: up or down, since when and why, restarts so far."""
        with self._cv:
            down = self._down_since is not None
            out: dict[str, Any] = {
                "master": self.master,
                "up": not down,
                "down_since": _utc(self._down_since) if self._down_since is not None else None,
                "down_seconds": round(time.monotonic() - self._down_mono, 1)
                if self._down_mono is not None else 0.0,
                "down_reason": self._reason if down else None,
                "restarts": self._restarts,
                "restart_failures": self._restart_failures,
                "generation": self.generation,
            }
            if self._last_down is not None:
                out["last_outage"] = dict(self._last_down)
            return out

    def close(self) -> None:
        """Stop watching (the session stays: ``stop`` ends it too)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=STOP_TIMEOUT)

    def stop(self) -> None:
        """Stop watching and stop the session."""
        self.close()
        with self._cv:
            session = self._session
        bounded(session.stop, STOP_TIMEOUT)


def _stopped(session: Any) -> bool:
    """True for a classic session whose context was stopped (``stop()``): ``_jsc`` is
    cleared then, and only then."""
    try:
        return session.sparkContext._jsc is None
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext, no such state
        return False


def _gateway_of(session: Any) -> Any:
    """The Py4J gateway a classic session was made on (PySpark keeps only the current one,
    process-wide); None under Spark Connect."""
    try:
        return session.sparkContext._gateway
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return None


def supervised(spark: Any, master: str, conf: Sequence[tuple[str, str]]) -> SparkSupervisor:
    """``spark`` if it is a supervisor already, else a supervisor adopting that session
    (restarted, if it dies, with ``master`` and ``conf``)."""
    if isinstance(spark, SparkSupervisor):
        return spark
    return SparkSupervisor(master, conf, session=spark)


@contextlib.contextmanager
def spark_guard(spark: Any) -> Iterator[Any]:
    """``spark.guard()`` for a supervisor; for a bare session (a test's own) the session
    as it is."""
    if isinstance(spark, SparkSupervisor):
        with spark.guard() as session:
            yield session
    else:
        yield spark


def spark_failure(spark: Any, err: BaseException, generation: int | None) -> SparkDown | None:
    """``spark.failure(err, generation)`` for a supervisor; None for a bare session."""
    if isinstance(spark, SparkSupervisor):
        return spark.failure(err, generation)
    return None


def spark_up(spark: Any) -> bool:
    """False while a supervisor's Spark is down; a bare session counts as up."""
    return spark.up if isinstance(spark, SparkSupervisor) else True


def generation_of(spark: Any) -> int:
    return spark.generation if isinstance(spark, SparkSupervisor) else 0
