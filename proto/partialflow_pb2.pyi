from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Value(_message.Message):
    __slots__ = ("null_value", "int_value", "double_value", "string_value", "bool_value")
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    null_value: bool
    int_value: int
    double_value: float
    string_value: str
    bool_value: bool
    def __init__(self, null_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Key(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("kind", "ints", "doubles", "strings", "bools", "values", "nulls")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MIXED: _ClassVar[Column.Kind]
        INT: _ClassVar[Column.Kind]
        DOUBLE: _ClassVar[Column.Kind]
        STRING: _ClassVar[Column.Kind]
        BOOL: _ClassVar[Column.Kind]
    MIXED: Column.Kind
    INT: Column.Kind
    DOUBLE: Column.Kind
    STRING: Column.Kind
    BOOL: Column.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    DOUBLES_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    BOOLS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NULLS_FIELD_NUMBER: _ClassVar[int]
    kind: Column.Kind
    ints: _containers.RepeatedScalarFieldContainer[int]
    doubles: _containers.RepeatedScalarFieldContainer[float]
    strings: _containers.RepeatedScalarFieldContainer[str]
    bools: _containers.RepeatedScalarFieldContainer[bool]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    nulls: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[Column.Kind, str]] = ..., ints: _Optional[_Iterable[int]] = ..., doubles: _Optional[_Iterable[float]] = ..., strings: _Optional[_Iterable[str]] = ..., bools: _Optional[_Iterable[bool]] = ..., values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., nulls: _Optional[_Iterable[int]] = ...) -> None: ...

class RowBatch(_message.Message):
    __slots__ = ("num_rows", "columns")
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    num_rows: int
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, num_rows: _Optional[int] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class ResultSet(_message.Message):
    __slots__ = ("columns", "rows", "lsn", "batch", "upstream_lsn")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    lsn: int
    batch: RowBatch
    upstream_lsn: str
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., lsn: _Optional[int] = ..., batch: _Optional[_Union[RowBatch, _Mapping]] = ..., upstream_lsn: _Optional[str] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("sql", "columnar")
    SQL_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_FIELD_NUMBER: _ClassVar[int]
    sql: str
    columnar: bool
    def __init__(self, sql: _Optional[str] = ..., columnar: _Optional[bool] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("table", "inserts", "deletes", "insert_batch", "delete_batch")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    INSERTS_FIELD_NUMBER: _ClassVar[int]
    DELETES_FIELD_NUMBER: _ClassVar[int]
    INSERT_BATCH_FIELD_NUMBER: _ClassVar[int]
    DELETE_BATCH_FIELD_NUMBER: _ClassVar[int]
    table: str
    inserts: _containers.RepeatedCompositeFieldContainer[Row]
    deletes: _containers.RepeatedCompositeFieldContainer[Row]
    insert_batch: RowBatch
    delete_batch: RowBatch
    def __init__(self, table: _Optional[str] = ..., inserts: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., deletes: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., insert_batch: _Optional[_Union[RowBatch, _Mapping]] = ..., delete_batch: _Optional[_Union[RowBatch, _Mapping]] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("lsn",)
    LSN_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    def __init__(self, lsn: _Optional[int] = ...) -> None: ...

class TransactRequest(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[WriteRequest]
    def __init__(self, changes: _Optional[_Iterable[_Union[WriteRequest, _Mapping]]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("view", "keys", "min_lsn", "key_batch", "min_upstream_lsn")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    KEY_BATCH_FIELD_NUMBER: _ClassVar[int]
    MIN_UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    view: str
    keys: _containers.RepeatedCompositeFieldContainer[Key]
    min_lsn: int
    key_batch: RowBatch
    min_upstream_lsn: str
    def __init__(self, view: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[Key, _Mapping]]] = ..., min_lsn: _Optional[int] = ..., key_batch: _Optional[_Union[RowBatch, _Mapping]] = ..., min_upstream_lsn: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("columns", "rows", "offsets", "lsn", "key_lsns", "upstream_lsn", "key_upstream_lsns")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    KEY_LSNS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    KEY_UPSTREAM_LSNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: RowBatch
    offsets: _containers.RepeatedScalarFieldContainer[int]
    lsn: int
    key_lsns: _containers.RepeatedScalarFieldContainer[int]
    upstream_lsn: str
    key_upstream_lsns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Union[RowBatch, _Mapping]] = ..., offsets: _Optional[_Iterable[int]] = ..., lsn: _Optional[int] = ..., key_lsns: _Optional[_Iterable[int]] = ..., upstream_lsn: _Optional[str] = ..., key_upstream_lsns: _Optional[_Iterable[str]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("sql", "as_of", "columnar")
    SQL_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_FIELD_NUMBER: _ClassVar[int]
    sql: str
    as_of: int
    columnar: bool
    def __init__(self, sql: _Optional[str] = ..., as_of: _Optional[int] = ..., columnar: _Optional[bool] = ...) -> None: ...

class EvictRequest(_message.Message):
    __slots__ = ("view", "key")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    view: str
    key: Key
    def __init__(self, view: _Optional[str] = ..., key: _Optional[_Union[Key, _Mapping]] = ...) -> None: ...

class EvictResponse(_message.Message):
    __slots__ = ("evicted",)
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    evicted: int
    def __init__(self, evicted: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ViewStats(_message.Message):
    __slots__ = ("keys_filled", "hits", "misses", "upqueries", "evictions", "memory_bytes")
    KEYS_FILLED_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    UPQUERIES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    keys_filled: int
    hits: int
    misses: int
    upqueries: int
    evictions: int
    memory_bytes: int
    def __init__(self, keys_filled: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., upqueries: _Optional[int] = ..., evictions: _Optional[int] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class Percentiles(_message.Message):
    __slots__ = ("p50", "p90", "p99", "count")
    P50_FIELD_NUMBER: _ClassVar[int]
    P90_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    p50: float
    p90: float
    p99: float
    count: int
    def __init__(self, p50: _Optional[float] = ..., p90: _Optional[float] = ..., p99: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class StorageStats(_message.Message):
    __slots__ = ("lsn", "flushed_lsn", "index_lsn", "horizon", "segments", "memtable_rows", "flushes", "compactions", "fsyncs", "wal_bytes", "wal_files", "pinned_snapshots", "clustering", "disk_free_bytes", "disk_reserve_bytes", "disk_short", "writes_refused_disk_full", "disk_full_episodes", "flush_failures", "compaction_failures", "index_failures")
    class HorizonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SegmentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ClusteringEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ClusterColumns
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ClusterColumns, _Mapping]] = ...) -> None: ...
    LSN_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_LSN_FIELD_NUMBER: _ClassVar[int]
    INDEX_LSN_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    MEMTABLE_ROWS_FIELD_NUMBER: _ClassVar[int]
    FLUSHES_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    FSYNCS_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAL_FILES_FIELD_NUMBER: _ClassVar[int]
    PINNED_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERING_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_SHORT_FIELD_NUMBER: _ClassVar[int]
    WRITES_REFUSED_DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_EPISODES_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FAILURES_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FAILURES_FIELD_NUMBER: _ClassVar[int]
    INDEX_FAILURES_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    flushed_lsn: int
    index_lsn: int
    horizon: _containers.ScalarMap[str, int]
    segments: _containers.ScalarMap[str, int]
    memtable_rows: int
    flushes: int
    compactions: int
    fsyncs: int
    wal_bytes: int
    wal_files: int
    pinned_snapshots: int
    clustering: _containers.MessageMap[str, ClusterColumns]
    disk_free_bytes: int
    disk_reserve_bytes: int
    disk_short: int
    writes_refused_disk_full: int
    disk_full_episodes: int
    flush_failures: int
    compaction_failures: int
    index_failures: int
    def __init__(self, lsn: _Optional[int] = ..., flushed_lsn: _Optional[int] = ..., index_lsn: _Optional[int] = ..., horizon: _Optional[_Mapping[str, int]] = ..., segments: _Optional[_Mapping[str, int]] = ..., memtable_rows: _Optional[int] = ..., flushes: _Optional[int] = ..., compactions: _Optional[int] = ..., fsyncs: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., wal_files: _Optional[int] = ..., pinned_snapshots: _Optional[int] = ..., clustering: _Optional[_Mapping[str, ClusterColumns]] = ..., disk_free_bytes: _Optional[int] = ..., disk_reserve_bytes: _Optional[int] = ..., disk_short: _Optional[int] = ..., writes_refused_disk_full: _Optional[int] = ..., disk_full_episodes: _Optional[int] = ..., flush_failures: _Optional[int] = ..., compaction_failures: _Optional[int] = ..., index_failures: _Optional[int] = ...) -> None: ...

class ClusterColumns(_message.Message):
    __slots__ = ("columns",)
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, columns: _Optional[_Iterable[str]] = ...) -> None: ...

class UpqueryScan(_message.Message):
    __slots__ = ("row_groups_scanned", "row_groups_total", "bytes_scanned", "bytes_total")
    ROW_GROUPS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    row_groups_scanned: int
    row_groups_total: int
    bytes_scanned: int
    bytes_total: int
    def __init__(self, row_groups_scanned: _Optional[int] = ..., row_groups_total: _Optional[int] = ..., bytes_scanned: _Optional[int] = ..., bytes_total: _Optional[int] = ...) -> None: ...

class UpqueryScanStats(_message.Message):
    __slots__ = ("upqueries", "row_groups_scanned", "row_groups_total", "bytes_scanned", "bytes_total", "row_groups_scanned_per_upquery", "row_groups_total_per_upquery", "bytes_scanned_per_upquery", "bytes_total_per_upquery", "last")
    UPQUERIES_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_SCANNED_PER_UPQUERY_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_TOTAL_PER_UPQUERY_FIELD_NUMBER: _ClassVar[int]
    BYTES_SCANNED_PER_UPQUERY_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_PER_UPQUERY_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    upqueries: int
    row_groups_scanned: int
    row_groups_total: int
    bytes_scanned: int
    bytes_total: int
    row_groups_scanned_per_upquery: float
    row_groups_total_per_upquery: float
    bytes_scanned_per_upquery: float
    bytes_total_per_upquery: float
    last: UpqueryScan
    def __init__(self, upqueries: _Optional[int] = ..., row_groups_scanned: _Optional[int] = ..., row_groups_total: _Optional[int] = ..., bytes_scanned: _Optional[int] = ..., bytes_total: _Optional[int] = ..., row_groups_scanned_per_upquery: _Optional[float] = ..., row_groups_total_per_upquery: _Optional[float] = ..., bytes_scanned_per_upquery: _Optional[float] = ..., bytes_total_per_upquery: _Optional[float] = ..., last: _Optional[_Union[UpqueryScan, _Mapping]] = ...) -> None: ...

class WriteStats(_message.Message):
    __slots__ = ("writes", "rows_inserted", "rows_deleted", "loads", "load_rows", "transactions")
    WRITES_FIELD_NUMBER: _ClassVar[int]
    ROWS_INSERTED_FIELD_NUMBER: _ClassVar[int]
    ROWS_DELETED_FIELD_NUMBER: _ClassVar[int]
    LOADS_FIELD_NUMBER: _ClassVar[int]
    LOAD_ROWS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    writes: int
    rows_inserted: int
    rows_deleted: int
    loads: int
    load_rows: int
    transactions: int
    def __init__(self, writes: _Optional[int] = ..., rows_inserted: _Optional[int] = ..., rows_deleted: _Optional[int] = ..., loads: _Optional[int] = ..., load_rows: _Optional[int] = ..., transactions: _Optional[int] = ...) -> None: ...

class VerifierMismatch(_message.Message):
    __slots__ = ("view", "key", "lsn", "served", "expected")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    view: str
    key: _containers.RepeatedCompositeFieldContainer[Value]
    lsn: int
    served: _containers.RepeatedScalarFieldContainer[str]
    expected: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, view: _Optional[str] = ..., key: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., lsn: _Optional[int] = ..., served: _Optional[_Iterable[str]] = ..., expected: _Optional[_Iterable[str]] = ...) -> None: ...

class VerifierStats(_message.Message):
    __slots__ = ("enabled", "sample", "max_per_second", "sampled", "dropped", "checks", "mismatches", "skipped", "errors", "queued", "last_mismatch")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    LAST_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    sample: float
    max_per_second: float
    sampled: int
    dropped: int
    checks: int
    mismatches: int
    skipped: int
    errors: int
    queued: int
    last_mismatch: VerifierMismatch
    def __init__(self, enabled: _Optional[bool] = ..., sample: _Optional[float] = ..., max_per_second: _Optional[float] = ..., sampled: _Optional[int] = ..., dropped: _Optional[int] = ..., checks: _Optional[int] = ..., mismatches: _Optional[int] = ..., skipped: _Optional[int] = ..., errors: _Optional[int] = ..., queued: _Optional[int] = ..., last_mismatch: _Optional[_Union[VerifierMismatch, _Mapping]] = ...) -> None: ...

class CheckpointStats(_message.Message):
    __slots__ = ("enabled", "interval_s", "taken", "failed", "last_error", "compactions", "last_seq", "last_lsn", "last_kind", "last_bytes", "last_duration_s", "last_age_s", "chain_files", "chain_bytes", "recovered_from", "recovered_lsn", "recovered_keys", "replayed_writes", "cold_views", "recovery_s")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    TAKEN_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_LSN_FIELD_NUMBER: _ClassVar[int]
    LAST_KIND_FIELD_NUMBER: _ClassVar[int]
    LAST_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    LAST_AGE_S_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FILES_FIELD_NUMBER: _ClassVar[int]
    CHAIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FROM_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_LSN_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_KEYS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_WRITES_FIELD_NUMBER: _ClassVar[int]
    COLD_VIEWS_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_S_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    interval_s: float
    taken: int
    failed: int
    last_error: str
    compactions: int
    last_seq: int
    last_lsn: int
    last_kind: str
    last_bytes: int
    last_duration_s: float
    last_age_s: float
    chain_files: int
    chain_bytes: int
    recovered_from: int
    recovered_lsn: int
    recovered_keys: int
    replayed_writes: int
    cold_views: _containers.RepeatedScalarFieldContainer[str]
    recovery_s: float
    def __init__(self, enabled: _Optional[bool] = ..., interval_s: _Optional[float] = ..., taken: _Optional[int] = ..., failed: _Optional[int] = ..., last_error: _Optional[str] = ..., compactions: _Optional[int] = ..., last_seq: _Optional[int] = ..., last_lsn: _Optional[int] = ..., last_kind: _Optional[str] = ..., last_bytes: _Optional[int] = ..., last_duration_s: _Optional[float] = ..., last_age_s: _Optional[float] = ..., chain_files: _Optional[int] = ..., chain_bytes: _Optional[int] = ..., recovered_from: _Optional[int] = ..., recovered_lsn: _Optional[int] = ..., recovered_keys: _Optional[int] = ..., replayed_writes: _Optional[int] = ..., cold_views: _Optional[_Iterable[str]] = ..., recovery_s: _Optional[float] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("lsn", "applied_lsn", "memory_limit", "memory_bytes", "partial_bytes", "full_bytes", "views", "upquery_ms", "spark_jobs", "state_anomalies", "counters", "storage", "writes", "verifier", "checkpoint", "upquery_scan", "spark", "follow")
    class ViewsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ViewStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ViewStats, _Mapping]] = ...) -> None: ...
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LSN_FIELD_NUMBER: _ClassVar[int]
    APPLIED_LSN_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_BYTES_FIELD_NUMBER: _ClassVar[int]
    VIEWS_FIELD_NUMBER: _ClassVar[int]
    UPQUERY_MS_FIELD_NUMBER: _ClassVar[int]
    SPARK_JOBS_FIELD_NUMBER: _ClassVar[int]
    STATE_ANOMALIES_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    UPQUERY_SCAN_FIELD_NUMBER: _ClassVar[int]
    SPARK_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    applied_lsn: int
    memory_limit: int
    memory_bytes: int
    partial_bytes: int
    full_bytes: int
    views: _containers.MessageMap[str, ViewStats]
    upquery_ms: Percentiles
    spark_jobs: int
    state_anomalies: int
    counters: _containers.ScalarMap[str, int]
    storage: StorageStats
    writes: WriteStats
    verifier: VerifierStats
    checkpoint: CheckpointStats
    upquery_scan: UpqueryScanStats
    spark: SparkStats
    follow: FollowStats
    def __init__(self, lsn: _Optional[int] = ..., applied_lsn: _Optional[int] = ..., memory_limit: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., partial_bytes: _Optional[int] = ..., full_bytes: _Optional[int] = ..., views: _Optional[_Mapping[str, ViewStats]] = ..., upquery_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., spark_jobs: _Optional[int] = ..., state_anomalies: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., storage: _Optional[_Union[StorageStats, _Mapping]] = ..., writes: _Optional[_Union[WriteStats, _Mapping]] = ..., verifier: _Optional[_Union[VerifierStats, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointStats, _Mapping]] = ..., upquery_scan: _Optional[_Union[UpqueryScanStats, _Mapping]] = ..., spark: _Optional[_Union[SparkStats, _Mapping]] = ..., follow: _Optional[_Union[FollowStats, _Mapping]] = ...) -> None: ...

class FollowStats(_message.Message):
    __slots__ = ("upstream", "slot", "slot_status", "state", "error", "last_applied_upstream_lsn", "caught_up_upstream_lsn", "lag_bytes", "lag_seconds", "rows_applied", "transactions_applied", "resnapshots", "retries", "tables", "refused", "copy", "last_commit_time")
    class RefusedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SLOT_STATUS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ROWS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    RESNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    COPY_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    upstream: str
    slot: str
    slot_status: str
    state: str
    error: str
    last_applied_upstream_lsn: str
    caught_up_upstream_lsn: str
    lag_bytes: int
    lag_seconds: float
    rows_applied: int
    transactions_applied: int
    resnapshots: int
    retries: int
    tables: _containers.RepeatedScalarFieldContainer[str]
    refused: _containers.ScalarMap[str, str]
    copy: str
    last_commit_time: str
    def __init__(self, upstream: _Optional[str] = ..., slot: _Optional[str] = ..., slot_status: _Optional[str] = ..., state: _Optional[str] = ..., error: _Optional[str] = ..., last_applied_upstream_lsn: _Optional[str] = ..., caught_up_upstream_lsn: _Optional[str] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., rows_applied: _Optional[int] = ..., transactions_applied: _Optional[int] = ..., resnapshots: _Optional[int] = ..., retries: _Optional[int] = ..., tables: _Optional[_Iterable[str]] = ..., refused: _Optional[_Mapping[str, str]] = ..., copy: _Optional[str] = ..., last_commit_time: _Optional[str] = ...) -> None: ...

class SparkStats(_message.Message):
    __slots__ = ("master", "up", "down_since", "down_seconds", "down_reason", "restarts", "restart_failures", "generation", "last_outage")
    MASTER_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    DOWN_SINCE_FIELD_NUMBER: _ClassVar[int]
    DOWN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DOWN_REASON_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESTART_FAILURES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAST_OUTAGE_FIELD_NUMBER: _ClassVar[int]
    master: str
    up: bool
    down_since: str
    down_seconds: float
    down_reason: str
    restarts: int
    restart_failures: int
    generation: int
    last_outage: SparkOutage
    def __init__(self, master: _Optional[str] = ..., up: _Optional[bool] = ..., down_since: _Optional[str] = ..., down_seconds: _Optional[float] = ..., down_reason: _Optional[str] = ..., restarts: _Optional[int] = ..., restart_failures: _Optional[int] = ..., generation: _Optional[int] = ..., last_outage: _Optional[_Union[SparkOutage, _Mapping]] = ...) -> None: ...

class SparkOutage(_message.Message):
    __slots__ = ("since", "seconds", "reason")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    since: str
    seconds: float
    reason: str
    def __init__(self, since: _Optional[str] = ..., seconds: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("view",)
    VIEW_FIELD_NUMBER: _ClassVar[int]
    view: str
    def __init__(self, view: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("text", "dot")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DOT_FIELD_NUMBER: _ClassVar[int]
    text: str
    dot: str
    def __init__(self, text: _Optional[str] = ..., dot: _Optional[str] = ...) -> None: ...

class FlushRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("lsn",)
    LSN_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    def __init__(self, lsn: _Optional[int] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class CompactFigures(_message.Message):
    __slots__ = ("segments_before", "segments_after", "rows_before", "rows_after", "horizon", "seconds")
    SEGMENTS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_AFTER_FIELD_NUMBER: _ClassVar[int]
    ROWS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ROWS_AFTER_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    segments_before: int
    segments_after: int
    rows_before: int
    rows_after: int
    horizon: int
    seconds: float
    def __init__(self, segments_before: _Optional[int] = ..., segments_after: _Optional[int] = ..., rows_before: _Optional[int] = ..., rows_after: _Optional[int] = ..., horizon: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ("total", "tables")
    class TablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: CompactFigures
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[CompactFigures, _Mapping]] = ...) -> None: ...
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    total: CompactFigures
    tables: _containers.MessageMap[str, CompactFigures]
    def __init__(self, total: _Optional[_Union[CompactFigures, _Mapping]] = ..., tables: _Optional[_Mapping[str, CompactFigures]] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("table", "path", "format", "header", "force", "options")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    table: str
    path: str
    format: str
    header: bool
    force: bool
    options: _containers.ScalarMap[str, str]
    def __init__(self, table: _Optional[str] = ..., path: _Optional[str] = ..., format: _Optional[str] = ..., header: _Optional[bool] = ..., force: _Optional[bool] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LoadProgress(_message.Message):
    __slots__ = ("phase", "done", "total", "message", "lsn", "rows")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    done: int
    total: int
    message: str
    lsn: int
    rows: int
    def __init__(self, phase: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., message: _Optional[str] = ..., lsn: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("view", "keys", "key_batch", "from_lsn", "max_buffered")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEY_BATCH_FIELD_NUMBER: _ClassVar[int]
    FROM_LSN_FIELD_NUMBER: _ClassVar[int]
    MAX_BUFFERED_FIELD_NUMBER: _ClassVar[int]
    view: str
    keys: _containers.RepeatedCompositeFieldContainer[Key]
    key_batch: RowBatch
    from_lsn: int
    max_buffered: int
    def __init__(self, view: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[Key, _Mapping]]] = ..., key_batch: _Optional[_Union[RowBatch, _Mapping]] = ..., from_lsn: _Optional[int] = ..., max_buffered: _Optional[int] = ...) -> None: ...

class KeyChange(_message.Message):
    __slots__ = ("key", "inserted", "deleted")
    KEY_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    key: Key
    inserted: _containers.RepeatedCompositeFieldContainer[Row]
    deleted: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, key: _Optional[_Union[Key, _Mapping]] = ..., inserted: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., deleted: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...

class SubscribeEvent(_message.Message):
    __slots__ = ("kind", "lsn", "columns", "changes", "upstream_lsn")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SNAPSHOT: _ClassVar[SubscribeEvent.Kind]
        CHANGES: _ClassVar[SubscribeEvent.Kind]
        HEARTBEAT: _ClassVar[SubscribeEvent.Kind]
    SNAPSHOT: SubscribeEvent.Kind
    CHANGES: SubscribeEvent.Kind
    HEARTBEAT: SubscribeEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_LSN_FIELD_NUMBER: _ClassVar[int]
    kind: SubscribeEvent.Kind
    lsn: int
    columns: _containers.RepeatedScalarFieldContainer[str]
    changes: _containers.RepeatedCompositeFieldContainer[KeyChange]
    upstream_lsn: str
    def __init__(self, kind: _Optional[_Union[SubscribeEvent.Kind, str]] = ..., lsn: _Optional[int] = ..., columns: _Optional[_Iterable[str]] = ..., changes: _Optional[_Iterable[_Union[KeyChange, _Mapping]]] = ..., upstream_lsn: _Optional[str] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("seq", "lsn", "kind", "bytes", "duration_s", "chain_files")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FILES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    lsn: int
    kind: str
    bytes: int
    duration_s: float
    chain_files: int
    def __init__(self, seq: _Optional[int] = ..., lsn: _Optional[int] = ..., kind: _Optional[str] = ..., bytes: _Optional[int] = ..., duration_s: _Optional[float] = ..., chain_files: _Optional[int] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ("payload", "reply_bytes")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    REPLY_BYTES_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    reply_bytes: int
    def __init__(self, payload: _Optional[bytes] = ..., reply_bytes: _Optional[int] = ...) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    def __init__(self, payload: _Optional[bytes] = ...) -> None: ...
