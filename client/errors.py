"""Errors raised by the client: one subclass per gRPC status the server answers with.

These mirror the server's hierarchy (``partialflow.server.errors``) but are defined here
so the client library depends on nothing but grpc and the generated stubs.
"""

from __future__ import annotations

import grpc


class PartialflowError(Exception):
    """Base class of every error the client raises; ``code`` is the gRPC status."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(PartialflowError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(PartialflowError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(PartialflowError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(PartialflowError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(PartialflowError):
    """E.g. ``min_lsn`` beyond the server's last acknowledged write."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unavailable(PartialflowError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(PartialflowError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhausted(PartialflowError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(PartialflowError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[PartialflowError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        OutOfRange,
        Unavailable,
        DeadlineExceeded,
        ResourceExhausted,
        Unauthenticated,
    )
}


def error_from_rpc(err: grpc.RpcError) -> PartialflowError:
    """The client error matching a failed call, carrying the server's message."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else None
    message = details or (code.name.lower() if code else str(err))
    cls = _BY_CODE.get(code, PartialflowError)
    if cls is PartialflowError:
        return PartialflowError(message, code)
    return cls(message)
