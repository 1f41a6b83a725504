from google.protobuf import struct_pb2 as _struct_pb2
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
    __slots__ = ("columns", "rows", "lsn", "batch")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    lsn: int
    batch: RowBatch
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., lsn: _Optional[int] = ..., batch: _Optional[_Union[RowBatch, _Mapping]] = ...) -> None: ...

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

class LookupRequest(_message.Message):
    __slots__ = ("view", "keys", "min_lsn", "columnar")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_FIELD_NUMBER: _ClassVar[int]
    view: str
    keys: _containers.RepeatedCompositeFieldContainer[Key]
    min_lsn: int
    columnar: bool
    def __init__(self, view: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[Key, _Mapping]]] = ..., min_lsn: _Optional[int] = ..., columnar: _Optional[bool] = ...) -> None: ...

class KeyResult(_message.Message):
    __slots__ = ("key", "rows", "lsn", "batch")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    key: Key
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    lsn: int
    batch: RowBatch
    def __init__(self, key: _Optional[_Union[Key, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., lsn: _Optional[int] = ..., batch: _Optional[_Union[RowBatch, _Mapping]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("columns", "results")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    results: _containers.RepeatedCompositeFieldContainer[KeyResult]
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., results: _Optional[_Iterable[_Union[KeyResult, _Mapping]]] = ...) -> None: ...

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

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
