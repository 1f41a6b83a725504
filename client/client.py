"""The Python client: one gRPC channel to a partialflow server.

Reads from one ``Client`` never go back in LSN: the client remembers the highest LSN of
any result it has returned from ``lookup``, ``lookup_many`` or a latest-snapshot ``query``,
and sends it as the ``min_lsn`` floor of its next lookups, so a later read never reflects
an older state than an earlier one. Writes do not raise the floor (that would make every
lookup wait for the dataflow to catch up); pass ``min_lsn=<write's LSN>`` to read your
own writes. Historical reads (``query(..., as_of=...)``) neither use nor raise the floor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from partialflow.client.answers import (
    Result,
    as_dict,
    compact_dict,
    results_of,
    rows_of,
    stats_dict,
)
from partialflow.client.errors import InvalidArgument, PartialflowError, error_from_rpc
from partialflow.client.subscription import CaughtUp, Change, Heartbeat, Snapshot, Subscription
from partialflow.client.transaction import Transaction
from partialflow.proto import partialflow_pb2 as pb
from partialflow.proto import partialflow_pb2_grpc as pb_grpc
from partialflow.proto.values import (
    add_rows,
    fill_batch,
    fill_columns,
    fill_key,
    make_key,
)

# Query results can be large (a whole table); gRPC's 4 MiB default would refuse them.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


@dataclass
class LoadProgress:
    """One progress event of a bulk load (``phase``: scan, convert, write, done)."""

    phase: str
    done: int = 0
    total: int = 0
    message: str = ""
    lsn: int = 0
    rows: int = 0


@dataclass
class LoadResult:
    """A finished bulk load: the LSN of its one write and how many rows it added."""

    lsn: int
    rows: int


def _pem(tls_ca: str | bytes | Path) -> bytes:
    """CA certificates as PEM bytes, given as bytes or as the path of a PEM file."""
    if isinstance(tls_ca, bytes):
        return tls_ca
    try:
        return Path(tls_ca).read_bytes()
    except OSError as err:
        raise InvalidArgument(f"cannot read the TLS CA file {tls_ca}: {err.strerror}") from None


def _key_tuple(key: Any) -> tuple:
    """A lookup key as a tuple: a scalar is a one-parameter key, ``()`` no parameters."""
    if isinstance(key, (tuple, list)):
        return tuple(key)
    return (key,)


def _add_rows(rows_field: Any, batch: pb.RowBatch, rows: Iterable[Sequence[Any]]) -> None:
    """Rows into a write request: as a columnar batch when they are rectangular (about
    ten times cheaper on both ends), else as Row messages so the server names the bad one."""
    rows = rows if isinstance(rows, list) else list(rows)
    if rows and not fill_batch(batch, rows):
        add_rows(rows_field, rows)


def _add_keys(request: pb.LookupRequest, keys: list[tuple]) -> None:
    """Keys into a lookup request: as a columnar key batch when they have one arity of at
    least one value, else as Key messages (keys of a view without parameters, or keys of
    unequal arity, which the server then names)."""
    if len(keys) <= 1 or not keys[0] or not fill_batch(request.key_batch, keys):
        # One key: a Key message costs less to build than a one-row batch (none: nothing).
        for key in keys:
            fill_key(request.keys.add(), key)


# Keys of these types are one-parameter keys as they are (``_key_tuple`` makes (k,) of
# them): a lookup_many of such keys sends them as one column, with no tuple per key.
_SCALARS = frozenset({int, str, float, bool, type(None)})


def _add_scalar_keys(request: pb.LookupRequest, keys: list[Any]) -> None:
    """One-parameter keys given as scalars into a lookup request: one key batch column."""
    if len(keys) <= 1:
        for key in keys:
            fill_key(request.keys.add(), (key,))
    else:
        fill_columns(request.key_batch, [keys], len(keys))


class Client:
    """A connection to a partialflow server (thread-safe; share one per process).

    ``token`` is sent as ``authorization: Bearer <token>`` on every call (servers started
    with ``--auth-token`` require it). ``tls_ca`` (a PEM file's path, or PEM bytes) turns on
    TLS and trusts that CA; ``tls=True`` turns on TLS with the system's trusted roots.
    ``tls_server_name`` overrides the name the server's certificate must carry (when the
    target is an address its certificate does not list).
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        timeout: float = 30.0,
        token: str | None = None,
        tls_ca: str | bytes | Path | None = None,
        tls: bool = False,
        tls_server_name: str | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        options: list[tuple[str, Any]] = list(CHANNEL_OPTIONS)
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        if tls or tls_ca is not None or tls_server_name:
            roots = _pem(tls_ca) if tls_ca is not None else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.PartialflowStub(self._channel)
        self._floor = 0
        self._floor_lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------------

    def _call(self, method: Any, request: Any, timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=timeout if timeout is not None else self.timeout,
                          metadata=self._metadata)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from None

    def _raise_floor(self, lsn: int) -> None:
        with self._floor_lock:
            self._floor = max(self._floor, lsn)

    @property
    def lsn_floor(self) -> int:
        """The highest LSN this client has read; later lookups are at least this fresh."""
        return self._floor

    def _min_lsn(self, min_lsn: int | None) -> int | None:
        floor = max(self._floor, min_lsn or 0)
        return floor if floor > 0 or min_lsn is not None else None

    @staticmethod
    def _result(msg: pb.ResultSet) -> Result:
        return Result(rows_of(msg), list(msg.columns), msg.lsn, msg.upstream_lsn)

    def close(self) -> None:
        """Close the channel; the client cannot be used afterwards."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- statements and writes ----------------------------------------------------

    def execute(self, sql: str) -> Result:
        """Run one statement: CREATE/DROP TABLE, CREATE/DROP VIEW, INSERT ... VALUES, SELECT."""
        request = pb.ExecuteRequest(sql=sql, columnar=True)
        return self._result(self._call(self._stub.Execute, request))

    def write(
        self,
        table: str,
        inserts: Iterable[Sequence[Any]] = (),
        deletes: Iterable[Sequence[Any]] = (),
    ) -> int:
        """One atomic write of deletes and inserts; returns its LSN."""
        request = pb.WriteRequest(table=table)
        try:
            _add_rows(request.deletes, request.delete_batch, deletes)
            _add_rows(request.inserts, request.insert_batch, inserts)
        except (TypeError, ValueError) as err:
            raise InvalidArgument(f"table {table}: {err}") from None
        return self._call(self._stub.Write, request).lsn

    def transaction(self) -> Transaction:
        """Changes to several tables as one write: ``with client.transaction() as tx:
        tx.insert(...); tx.delete(...); tx.update(...)``. Sent when the block ends (one LSN,
        ``tx.lsn``; all or nothing); an exception in the block sends nothing."""
        return Transaction(lambda request: self._call(self._stub.Transact, request).lsn)

    def insert(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Insert ``rows`` (sequences of values in column order) atomically; returns the LSN."""
        return self.write(table, inserts=rows)

    def delete(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Delete one occurrence of each row atomically; a missing row refuses the batch."""
        return self.write(table, deletes=rows)

    def update(
        self, table: str, old_rows: Sequence[Sequence[Any]], new_rows: Sequence[Sequence[Any]]
    ) -> int:
        """Replace ``old_rows[i]`` by ``new_rows[i]`` in one atomic write; returns the LSN."""
        old_rows, new_rows = list(old_rows), list(new_rows)
        if len(old_rows) != len(new_rows):
            raise InvalidArgument(
                f"update of {table}: {len(old_rows)} old rows but {len(new_rows)} new rows"
            )
        return self.write(table, inserts=new_rows, deletes=old_rows)

    # -- reads ----------------------------------------------------------------------

    def _lookup(self, view: str, keys: list[tuple], min_lsn: int | None,
                scalars: list[Any] | None = None,
                min_upstream_lsn: str | None = None) -> list[Result]:
        """One Lookup call: a Result per key, in the order given. ``scalars`` instead of
        ``keys``: one-parameter keys given as plain values (see ``_add_scalar_keys``)."""
        request = pb.LookupRequest(view=view)
        if min_upstream_lsn is not None:
            request.min_upstream_lsn = str(min_upstream_lsn)
        floor = self._min_lsn(min_lsn)
        if floor is not None:
            request.min_lsn = floor
        try:
            if scalars is not None:
                _add_scalar_keys(request, scalars)
            else:
                _add_keys(request, keys)
        except (TypeError, ValueError) as err:
            raise InvalidArgument(f"lookup in {view}: {err}") from None
        response = self._call(self._stub.Lookup, request)
        results = results_of(response, len(scalars if scalars is not None else keys))
        if results:
            self._raise_floor(response.lsn)
        return results

    def lookup(self, view: str, key: Any = (), *, min_lsn: int | None = None,
               min_upstream_lsn: str | None = None) -> Result:
        """Rows of ``view`` whose parameters equal ``key`` (scalar for one parameter).

        With ``min_lsn`` the read waits until the view reflects that write. On a server
        that follows a PostgreSQL, ``min_upstream_lsn`` ('X/Y', e.g. what
        ``pg_current_wal_lsn()`` returned after a commit there) waits until that upstream
        commit is applied here; ``Result.upstream_lsn`` says which upstream position the
        rows are exact at.
        """
        return self._lookup(view, [_key_tuple(key)], min_lsn,
                            min_upstream_lsn=min_upstream_lsn)[0]

    def lookup_many(
        self, view: str, keys: Iterable[Any], *, min_lsn: int | None = None,
        min_upstream_lsn: str | None = None,
    ) -> dict[Any, Result]:
        """Look up several keys in one round trip; the dict is keyed by the keys as given.

        The keys travel as one columnar batch and all their rows come back as one block,
        decoded column by column (see ``answers.results_of``)."""
        given = keys if type(keys) is list else list(keys)
        types = set(map(type, given))
        if types <= _SCALARS:  # one-parameter keys as values: no tuple per key
            results = self._lookup(view, [], min_lsn, scalars=given,
                                   min_upstream_lsn=min_upstream_lsn)
        elif types == {tuple}:
            results = self._lookup(view, given, min_lsn, min_upstream_lsn=min_upstream_lsn)
        else:
            given = [k if isinstance(k, Hashable) else tuple(k) for k in given]
            results = self._lookup(view, [_key_tuple(k) for k in given], min_lsn,
                                   min_upstream_lsn=min_upstream_lsn)
        return dict(zip(given, results, strict=True))

    def query(self, sql: str, *, as_of: int | None = None) -> Result:
        """Run a SELECT over the base tables on Spark, at the latest LSN or at ``as_of``."""
        request = pb.QueryRequest(sql=sql, columnar=True)
        if as_of is not None:
            request.as_of = as_of
        result = self._result(self._call(self._stub.Query, request))
        if as_of is None:
            self._raise_floor(result.lsn)
        return result

    # -- administration ---------------------------------------------------------------

    def evict(self, view: str, key: Any = None) -> int:
        """Evict ``key`` of ``view`` (or keys the server picks); returns how many were evicted."""
        request = pb.EvictRequest(view=view)
        if key is not None:
            try:
                request.key.CopyFrom(make_key(_key_tuple(key)))
            except (TypeError, ValueError) as err:
                raise InvalidArgument(f"evict in {view}: {err}") from None
        return self._call(self._stub.Evict, request).evicted

    def stats(self) -> dict:
        """Server statistics: per view counters under ``views``, plus ``lsn``, ``memory_limit``."""
        return stats_dict(self._call(self._stub.Stats, pb.StatsRequest()))

    def explain(self, view: str) -> tuple[str, str]:
        """The view's dataflow graph as (indented text tree, Graphviz DOT)."""
        response = self._call(self._stub.Explain, pb.ExplainRequest(view=view))
        return response.text, response.dot

    def flush(self) -> int:
        """Flush logged writes to Parquet segments; returns the last LSN."""
        return self._call(self._stub.Flush, pb.FlushRequest()).lsn

    def checkpoint(self, *, timeout: float = 600.0) -> dict:
        """Take a dataflow checkpoint now; returns its ``seq``, ``lsn`` (every state in it
        is exact there), ``kind`` (full or incremental), ``bytes``, ``duration_s`` and
        ``chain_files``. FailedPrecondition when the server runs without checkpoints.
        A first (full) checkpoint of a big state takes a while: hence its own deadline."""
        response = self._call(self._stub.Checkpoint, pb.CheckpointRequest(), timeout=timeout)
        return as_dict(response)

    def compact(self, table: str | None = None) -> dict:
        """Compact one table's segments (or all tables'); returns what was done."""
        request = pb.CompactRequest()
        if table is not None:
            request.table = table
        return compact_dict(self._call(self._stub.Compact, request))

    def load(
        self,
        table: str,
        path: str,
        *,
        format: str = "parquet",
        header: bool = False,
        force: bool = False,
        options: Mapping[str, str] | None = None,
        progress: Callable[[LoadProgress], None] | None = None,
        timeout: float | None = None,
    ) -> LoadResult:
        """Bulk-load a Parquet or CSV file into ``table`` as one atomic write.

        ``path`` is read by the server's Spark (a path on the server's machine, or any URL
        Spark can read). Loading a file that was loaded before (same path, size and
        modification time) is refused with AlreadyExists unless ``force``. ``progress`` is
        called with each LoadProgress. No deadline unless ``timeout`` is given: big files
        take long, and the server streams progress meanwhile.
        """
        request = pb.LoadRequest(
            table=table,
            path=path,
            format=format,
            header=header,
            force=force,
            options=dict(options or {}),
        )
        result: LoadResult | None = None
        stream = self._stub.Load(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in stream:
                event = LoadProgress(
                    message.phase,
                    message.done,
                    message.total,
                    message.message,
                    message.lsn,
                    message.rows,
                )
                if progress is not None:
                    progress(event)
                if event.phase == "done":
                    result = LoadResult(event.lsn, event.rows)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from None
        finally:
            stream.cancel()  # a no-op when the stream ended; stops the load on KeyboardInterrupt
        if result is None:
            raise PartialflowError("the load ended without a result", grpc.StatusCode.UNKNOWN)
        return result

    def subscribe(self, view: str, keys: Iterable[Any], *, from_lsn: int | None = None,
                  max_buffered: int = 0) -> Subscription:
        """Subscribe to ``keys`` of ``view``: iterate the result for a ``Snapshot`` (every
        key's rows at one LSN), then ``Change(key, inserted, deleted, lsn)`` events in LSN
        order, and a ``Heartbeat(lsn)`` about once a second when nothing changes.

        With ``from_lsn`` (an LSN a subscription reported, e.g. ``Subscription.lsn`` or a
        cut-off error's ``resume_lsn``) no snapshot comes: the first changes bring the rows
        held at ``from_lsn`` up to date, then ``CaughtUp``. Errors (bad view or keys, a
        slow reader cut off with ResourceExhausted, ...) raise when iterating; a cut-off
        error carries ``resume_lsn``. ``close()`` cancels the stream. No deadline."""
        request = pb.SubscribeRequest(view=view, max_buffered=max_buffered)
        if from_lsn is not None:
            request.from_lsn = from_lsn
        key_list = [_key_tuple(k) for k in keys]
        if len(key_list) <= 1 or not key_list[0] or not fill_batch(request.key_batch, key_list):
            for key in key_list:
                fill_key(request.keys.add(), key)
        return Subscription(self._stub.Subscribe(request, metadata=self._metadata), from_lsn)

    def ping(self, payload: bytes = b"", reply_bytes: int = 0) -> None:
        """A no-op round trip (measures the transport alone). ``payload`` is sent and
        ignored; the answer carries ``reply_bytes`` bytes: a no-op moving as many bytes
        as a call being measured."""
        self._call(self._stub.Ping, pb.PingRequest(payload=payload, reply_bytes=reply_bytes))


__all__ = [
    "CaughtUp",
    "Change",
    "Client",
    "Heartbeat",
    "LoadProgress",
    "LoadResult",
    "Result",
    "Snapshot",
    "Subscription",
]
