"""One error hierarchy for the whole server.

Every domain error carries the gRPC status code it maps to, so the service translates
errors in exactly one place (``service.py``) and nothing else needs to know about gRPC.
"""

from __future__ import annotations

import grpc


class PartialflowError(Exception):
    """Base class; ``code`` is the gRPC status the service answers with."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(PartialflowError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(PartialflowError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(PartialflowError):
    code = grpc.StatusCode.ALREADY_EXISTS


class OutOfRange(PartialflowError):
    """E.g. a ``min_lsn`` beyond the last acknowledged write: waiting could not help."""

    code = grpc.StatusCode.OUT_OF_RANGE


class FailedPrecondition(PartialflowError):
    """The request is well formed but the server's state refuses it (e.g. as_of too old)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(PartialflowError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(PartialflowError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhausted(PartialflowError):
    """E.g. a view whose full state cannot fit in the memory limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
