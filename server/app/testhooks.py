"""Test-only RPCs: plant a wrong answer in a view, switch faults on Spark scans, change
the disk tier's limit.

They let a stress run prove its checkers can fail, and inject upquery failures, hangs and
slowness while a real workload runs. They are served as their own gRPC service,
``partialflow.testing.v1.TestHooks``, next to the main one, and every call is refused with
FAILED_PRECONDITION unless the server process runs with ``PARTIALFLOW_TEST_HOOKS=1``: a
production server can be neither corrupted nor slowed down by a client.

The service carries ``google.protobuf.Struct`` both ways through a generic handler rather
than a .proto of its own: it is a test tool, not part of the wire contract in
``proto/partialflow.proto``, and should not grow the public stubs.
"""

from __future__ import annotations

import os
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from partialflow.server.app.service import _rpc
from partialflow.server.errors import FailedPrecondition, InvalidArgument

SERVICE = "partialflow.testing.v1.TestHooks"
ENV = "PARTIALFLOW_TEST_HOOKS"


def hooks_enabled() -> bool:
    """True when this process may serve test hooks (``PARTIALFLOW_TEST_HOOKS=1``)."""
    return os.environ.get(ENV) == "1"


def _plain(value: Any) -> Any:
    # Struct numbers are doubles; a key of 3 must find the bucket of the integer 3.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def to_struct(data: dict[str, Any]) -> struct_pb2.Struct:
    """A flat dict of JSON values as a Struct (the hooks' answers are one or two fields)."""
    struct = struct_pb2.Struct()
    struct.update(data)
    return struct


class TestHooks:
    """The handlers; each takes and returns a Struct."""

    __test__ = False  # not a pytest class, despite the name

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def _dataflow(self) -> Any:
        if not hooks_enabled():
            raise FailedPrecondition(f"test hooks are disabled (start the server with {ENV}=1)")
        return self.engine.dataflow

    @_rpc
    def Corrupt(
        self, request: struct_pb2.Struct, context: grpc.ServicerContext
    ) -> struct_pb2.Struct:
        """{"view": V, "key": [..]} -> {"planted": bool}: a wrong row in one filled key
        (False if the key is not filled)."""
        dataflow = self._dataflow()
        args = json_format.MessageToDict(request)
        view, key = args.get("view"), args.get("key", [])
        if not isinstance(view, str) or not isinstance(key, list):
            raise InvalidArgument("Corrupt needs {'view': name, 'key': [values]}")
        return to_struct(
            {"planted": dataflow.corrupt_for_test(view, tuple(_plain(v) for v in key))}
        )

    @_rpc
    def SetFaults(
        self, request: struct_pb2.Struct, context: grpc.ServicerContext
    ) -> struct_pb2.Struct:
        """{"mode": "" | "fail" | "hang" | "slow:SECONDS"} -> {"mode": previous mode}."""
        faults = self._dataflow().runner.faults
        mode = json_format.MessageToDict(request).get("mode", "")
        if not isinstance(mode, str):
            raise InvalidArgument("SetFaults needs {'mode': text}")
        previous = faults.mode
        faults.mode = mode  # validates (InvalidArgument) and wakes hung scans
        return to_struct({"mode": previous})


    @_rpc
    def SetDiskLimit(
        self, request: struct_pb2.Struct, context: grpc.ServicerContext
    ) -> struct_pb2.Struct:
        """{"limit": bytes} -> {"limit": previous}: the disk tier's limit, changed while the
        server runs (a stress run's --disk-limit); FAILED_PRECONDITION without a tier."""
        dataflow = self._dataflow()
        limit = json_format.MessageToDict(request).get("limit")
        if not isinstance(limit, float) or not limit.is_integer():
            raise InvalidArgument("SetDiskLimit needs {'limit': bytes}")
        return to_struct({"limit": dataflow.set_disk_limit(int(limit))})


def add_test_hooks(server: grpc.Server, engine: Any) -> None:
    """Register the TestHooks service on ``server`` (it refuses calls unless enabled)."""
    hooks = TestHooks(engine)
    codec = {
        "request_deserializer": struct_pb2.Struct.FromString,
        "response_serializer": struct_pb2.Struct.SerializeToString,
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(getattr(hooks, name), **codec)
        for name in ("Corrupt", "SetFaults", "SetDiskLimit")
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
