"""The partialflow Python client library (no Spark needed on the client side).

from partialflow.client import Client
with Client("127.0.0.1:50051") as db:
    lsn = db.insert("visit", [("Apple", "Alice", 10)])
    print(db.lookup("max_visit", "Fruit", min_lsn=lsn).rows)
"""

from __future__ import annotations

from partialflow.client.client import (
    CaughtUp,
    Change,
    Client,
    Heartbeat,
    LoadProgress,
    LoadResult,
    Result,
    Snapshot,
    Subscription,
)
from partialflow.client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PartialflowError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from partialflow.client.transaction import Transaction

__all__ = [
    "AlreadyExists",
    "CaughtUp",
    "Change",
    "Client",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Heartbeat",
    "InvalidArgument",
    "LoadProgress",
    "LoadResult",
    "NotFound",
    "OutOfRange",
    "PartialflowError",
    "ResourceExhausted",
    "Result",
    "Snapshot",
    "Subscription",
    "Transaction",
    "Unauthenticated",
    "Unavailable",
]
