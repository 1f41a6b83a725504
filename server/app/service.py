"""The gRPC servicer: convert the request, call the engine, convert the response.

Domain errors become gRPC statuses in exactly one place, the ``_rpc`` wrapper; anything
else is a bug and answers INTERNAL with its traceback in the server log.

Every request is checked before the engine sees it: bytes that do not parse, a RowBatch
whose columns do not hold exactly ``num_rows`` values, a Value with no kind set, ... are
refused with INVALID_ARGUMENT naming the field (``insert_batch.columns[1]: ...``,
``inserts[3].values[0]: ...``), so nothing is written and no LSN is used. Register the
service with ``add_to_server``, which installs the parser that turns unparseable bytes
into that answer too (gRPC's own would answer INTERNAL).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import grpc
from google.protobuf import message_factory

from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc
from partialflow.proto.values import (
    WireError,
    add_rows,
    decode_batch,
    decode_rows,
    decode_values,
    fill_batch,
)
from partialflow.server.app.answers import (
    compact_message,
    lookup_message,
    stats_message,
    subscribe_event,
)
from partialflow.server.engine import Engine, ResultSet
from partialflow.server.errors import (
    FailedPrecondition,
    InvalidArgument,
    PartialflowError,
    ResourceExhausted,
)
from partialflow.server.storage import TableChange
from partialflow.server.storage.space import is_space_error

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Partialflow"].full_name

# An error's text travels in a header: gRPC clients may refuse headers over 8 KiB (and always
# over 16 KiB) and report RESOURCE_EXHAUSTED instead of the status; it is percent-encoded,
# up to 3 bytes per UTF-8 byte.
MAX_DETAILS_BYTES = 2000


# Seconds between heartbeats of a Subscribe stream when nothing changes.
HEARTBEAT_EVERY = 1.0

# The largest payload a Ping answers with (a benchmark's largest answers are a few MiB).
MAX_PING_REPLY = 64 * 1024 * 1024

TOO_DEEP = (
    "the statement nests too deeply for the server (parentheses, or a chain of AND/OR, "
    "hundreds deep): write it flatter, e.g. IN (...) instead of a long OR chain"
)


def details(err: object) -> str:
    """An error's message, cut to MAX_DETAILS_BYTES of UTF-8 (a value quoted in it can be
    as long as the request)."""
    text = str(err)
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_DETAILS_BYTES:
        return text
    cut = data[:MAX_DETAILS_BYTES].decode("utf-8", "ignore")
    return f"{cut}... ({len(text) - len(cut)} more characters)"


def _status(err: Exception, method: str) -> tuple[grpc.StatusCode, str]:
    """The status an exception raised by ``method`` is answered with."""
    if isinstance(err, PartialflowError):
        return err.code, details(err)
    if isinstance(err, WireError):
        return grpc.StatusCode.INVALID_ARGUMENT, details(err)
    if is_space_error(err):  # out of room where no check foresaw it (docs/disk-full.md)
        log.warning("%s: no space left: %s", method, err)
        return grpc.StatusCode.RESOURCE_EXHAUSTED, details(f"{method}: no space left: {err}")
    if isinstance(err, RecursionError):  # the SQL parser and planner recurse along the statement
        log.warning("%s: RecursionError, answered as a statement too deep", method)
        return grpc.StatusCode.INVALID_ARGUMENT, TOO_DEEP
    # A bug: keep serving, keep the traceback.
    log.error("internal error in %s", method, exc_info=err)
    return grpc.StatusCode.INTERNAL, details(
        f"internal error in {method}: {type(err).__name__}: {err}"
    )


def _rpc(method: Callable[..., Any]) -> Callable[..., Any]:
    """Map domain errors to their status and unexpected ones to INTERNAL (logged)."""

    @functools.wraps(method)
    def handler(self: PartialflowServicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as err:
            context.abort(*_status(err, method.__name__))

    return handler


def _rpc_stream(method: Callable[..., Any]) -> Callable[..., Any]:
    """``_rpc`` for server-streaming methods: errors raised while iterating end the stream
    with their status."""

    @functools.wraps(method)
    def handler(self: PartialflowServicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            yield from method(self, request, context)
        except Exception as err:
            context.abort(*_status(err, method.__name__))

    return handler


def put_rows(message: Any, rows: list[tuple], columnar: bool) -> None:
    """Rows into a ResultSet: as its ``batch`` if the client asked for that (and the rows
    are rectangular), else as ``rows``."""
    if not (columnar and fill_batch(message.batch, rows, lenient=True)):
        add_rows(message.rows, rows, lenient=True)


def take_rows(
    rows: Any, batch: pb.RowBatch | None, field: str, batch_field: str
) -> list[tuple]:
    """Rows of a write request, from its Row messages then its batch; a malformed message
    raises WireError naming ``field[i]`` or ``batch_field.columns[j]``."""
    decoded = decode_rows(rows, field)
    if batch is not None:
        if batch.num_rows and not batch.columns:  # every table has a column
            raise InvalidArgument(
                f"{batch_field}: num_rows is {batch.num_rows} but the batch has no columns"
            )
        decoded.extend(decode_batch(batch, batch_field))
    return decoded


def take_keys(request: pb.LookupRequest | pb.SubscribeRequest) -> list[tuple]:
    """The keys of a lookup, from its Key messages then its key batch; a malformed message
    raises WireError naming ``keys[i]`` or ``key_batch.columns[j]``."""
    keys = decode_rows(request.keys, "keys")
    if request.HasField("key_batch"):
        batch = request.key_batch
        if batch.num_rows and not batch.columns:
            # Refused rather than read as num_rows empty keys: a 5-byte message could ask
            # for 2^32 of them.
            raise InvalidArgument(
                f"key_batch: num_rows is {batch.num_rows} but the batch has no columns "
                "(keys of a view without parameters travel as `keys`)"
            )
        keys.extend(decode_batch(batch, "key_batch"))
    return keys


def check_lsn(value: int, field: str) -> int:
    """An LSN field of a request: never negative."""
    if value < 0:
        raise InvalidArgument(f"{field} must not be negative, got {value}")
    return value


def wait_upstream(engine: Engine, upstream_lsn: str, min_lsn: int | None,
                  remaining: float | None) -> int:
    """min_upstream_lsn: wait for the follower to apply it; the min_lsn to read at."""
    if engine.follower is None:
        raise FailedPrecondition(
            "min_upstream_lsn: this server follows no PostgreSQL (serve --follow URL)")
    limit = engine.config.upquery_timeout
    ours = engine.follower.wait_for_text(upstream_lsn, limit if remaining is None
                                         else max(0.0, min(remaining, limit)))
    return max(ours, min_lsn or 0)


def check_load(request: pb.LoadRequest) -> None:
    """What the engine cannot be asked about: a path Spark and the OS can take."""
    if "\x00" in request.path:
        raise InvalidArgument("path: contains a NUL character")
    try:
        urlparse(request.path)
    except ValueError as err:
        raise InvalidArgument(f"path: {request.path!r} is not a path or URL ({err})") from None
    for name in request.options:
        if not name:
            raise InvalidArgument("options: an option name is empty")


class Undecodable:
    """A request whose bytes did not parse as its message; the handler refuses it with
    INVALID_ARGUMENT (gRPC's own deserializer failure would answer INTERNAL)."""

    def __init__(self, name: str, error: BaseException) -> None:
        self.name = name
        self.error = error

    def __str__(self) -> str:
        return f"malformed {self.name}: {self.error}"


def _parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as err:  # noqa: BLE001 - DecodeError and whatever the parser raises
            return Undecodable(cls.DESCRIPTOR.full_name, err)

    return parse


def _refuse_undecodable(behavior: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
    """``behavior``, but a request that did not parse is answered INVALID_ARGUMENT."""
    if streaming:

        @functools.wraps(behavior)
        def stream(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, Undecodable):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, details(request))
            yield from behavior(request, context)

        return stream

    @functools.wraps(behavior)
    def unary(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, details(request))
        return behavior(request, context)

    return unary


def add_to_server(servicer: PartialflowServicer, server: grpc.Server) -> None:
    """``pb_grpc.add_PartialflowServicer_to_server``, with request parsers that hand
    unparseable bytes to the handler as ``Undecodable`` instead of failing the call."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["Partialflow"].methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            _refuse_undecodable(getattr(servicer, method.name), method.server_streaming),
            request_deserializer=_parser(request),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def result_set(result: ResultSet, columnar: bool = False) -> pb.ResultSet:
    """An engine result as its wire message."""
    message = pb.ResultSet(columns=result.columns, lsn=result.lsn)
    put_rows(message, result.rows, columnar)
    return message


class PartialflowServicer(pb_grpc.PartialflowServicer):
    """Implements ``partialflow.v1.Partialflow`` on top of an ``Engine``."""

    def __init__(self, engine: Engine, max_streams: int | None = None) -> None:
        self.engine = engine
        self.max_streams = max_streams  # open Subscribe streams allowed at once
        self._streams = 0
        self._streams_lock = threading.Lock()

    def _upstream(self, message: Any) -> Any:
        """A ResultSet or SubscribeEvent with the upstream position its LSN is exact at
        (on a server following a PostgreSQL)."""
        follower = self.engine.follower
        if follower is not None:
            message.upstream_lsn = follower.upstream_text_at(message.lsn)
        return message

    @_rpc
    def Execute(self, request: pb.ExecuteRequest, context: grpc.ServicerContext) -> pb.ResultSet:
        return self._upstream(result_set(self.engine.execute(request.sql), request.columnar))

    @_rpc
    def Write(self, request: pb.WriteRequest, context: grpc.ServicerContext) -> pb.WriteResponse:
        inserts = take_rows(
            request.inserts,
            request.insert_batch if request.HasField("insert_batch") else None,
            "inserts",
            "insert_batch",
        )
        deletes = take_rows(
            request.deletes,
            request.delete_batch if request.HasField("delete_batch") else None,
            "deletes",
            "delete_batch",
        )
        lsn = self.engine.write(request.table, inserts=inserts, deletes=deletes)
        return pb.WriteResponse(lsn=lsn)

    @_rpc
    def Transact(
        self, request: pb.TransactRequest, context: grpc.ServicerContext
    ) -> pb.WriteResponse:
        changes = []
        for i, c in enumerate(request.changes):
            where = f"changes[{i}]"
            inserts = take_rows(c.inserts, c.insert_batch if c.HasField("insert_batch") else None,
                                f"{where}.inserts", f"{where}.insert_batch")
            deletes = take_rows(c.deletes, c.delete_batch if c.HasField("delete_batch") else None,
                                f"{where}.deletes", f"{where}.delete_batch")
            changes.append(TableChange(c.table, inserts, deletes))
        return pb.WriteResponse(lsn=self.engine.write_many(changes))

    @_rpc
    def Lookup(self, request: pb.LookupRequest, context: grpc.ServicerContext) -> pb.LookupResponse:
        min_lsn = check_lsn(request.min_lsn, "min_lsn") if request.HasField("min_lsn") else None
        follower = self.engine.follower
        if request.HasField("min_upstream_lsn"):
            min_lsn = wait_upstream(self.engine, request.min_upstream_lsn, min_lsn,
                                    context.time_remaining())
        columns, results = self.engine.lookup(
            request.view,
            take_keys(request),
            min_lsn=min_lsn,
            timeout=context.time_remaining(),
        )
        message = lookup_message(columns, results)
        if follower is not None and results:
            message.upstream_lsn = follower.upstream_text_at(message.lsn)
            if message.key_lsns:
                message.key_upstream_lsns.extend(map(follower.upstream_text_at,
                                                     message.key_lsns))
        return message

    @_rpc
    def Query(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> pb.ResultSet:
        as_of = check_lsn(request.as_of, "as_of") if request.HasField("as_of") else None
        return self._upstream(result_set(self.engine.query(request.sql, as_of=as_of),
                                         request.columnar))

    @_rpc
    def Evict(self, request: pb.EvictRequest, context: grpc.ServicerContext) -> pb.EvictResponse:
        key = decode_values(request.key.values, "key.values") if request.HasField("key") else None
        return pb.EvictResponse(evicted=self.engine.evict(request.view, key))

    @_rpc
    def Stats(self, request: pb.StatsRequest, context: grpc.ServicerContext) -> pb.StatsResponse:
        return stats_message(self.engine.stats())

    @_rpc
    def Explain(
        self, request: pb.ExplainRequest, context: grpc.ServicerContext
    ) -> pb.ExplainResponse:
        text, dot = self.engine.explain(request.view)
        return pb.ExplainResponse(text=text, dot=dot)

    @_rpc
    def Flush(self, request: pb.FlushRequest, context: grpc.ServicerContext) -> pb.FlushResponse:
        return pb.FlushResponse(lsn=self.engine.flush())

    @_rpc
    def Compact(
        self, request: pb.CompactRequest, context: grpc.ServicerContext
    ) -> pb.CompactResponse:
        table = request.table if request.HasField("table") else None
        return compact_message(self.engine.compact(table))

    @_rpc
    def Checkpoint(
        self, request: pb.CheckpointRequest, context: grpc.ServicerContext
    ) -> pb.CheckpointResponse:
        return pb.CheckpointResponse(**self.engine.checkpoint())

    @_rpc_stream
    def Load(self, request: pb.LoadRequest, context: grpc.ServicerContext) -> Any:
        check_load(request)
        events = self.engine.load(
            request.table,
            request.path,
            fmt=request.format,
            header=request.header,
            force=request.force,
            options=dict(request.options),
            active=context.is_active,
        )
        for event in events:
            yield pb.LoadProgress(
                phase=event.phase,
                done=event.done,
                total=event.total,
                message=event.message,
                lsn=event.lsn,
                rows=event.rows,
            )

    @_rpc_stream
    def Subscribe(self, request: pb.SubscribeRequest, context: grpc.ServicerContext) -> Any:
        from_lsn = check_lsn(request.from_lsn, "from_lsn") if request.HasField("from_lsn") else None
        keys = take_keys(request)  # same key fields as a Lookup
        with self._streams_lock:
            if self.max_streams is not None and self._streams >= self.max_streams:
                raise ResourceExhausted(
                    f"too many open subscriptions ({self._streams}; each holds one of the "
                    "server's handler threads, see --workers): subscribe to more keys per stream")
            self._streams += 1
        try:
            sub = self.engine.subscribe(request.view, keys, from_lsn=from_lsn,
                                        max_buffered=request.max_buffered or None)
        except BaseException:
            with self._streams_lock:
                self._streams -= 1
            raise
        context.add_callback(sub.close)  # the client went away: stop waiting at once
        columns = list(sub.reader.plan.columns)
        first = True
        try:
            while context.is_active() and not sub.closed:
                try:
                    event = sub.next_event(HEARTBEAT_EVERY)
                except PartialflowError as err:
                    resume = getattr(err, "resume_lsn", None)
                    if resume:
                        context.set_trailing_metadata((("resume-lsn", str(resume)),))
                    raise
                if event is None:
                    continue
                yield self._upstream(subscribe_event(event, columns if first else None))
                first = first and event.kind == "heartbeat"
        finally:
            with self._streams_lock:
                self._streams -= 1
            self.engine.unsubscribe(sub)

    @_rpc
    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        if not request.reply_bytes:
            return pb.PingResponse()
        if request.reply_bytes > MAX_PING_REPLY:
            raise InvalidArgument(
                f"reply_bytes: {request.reply_bytes} is more than {MAX_PING_REPLY} (64 MiB)"
            )
        return pb.PingResponse(payload=bytes(request.reply_bytes))
