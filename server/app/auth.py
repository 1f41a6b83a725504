"""Access control: TLS credentials and the bearer-token interceptor.

With a token configured, every RPC must carry ``authorization: Bearer <token>`` metadata,
except the standard health service (load balancers and orchestrators probe it without
credentials). A call without the right token is answered UNAUTHENTICATED before its handler
runs, so it cannot touch anything. Tokens are compared with ``hmac.compare_digest`` so the
time taken does not reveal how much of a guess was right.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from partialflow.server.errors import InvalidArgument

log = logging.getLogger(__name__)

HEALTH_PREFIX = "/grpc.health.v1.Health/"


def _token_of(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, token = (value if isinstance(value, str) else value.decode()).partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def _deny(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that refuses without running it."""

    def abort(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    def abort_stream(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - abort raises; the yield makes this a generator

    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream, **codec)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, **codec)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort_stream, **codec)
    return grpc.unary_unary_rpc_method_handler(abort, **codec)


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Refuses every call but health checks unless it carries the bearer token."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)  # only looks the method up; nothing runs yet
        if handler is None or details.method.startswith(HEALTH_PREFIX):
            return handler
        token = _token_of(details.invocation_metadata)
        if token is None:
            message = "missing credentials: send 'authorization: Bearer <token>' metadata"
        elif hmac.compare_digest(token.encode(), self._token):
            return handler
        else:
            message = "invalid token"
        log.warning("refused unauthenticated call", extra={"method": details.method})
        return _deny(handler, message)


def _read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InvalidArgument(f"cannot read the TLS {what} {path}: {err.strerror}") from None
    if b"-----BEGIN" not in data:
        raise InvalidArgument(f"the TLS {what} {path} is not a PEM file")
    return data


def server_credentials(cert_path: str, key_path: str) -> grpc.ServerCredentials:
    """TLS credentials from PEM files (a clear InvalidArgument if one cannot be read)."""
    cert = _read_pem(cert_path, "certificate")
    key = _read_pem(key_path, "key")
    return grpc.ssl_server_credentials([(key, cert)])
