"""Server assembly: ``create_server`` wires engine, service, health and reflection;
``serve`` runs one until SIGTERM/SIGINT.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import sys
import threading
import weakref
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from partialflow.server.app.auth import TokenAuthInterceptor, server_credentials
from partialflow.server.app.logs import setup_logging
from partialflow.server.app.metrics import Metrics
from partialflow.server.app.service import SERVICE_NAME, PartialflowServicer, add_to_server
from partialflow.server.app.standard import (
    HealthServicer,
    add_health,
    add_reflection,
    watch_spark,
)
from partialflow.server.app.testhooks import add_test_hooks
from partialflow.server.config import Config
from partialflow.server.engine import Engine
from partialflow.server.errors import PartialflowError, Unavailable
from partialflow.server.pgwire import PgListener

log = logging.getLogger(__name__)


@dataclass
class _Wiring:
    engine: Engine
    health: HealthServicer
    owns_engine: bool
    metrics: Metrics | None = None
    metrics_port: int | None = None
    pg: PgListener | None = None
    follower: Any = None


# What stop_server needs to know about each server create_server made.
_WIRING: weakref.WeakKeyDictionary[grpc.Server, _Wiring] = weakref.WeakKeyDictionary()


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _bind(server: grpc.Server, config: Config) -> int:
    address = _address(config.host, config.port)
    try:
        if config.tls:
            # Config refuses a certificate without its key and the reverse.
            assert config.tls_cert is not None and config.tls_key is not None
            credentials = server_credentials(config.tls_cert, config.tls_key)
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # grpc raises on failure in recent releases
        port = 0
    if port == 0:  # older releases return 0
        # gRPC's own text ("Failed to bind ...; set GRPC_VERBOSITY=debug ...") says less.
        raise Unavailable(
            f"cannot listen on {address}: the port is in use, or the host is not an address "
            "of this machine (--host, --port; --port 0 picks a free port)"
        )
    return port


# The cyclic garbage collector's first threshold (CPython's default is 700). A server holds
# millions of long-lived objects (its states), and a lookup of many keys allocates
# thousands of short-lived ones: at 700, collections ran during nearly every such lookup,
# promoting what was alive at that instant, which made full collections of the whole heap
# (hundreds of ms each) run every second or two under batch reads. Measured in-process
# with 1000-key lookups of a 50k-key view: full collections went from 2 per 200 calls
# (p99 222 ms) to none (p99 43 ms). Objects are still freed by reference counting at once;
# only cycles wait longer.
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Raise the collector's first threshold to ``GC_YOUNG_THRESHOLD`` (never lower it)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def create_server(
    config: Config, *, engine: Engine | None = None, spark: Any = None
) -> tuple[grpc.Server, int]:
    """Build a bound, not yet started server; returns it and the port it bound.

    The port is bound first, so a taken address fails fast (Unavailable) before Spark
    starts. Without ``engine`` one is made from ``config`` (starting Spark unless ``spark``
    is given) and is closed by ``stop_server``; a given engine stays the caller's to close.
    Health reports SERVING for the server and for ``partialflow.v1.Partialflow`` because
    the engine is ready by the time this returns. With ``config.tls_cert`` the port speaks
    TLS only; with ``config.auth_token`` every call but health needs the bearer token; with
    ``config.metrics_port`` Prometheus metrics are served (see ``metrics_port_of``). The
    process's garbage collector is tuned for a server's heap (``tune_gc``).
    """
    tune_gc()
    interceptors = [TokenAuthInterceptor(config.auth_token)] if config.auth_token else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="rpc"),
        interceptors=interceptors,
        options=[
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            # gRPC enables SO_REUSEPORT by default: a second server on the same port would
            # bind happily and silently share the traffic.
            ("grpc.so_reuseport", 0),
        ],
    )
    port = _bind(server, config)
    owns_engine = engine is None
    metrics: Metrics | None = None
    metrics_port: int | None = None
    pg: PgListener | None = None
    pg_socket: socket.socket | None = None
    try:
        # Bound before Spark starts too, so a taken PostgreSQL port also fails fast.
        pg_port = config.effective_pg_port()
        if pg_port is not None:
            pg_socket = PgListener.bind(config.host, pg_port)
        if engine is None:
            if spark is None:
                from partialflow.server.spark_supervisor import SparkSupervisor

                # Replaced with the same master and settings if the driver dies.
                spark = SparkSupervisor(config.spark_master, config.spark_conf)
            engine = Engine(config, spark)
        if config.follow:
            from partialflow.server.follow import Follower

            engine.follower = Follower(engine, config.follow, config.follow_tables).start()
        # Each Subscribe stream holds a handler thread while open: at most half of them, so
        # other calls (and health checks) always find one.
        add_to_server(PartialflowServicer(engine, max_streams=max(1, config.workers // 2)),
                      server)
        add_test_hooks(server, engine)  # refuses every call unless PARTIALFLOW_TEST_HOOKS=1
        checker = add_health(server)
        add_reflection(server, (SERVICE_NAME,))
        if config.metrics_port is not None:
            metrics = Metrics(engine)
            metrics_port = metrics.serve(
                config.host, config.metrics_port, config.tls_cert, config.tls_key
            )
        if pg_socket is not None:
            pg = PgListener(engine, pg_socket, tls_cert=config.tls_cert,
                            tls_key=config.tls_key, auth_token=config.auth_token).start()
            pg_socket = None
        for service in ("", SERVICE_NAME):
            checker.set(service, health_pb2.HealthCheckResponse.SERVING)
        watch_spark(checker, engine, SERVICE_NAME)
    except BaseException:
        server.stop(None)
        if engine is not None and engine.follower is not None:
            engine.follower.close()
        if pg is not None:
            pg.stop()
        elif pg_socket is not None:
            pg_socket.close()
        if metrics is not None:
            metrics.close()
        if owns_engine and engine is not None:
            engine.close()
        raise
    _WIRING[server] = _Wiring(engine, checker, owns_engine, metrics, metrics_port, pg,
                              engine.follower)
    return server, port


def engine_of(server: grpc.Server) -> Engine:
    """The engine behind a server made by ``create_server``."""
    return _WIRING[server].engine


def metrics_port_of(server: grpc.Server) -> int | None:
    """The port the server's Prometheus endpoint listens on (None when metrics are off)."""
    return _WIRING[server].metrics_port


def pg_port_of(server: grpc.Server) -> int | None:
    """The port the PostgreSQL listener accepts on (None when it is off)."""
    pg = _WIRING[server].pg
    return pg.port if pg is not None else None


def stop_server(server: grpc.Server, grace: float | None = 5.0) -> None:
    """Report NOT_SERVING, let in-flight calls finish for ``grace`` seconds, stop, and
    close the engine if ``create_server`` made it."""
    wiring = _WIRING.get(server)
    if wiring is not None:
        wiring.health.enter_graceful_shutdown()
    if wiring is not None and wiring.pg is not None:
        wiring.pg.stop()  # before the engine closes: no session may call into it after
    server.stop(grace).wait()
    if wiring is not None and wiring.follower is not None:
        wiring.follower.close()  # before the engine closes: it writes into it
    if wiring is not None and wiring.metrics is not None:
        wiring.metrics.close()
    if wiring is not None and wiring.owns_engine:
        wiring.engine.close()


def serve(config: Config) -> int:
    """Run a server until SIGTERM or SIGINT, then shut down cleanly; returns the exit code.

    Prints ``listening on HOST:PORT`` (flushed) once it accepts calls and is SERVING, after
    ``metrics on http[s]://HOST:PORT/metrics`` when metrics are on and
    ``postgres listening on HOST:PORT`` when the PostgreSQL listener is on. Logs go to stderr.
    """
    setup_logging(config.log_level, config.log_format)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    # Installed before Spark starts, so a signal during start-up also ends cleanly.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        server, port = create_server(config)
    except PartialflowError as err:  # a taken port, an unreadable data dir: one line, exit 1
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        # PySpark's SparkContext replaces the SIGINT handler with one that raises
        # KeyboardInterrupt; a Ctrl-C in that window ends start-up here (create_server
        # has closed what it opened).
        log.info("interrupted during start-up")
        return 0
    # ...and that handler stays installed: put ours back so Ctrl-C shuts down as cleanly
    # as SIGTERM instead of raising in whatever the main thread is doing.
    signal.signal(signal.SIGINT, on_signal)
    spark = engine_of(server).spark
    if not stop.is_set():  # a signal during start-up: stop without ever serving
        server.start()
        metrics_port = metrics_port_of(server)
        if metrics_port is not None:
            scheme = "https" if config.tls else "http"
            print(f"metrics on {scheme}://{_address(config.host, metrics_port)}/metrics")
        pg_port = pg_port_of(server)
        if pg_port is not None:  # before the gRPC line, which tests wait for last
            print(f"postgres listening on {_address(config.host, pg_port)}")
        print(f"listening on {_address(config.host, port)}", flush=True)
        log.info(
            "serving",
            extra={
                "data": config.data_dir,
                "address": _address(config.host, port),
                "tls": config.tls,
                "auth": config.auth_token is not None,
                "metrics_port": metrics_port,
                "pg_port": pg_port_of(server),
            },
        )
    while not stop.wait(0.5):  # a timed wait keeps the main thread responsive to signals
        pass
    stop_server(server, config.grace)
    try:
        spark.stop()
    except Exception:  # the JVM goes away with the process anyway
        log.warning("Spark did not stop cleanly", exc_info=True)
    log.info("stopped")
    return 0
