from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
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

class ResultSet(_message.Message):
    __slots__ = ("columns", "rows", "lsn")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    lsn: int
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., lsn: _Optional[int] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("sql",)
    SQL_FIELD_NUMBER: _ClassVar[int]
    sql: str
    def __init__(self, sql: _Optional[str] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("table", "inserts", "deletes")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    INSERTS_FIELD_NUMBER: _ClassVar[int]
    DELETES_FIELD_NUMBER: _ClassVar[int]
    table: str
    inserts: _containers.RepeatedCompositeFieldContainer[Row]
    deletes: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, table: _Optional[str] = ..., inserts: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., deletes: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("lsn",)
    LSN_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    def __init__(self, lsn: _Optional[int] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("view", "keys", "min_lsn")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MIN_LSN_FIELD_NUMBER: _ClassVar[int]
    view: str
    keys: _containers.RepeatedCompositeFieldContainer[Key]
    min_lsn: int
    def __init__(self, view: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[Key, _Mapping]]] = ..., min_lsn: _Optional[int] = ...) -> None: ...

class KeyResult(_message.Message):
    __slots__ = ("key", "rows", "lsn")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    key: Key
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    lsn: int
    def __init__(self, key: _Optional[_Union[Key, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., lsn: _Optional[int] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("columns", "results")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    results: _containers.RepeatedCompositeFieldContainer[KeyResult]
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., results: _Optional[_Iterable[_Union[KeyResult, _Mapping]]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("sql", "as_of")
    SQL_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    sql: str
    as_of: int
    def __init__(self, sql: _Optional[str] = ..., as_of: _Optional[int] = ...) -> None: ...

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

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
