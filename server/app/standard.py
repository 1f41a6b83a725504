"""The standard gRPC services next to ours: health (with ``List``) and reflection (v1 and
v1alpha).

grpcio-health-checking advertises ``grpc.health.v1.Health/List`` in its stubs but its
servicer answers UNIMPLEMENTED, so ``HealthServicer`` here adds it. grpcio-reflection
ships only v1alpha; ``grpc.reflection.v1`` is the same protocol under a new package name
(every message and field number identical, so the bytes on the wire are the same), and
grpcurl, Postman and grpc-requests ask for v1 first. So the library's v1alpha servicer
is registered a second time under the v1 method path, with the v1alpha codecs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
REFLECTION_V1ALPHA = reflection.SERVICE_NAME


class HealthServicer(health.HealthServicer):
    """The library's servicer plus ``List``: every registered service and its status."""

    def List(
        self, request: health_pb2.HealthListRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthListResponse:
        with self._lock:  # the library's own lock over its status table
            statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in statuses.items()
            }
        )


def add_health(server: grpc.Server) -> HealthServicer:
    """Register the health service (Check, Watch, List) and return it for ``set``."""
    checker = HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    return checker


def watch_spark(checker: HealthServicer, engine: Any, service: str) -> None:
    """Report ``service`` (``partialflow.v1.Partialflow``) NOT_SERVING while the
    engine's Spark is down, SERVING again once it is back.

    Only the service's own name flips: a miss, ``query()``, a load or a compaction need
    Spark, so a readiness check (or a load balancer) should stop sending reads here while it
    is restarted. The server's overall status (the empty name) stays SERVING: the process is
    alive, serves hits and writes, and replaces Spark by itself, so a liveness check must
    not restart it for that. Once the server shuts down (``enter_graceful_shutdown``) the
    health servicer ignores these updates.
    """
    spark = getattr(engine, "spark", None)
    if spark is None or not hasattr(spark, "add_listener"):
        return  # an engine without a supervised Spark (a test's fake)
    def changed(up: bool) -> None:
        checker.set(service, health_pb2.HealthCheckResponse.SERVING if up
                    else health_pb2.HealthCheckResponse.NOT_SERVING)

    spark.add_listener(changed)
    if not spark.up:  # went down between the engine's start and now
        changed(False)


def add_reflection(server: grpc.Server, service_names: Iterable[str]) -> None:
    """Serve reflection for ``service_names`` (plus health and reflection itself) under
    both ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``."""
    names = (*service_names, HEALTH_SERVICE, REFLECTION_V1, REFLECTION_V1ALPHA)
    servicer = reflection.ReflectionServicer(names)
    handler: Any = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
            for name in (REFLECTION_V1, REFLECTION_V1ALPHA)
        )
    )
