"""The standard services beside ours: health checking and reflection (so grpcurl works)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

SERVICE = "partialflow.v1.Partialflow"


@pytest.fixture
def channel(server):
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.mark.parametrize("service", ["", SERVICE])
def test_health_is_serving(channel, service):
    stub = health_pb2_grpc.HealthStub(channel)
    reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_health_of_an_unknown_service_is_not_found(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.Check(health_pb2.HealthCheckRequest(service="nope.Nothing"), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_list_names_every_service_with_its_status(channel):
    # Advertised by the standard stubs; it used to answer UNIMPLEMENTED.
    stub = health_pb2_grpc.HealthStub(channel)
    reply = stub.List(health_pb2.HealthListRequest(), timeout=5)
    assert {name: s.status for name, s in reply.statuses.items()} == {
        "": health_pb2.HealthCheckResponse.SERVING,
        SERVICE: health_pb2.HealthCheckResponse.SERVING,
    }


def _reflect(channel, version, **request):
    # grpc.reflection.v1 and v1alpha have the same messages under two package names, so
    # one set of Python classes speaks both; only the method path differs.
    call = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return next(iter(call(iter([reflection_pb2.ServerReflectionRequest(**request)]), timeout=5)))


def test_reflection_v1alpha_stub_still_works(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    assert SERVICE in {s.name for s in next(iter(replies)).list_services_response.service}


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_our_service_and_the_standard_ones(channel, version):
    reply = _reflect(channel, version, list_services="")
    names = {s.name for s in reply.list_services_response.service}
    assert {
        SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_describes_our_service(channel, version):
    reply = _reflect(channel, version, file_containing_symbol=SERVICE)
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in reply.file_descriptor_response.file_descriptor_proto
    ]
    ours = next(f for f in files if f.package == "partialflow.v1")
    methods = {m.name for s in ours.service for m in s.method}
    assert {
        "Execute",
        "Write",
        "Lookup",
        "Query",
        "Evict",
        "Stats",
        "Explain",
        "Flush",
        "Compact",
        "Ping",
    } <= methods
