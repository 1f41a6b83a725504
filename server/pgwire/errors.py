"""Errors as a PostgreSQL client sees them: one table from error class to SQLSTATE.

The engine raises ``partialflow.server.errors`` classes whose messages say what is wrong;
the SQLSTATE a driver branches on is chosen here, from the class and, where one class covers
several PostgreSQL conditions (InvalidArgument is both a syntax error and a bad value), from
what the message names. The message itself is passed through unchanged.
"""

from __future__ import annotations

import re

from partialflow.server import errors as pf

# SQLSTATEs used by the front end (PostgreSQL's errcodes.txt names in the comments).
SYNTAX_ERROR = "42601"  # syntax_error
UNDEFINED_TABLE = "42P01"  # undefined_table
UNDEFINED_COLUMN = "42703"  # undefined_column
UNDEFINED_OBJECT = "42704"  # undefined_object (a setting, a cursor's type)
DUPLICATE_TABLE = "42P07"  # duplicate_table
UNIQUE_VIOLATION = "23505"  # unique_violation
INVALID_TEXT = "22P02"  # invalid_text_representation
DATA_EXCEPTION = "22000"  # data_exception
NUMERIC_OUT_OF_RANGE = "22003"  # numeric_value_out_of_range
FEATURE_NOT_SUPPORTED = "0A000"  # feature_not_supported
QUERY_CANCELED = "57014"  # query_canceled
PROTOCOL_VIOLATION = "08P01"  # protocol_violation
INVALID_PASSWORD = "28P01"  # invalid_password
INVALID_AUTHORIZATION = "28000"  # invalid_authorization_specification
IN_FAILED_TRANSACTION = "25P02"  # in_failed_sql_transaction
INVALID_CURSOR = "34000"  # invalid_cursor_name
INVALID_STATEMENT = "26000"  # invalid_sql_statement_name
DUPLICATE_STATEMENT = "42P05"  # duplicate_prepared_statement
DUPLICATE_CURSOR = "42P03"  # duplicate_cursor
INVALID_PARAMETER = "22023"  # invalid_parameter_value
CANT_CHANGE_RUNTIME_PARAM = "55P02"  # cant_change_runtime_param
SERIALIZATION_FAILURE = "40001"  # serialization_failure
OBJECT_NOT_READY = "55000"  # object_not_in_prerequisite_state
UNAVAILABLE = "57P03"  # cannot_connect_now (the server is not ready or shutting down)
RESOURCES = "53000"  # insufficient_resources
TOO_MANY_CONNECTIONS = "53300"  # too_many_connections
INTERNAL = "XX000"  # internal_error
CARDINALITY_VIOLATION = "21000"  # cardinality_violation


class PgError(Exception):
    """An error raised by the front end itself, with its SQLSTATE."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def refused(message: str) -> PgError:
    """A statement or form we do not support (0A000), saying what to do instead."""
    return PgError(FEATURE_NOT_SUPPORTED, message)


# Class -> default SQLSTATE; the most specific class first.
_BY_CLASS: tuple[tuple[type[BaseException], str], ...] = (
    (pf.AlreadyExists, DUPLICATE_TABLE),
    (pf.NotFound, UNDEFINED_TABLE),
    (pf.OutOfRange, INVALID_PARAMETER),
    (pf.FailedPrecondition, OBJECT_NOT_READY),
    (pf.DeadlineExceeded, QUERY_CANCELED),
    (pf.ResourceExhausted, RESOURCES),
    (pf.Unavailable, UNAVAILABLE),
    (pf.InvalidArgument, DATA_EXCEPTION),
)

# Within a class, what the message names refines the SQLSTATE (first match wins).
_BY_MESSAGE: tuple[tuple[type[BaseException], re.Pattern[str], str], ...] = (
    (pf.FailedPrecondition, re.compile(r"more than one row returned by a subquery"),
     CARDINALITY_VIOLATION),
    (pf.AlreadyExists, re.compile(r"primary key|duplicate key"), UNIQUE_VIOLATION),
    (pf.NotFound, re.compile(r"unknown column|no column"), UNDEFINED_COLUMN),
    (pf.InvalidArgument, re.compile(r"unknown (column|field)|cannot resolve|UNRESOLVED_COLUMN",
                                    re.I), UNDEFINED_COLUMN),
    (pf.InvalidArgument, re.compile(r"unknown (table|view)|TABLE_OR_VIEW_NOT_FOUND", re.I),
     UNDEFINED_TABLE),
    (pf.InvalidArgument, re.compile(
        r"malformed SQL|unknown statement|cannot read the statement|syntax|PARSE_SYNTAX|"
        r"expected one statement|empty statement|invalid (view|table|column) name", re.I),
     SYNTAX_ERROR),
    (pf.InvalidArgument, re.compile(r"not supported|unsupported|only .* is supported", re.I),
     FEATURE_NOT_SUPPORTED),
    (pf.InvalidArgument, re.compile(r"out of range|too large|overflow", re.I),
     NUMERIC_OUT_OF_RANGE),
    # "column 'k' expects BIGINT, got 'x'" is storage's word for a literal of the wrong
    # type in an INSERT: PostgreSQL's invalid_text_representation, as for a parameter.
    (pf.InvalidArgument, re.compile(r"expected (a|an) (BIGINT|DOUBLE|TEXT|BOOLEAN|integer|"
                                    r"number|string|boolean)|expects (BIGINT|DOUBLE|TEXT|"
                                    r"BOOLEAN)|invalid input|cannot be", re.I),
     INVALID_TEXT),
)


def sqlstate(err: BaseException) -> str:
    """The SQLSTATE a PostgreSQL client expects for ``err``."""
    if isinstance(err, PgError):
        return err.sqlstate
    code = getattr(err, "sqlstate", None)
    if isinstance(code, str) and len(code) == 5:  # protocol violations, psycopg's DataError
        return code
    text = str(err)
    for cls, pattern, state in _BY_MESSAGE:
        if isinstance(err, cls) and pattern.search(text):
            return state
    for cls, state in _BY_CLASS:
        if isinstance(err, cls):
            return state
    return INTERNAL


def message_of(err: BaseException) -> str:
    text = str(err).strip()
    return text or type(err).__name__
