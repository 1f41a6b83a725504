"""Bad input through the client: the right error class, a message naming the problem,
nothing written, and the server keeps serving after each."""

from __future__ import annotations

import itertools
import os

import pytest
from grpc_health.v1 import health_pb2
from helpers import health_status

from partialflow.client import AlreadyExists, InvalidArgument, NotFound, PartialflowError

_ids = itertools.count(1000)


@pytest.fixture(scope="module")
def db(server):
    with server.client(timeout=60) as client:
        client.execute(
            "CREATE TABLE err_people (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE, ok BOOLEAN)"
        )
        client.execute("CREATE TABLE err_bag (x BIGINT, y TEXT)")
        client.insert("err_people", [(1, "ann", 1.0, True), (2, "bob", 2.0, False)])
        client.insert("err_bag", [(1, "a"), (1, "a"), (2, "b")])
        yield client


@pytest.fixture(autouse=True)
def still_serving(server, db):
    """After every test: health SERVING and a good write succeeds."""
    yield
    assert health_status(server.address) == health_pb2.HealthCheckResponse.SERVING
    assert db.insert("err_people", [(next(_ids), "ok", 0.5, True)]) > 0


def _people(db) -> list[tuple]:
    return sorted(db.query("SELECT id, name FROM err_people WHERE id < 1000").rows)


def _bag(db) -> list[tuple]:
    return sorted(db.query("SELECT x, y FROM err_bag").rows)


def test_unknown_table_is_not_found(db):
    with pytest.raises(NotFound, match="nope"):
        db.insert("nope", [(1,)])
    with pytest.raises(NotFound, match="nope"):
        db.execute("DROP TABLE nope")
    db.execute("DROP TABLE IF EXISTS nope")


@pytest.mark.parametrize(
    "bad_row",
    [
        (3, "cy", 3.0),
        (3, "cy", 3.0, True, "extra"),
        (3, "cy", "three", True),
        ("3", "cy", 3.0, True),
        (3, 4, 3.0, True),
        (3, "cy", 3.0, "yes"),
    ],
    ids=["too-few", "too-many", "text-in-double", "text-in-bigint", "int-in-text", "text-in-bool"],
)
def test_a_bad_row_refuses_the_whole_batch(db, bad_row):
    before = _people(db)
    with pytest.raises(InvalidArgument) as info:
        db.insert("err_people", [(10, "ok", 1.0, True), (11, "ok", 1.0, True), bad_row])
    assert "err_people" in str(info.value) or "row" in str(info.value)
    assert _people(db) == before


def test_duplicate_primary_key_is_already_exists_and_writes_nothing(db):
    before = _people(db)
    with pytest.raises(AlreadyExists):
        db.insert("err_people", [(20, "new", 1.0, True), (1, "ann again", 1.0, True)])
    assert _people(db) == before


def test_malformed_sql_is_invalid_argument(db):
    with pytest.raises(InvalidArgument, match="malformed SQL"):
        db.execute("CREATE TABLE broken (a BIGINT")
    with pytest.raises(InvalidArgument, match="malformed SQL"):
        db.query("SELECT FROM WHERE")
    with pytest.raises(InvalidArgument, match="empty"):
        db.execute("   ")


@pytest.mark.parametrize(
    "sql, named",
    [
        ("UPDATE err_bag SET x = 1", "UPDATE"),
        ("DELETE FROM err_bag WHERE x = 1", "DELETE"),
        ("CREATE INDEX i ON err_bag (x)", "INDEX"),
        ("CREATE TABLE d (a DATE)", "DATE"),
        ("CREATE TABLE d (a BIGINT NOT NULL)", "NOT NULL"),
        ("CREATE TABLE d AS SELECT 1 AS a", "AS"),
        ("SELECT 1; SELECT 2", "one statement"),
    ],
)
def test_unsupported_statements_are_named(db, sql, named):
    with pytest.raises(InvalidArgument, match=named):
        db.execute(sql)


def test_query_refuses_anything_but_select(db):
    with pytest.raises(InvalidArgument, match="SELECT"):
        db.query("DROP TABLE err_bag")
    assert _bag(db)


def test_duplicate_table_is_already_exists(db):
    with pytest.raises(AlreadyExists, match="err_bag"):
        db.execute("CREATE TABLE err_bag (z TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS err_bag (z TEXT)")
    assert db.query("SELECT * FROM err_bag WHERE 1 = 0").columns == ["x", "y"]


def _all_paths(root) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return found


@pytest.mark.parametrize(
    "sql",
    [
        'CREATE TABLE "../evil" (a BIGINT)',
        'CREATE TABLE "/tmp/evil" (a BIGINT)',
        'CREATE TABLE "a b" (a BIGINT)',
        'CREATE TABLE ok_name ("../evil" BIGINT)',
        'CREATE TABLE ok_name (a BIGINT, "a;b" TEXT)',
    ],
)
def test_names_that_are_not_identifiers_are_refused_and_create_nothing(server, db, sql):
    root = server.data_dir.parent.parent  # the test's whole temp area, above the data dir
    before = _all_paths(root)
    with pytest.raises(InvalidArgument):
        db.execute(sql)
    created = _all_paths(root) - before
    assert not [p for p in created if "evil" in p or "ok_name" in p], created
    assert not os.path.exists("/tmp/evil")


def test_writes_to_a_path_like_table_name_are_refused(server, db):
    with pytest.raises((InvalidArgument, NotFound)):
        db.insert("../err_bag", [(1, "a")])
    assert not (server.data_dir.parent / "err_bag").exists()


def test_delete_of_a_missing_row_is_not_found_and_deletes_nothing(db):
    before = _bag(db)
    with pytest.raises(NotFound):
        db.delete("err_bag", [(2, "b"), (9, "missing")])
    assert _bag(db) == before
    # bag semantics: two copies of (1, "a") exist, a third cannot be deleted
    with pytest.raises(NotFound):
        db.delete("err_bag", [(1, "a"), (1, "a"), (1, "a")])
    assert _bag(db) == before


def test_delete_removes_one_occurrence(db):
    db.insert("err_bag", [(7, "dup"), (7, "dup")])
    db.delete("err_bag", [(7, "dup")])
    assert db.query("SELECT x, y FROM err_bag WHERE x = 7").rows == [(7, "dup")]
    db.delete("err_bag", [(7, "dup")])


def test_update_of_a_missing_row_changes_nothing(db):
    before = _people(db)
    with pytest.raises(NotFound):
        db.update("err_people", [(99, "ghost", 1.0, True)], [(99, "ghost", 2.0, True)])
    assert _people(db) == before


def test_errors_are_partialflow_errors_with_codes(db):
    with pytest.raises(PartialflowError) as info:
        db.insert("nope", [(1,)])
    assert info.value.code.name == "NOT_FOUND"
