"""Client side of the server's test-only TestHooks service (server/app/testhooks.py).

The server refuses these calls with FAILED_PRECONDITION unless it runs with
``PARTIALFLOW_TEST_HOOKS=1``; ``FailedPrecondition`` is raised here then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from partialflow.client import Client
from partialflow.client.errors import error_from_rpc

SERVICE = "partialflow.testing.v1.TestHooks"


class TestHooks:
    """Plant wrong answers, switch Spark-scan faults and change the disk tier's limit on a
    server with hooks enabled."""

    __test__ = False  # not a pytest class, despite the name

    def __init__(self, client: Client, timeout: float = 30.0) -> None:
        # The client's own channel and credentials, so the hooks reach the same server the
        # same way (TLS, bearer token).
        self._channel = client._channel
        self._metadata = client._metadata
        self._timeout = timeout

    def _call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        request = struct_pb2.Struct()
        request.update(args)
        stub = self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=struct_pb2.Struct.SerializeToString,
            response_deserializer=struct_pb2.Struct.FromString,
        )
        try:
            reply = stub(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from None
        return json_format.MessageToDict(reply)

    def set_faults(self, mode: str) -> str:
        """Switch the fault mode ("" | "fail" | "hang" | "slow:SECONDS"); returns the old one."""
        return self._call("SetFaults", {"mode": mode})["mode"]

    def corrupt(self, view: str, key: Sequence[Any]) -> bool:
        """Plant a wrong row in one filled key of ``view``; False if the key is not filled."""
        return bool(self._call("Corrupt", {"view": view, "key": list(key)})["planted"])

    def set_disk_limit(self, limit: int) -> int:
        """Change the server's disk tier limit (bytes); returns the one before.
        FailedPrecondition if the server has no tier (or no hooks)."""
        return int(self._call("SetDiskLimit", {"limit": limit})["limit"])
