"""The typed statements the engine dispatches on (server/statements.py): what each SQL
statement parses into, checked without a server (the engine's answers to them are checked
through the service in tests/app and tests/client)."""

from __future__ import annotations

import pytest

from partialflow.server.errors import InvalidArgument
from partialflow.server.statements import (
    Begin,
    Commit,
    CreateTable,
    CreateView,
    Drop,
    ExplainCreate,
    ExplainView,
    Insert,
    Rollback,
    Select,
    parse,
)
from partialflow.server.storage import Column, TableSchema


def test_each_statement_parses_into_its_type():
    assert parse("SELECT a FROM t") == Select("SELECT a FROM t")
    assert parse("CREATE TABLE IF NOT EXISTS t (a INTEGER PRIMARY KEY, b VARCHAR(9))") == (
        CreateTable(TableSchema("t", (Column("a", "BIGINT", True), Column("b", "TEXT"))), True)
    )
    view = parse("CREATE VIEW v AS SELECT a FROM t WHERE a = ?")
    assert isinstance(view, CreateView) and (view.name, view.if_not_exists) == ("v", False)
    assert parse(view.query) == Select(view.query)  # the query, printed again, reads back
    assert parse("DROP VIEW IF EXISTS v") == Drop("VIEW", "v", True)
    assert parse("DROP TABLE t") == Drop("TABLE", "t", False)
    assert parse("INSERT INTO t (b, a) VALUES ('x', -1), (NULL, 2.5)") == (
        Insert("t", [("x", -1), (None, 2.5)], ["b", "a"])
    )
    assert parse("INSERT INTO t VALUES (TRUE)") == Insert("t", [(True,)], None)
    assert parse("EXPLAIN v") == ExplainView("v")
    explained = parse("EXPLAIN CREATE VIEW w AS SELECT a FROM t")
    assert isinstance(explained, ExplainCreate) and explained.name == "w"


def test_transaction_statements_are_typed_for_the_engine_to_refuse_or_run():
    assert isinstance(parse("BEGIN"), Begin)
    assert isinstance(parse("COMMIT"), Commit)
    assert isinstance(parse("ROLLBACK"), Rollback)


@pytest.mark.parametrize(
    "sql, message",
    [
        ("UPDATE t SET a = 1", "unsupported statement UPDATE"),
        ("CREATE OR REPLACE VIEW v AS SELECT a FROM t", "DROP VIEW first"),
        ("CREATE OR REPLACE TABLE t (a BIGINT)", "CREATE OR REPLACE TABLE is not supported"),
        ("CREATE TABLE t (a DATE)", "unsupported type DATE"),
        ("DROP TABLE a, b", "drop one table per statement"),
        ("DROP VIEW v CASCADE", "CASCADE is not supported"),
        ("INSERT INTO t SELECT * FROM u", "only INSERT ... VALUES"),
        ("INSERT INTO t VALUES (1 + 1)", "only literal values"),
        ("EXPLAIN SELECT 1", "EXPLAIN takes CREATE VIEW"),
        ("CREATE VIEW db.v AS SELECT a FROM t", "qualified names"),
    ],
)
def test_refused_statements_name_the_problem(sql, message):
    with pytest.raises(InvalidArgument, match=message):
        parse(sql)
