"""Bad input is refused precisely, writes nothing, and leaves the store working."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import BAG, KEYED

from partialflow.server.errors import AlreadyExists, InvalidArgument, NotFound
from partialflow.server.storage import Column, Storage, TableSchema, normalize_type


def rows_of(st: Storage, table: str) -> Counter:
    return Counter(st.query(f"SELECT * FROM {table}")[1])


def test_type_arity_and_null_checks_write_nothing(store: Storage) -> None:
    store.create_table(BAG)
    store.create_table(KEYED)
    base = [(1, "a", 1.0, True), (2, None, None, None)]
    lsn = store.write("t", base)
    bad_batches = [
        ([(3, "c", 1.0, True), (4, "d", 2.0, False), (5, "e", 3.0)], r"row 2: expected 4 values"),
        (
            [(3, "c", 1.0, True), ("abc", "d", 2.0, False)],
            r"table 't' row 1: column 'k' expects BIGINT, got 'abc'",
        ),
        ([(True, "c", 1.0, True)], r"column 'k' expects BIGINT, got True"),
        ([(3, 5, 1.0, True)], r"column 's' expects TEXT, got 5"),
        ([(3, "c", "1.0", True)], r"column 'x' expects DOUBLE, got '1.0'"),
        ([(3, "c", 1.0, 1)], r"column 'b' expects BOOLEAN, got 1"),
        ([(2**63, "c", 1.0, True)], r"out of the BIGINT \(64-bit\) range"),
        ([(3, "\ud800", 1.0, True)], r"not valid UTF-8"),
        (["abcd"], r"row 0: expected a sequence of 4 values"),
    ]
    for batch, msg in bad_batches:
        with pytest.raises(InvalidArgument, match=msg):
            store.write("t", batch)
    with pytest.raises(InvalidArgument, match=r"delete row 0: column 'k' expects BIGINT"):
        store.write("t", [(9, "z", 0.0, False)], deletes=[("x", "a", 1.0, True)])
    with pytest.raises(
        InvalidArgument,
        match=r"table 'u' row 1: column 'id' is part of the PRIMARY KEY and cannot be NULL",
    ):
        store.write("u", [(1, "a"), (None, "b")])
    assert store.last_lsn == lsn  # no LSN was consumed by a refused batch
    # DOUBLE accepts ints (stored as float); the store keeps working after every refusal.
    lsn2 = store.write("t", [(3, "c", 7, False)])
    assert lsn2 == lsn + 1
    assert rows_of(store, "t") == Counter(base + [(3, "c", 7.0, False)])


def test_primary_key_and_delete_checks(store: Storage) -> None:
    store.create_table(KEYED)
    store.create_table(BAG)
    store.write("u", [(1, "a"), (2, "b")])
    with pytest.raises(
        AlreadyExists, match=r"table 'u' row 1: primary key \(id\)=\(1\) already exists"
    ):
        store.write("u", [(3, "c"), (1, "x")])
    with pytest.raises(AlreadyExists, match=r"appears twice in this batch \(rows 0 and 1\)"):
        store.write("u", [(5, "c"), (5, "d")])
    # update of the same key (delete old, insert new) in one write is fine...
    store.write("u", [(1, "A")], deletes=[(1, "a")])
    # ...but a delete must match the whole row, not just the key.
    with pytest.raises(
        NotFound, match=r"table 'u' delete row 0: row \(2, 'wrong'\) is not in the table"
    ):
        store.write("u", [(2, "B")], deletes=[(2, "wrong")])
    # Still pending in the overlay (not yet indexed) or already indexed: both are checked.
    store.write("u", [(7, "g")])
    with pytest.raises(AlreadyExists):
        store.write("u", [(7, "h")])

    store.write("t", [(1, "a", 1.0, True)] * 2)
    with pytest.raises(
        NotFound, match=r"deletes 3 copies of \(1, 'a', 1.0, True\) but the table holds 2"
    ):
        store.write("t", deletes=[(1, "a", 1.0, True)] * 3)
    with pytest.raises(NotFound, match="is not in the table"):
        store.write("t", [(5, "e", 0.0, False)], deletes=[(9, "z", 0.0, False)])
    lsn = store.write("t", deletes=[(1, "a", 1.0, True)] * 2)
    with pytest.raises(NotFound):
        store.write("t", deletes=[(1, "a", 1.0, True)])
    assert store.last_lsn == lsn
    store.flush()
    store.write("t", [(1, "a", 1.0, True)])
    store.write("t", deletes=[(1, "a", 1.0, True)])  # delete of a re-inserted row works
    assert rows_of(store, "u") == Counter([(1, "A"), (2, "b"), (7, "g")])
    assert rows_of(store, "t") == Counter()


def test_names_are_validated_and_stay_inside_data_dir(store: Storage, tmp_path: Path) -> None:
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for name in ["../x", "a b", "select", "", "x/y", "a" * 65, "_lsn_ok/..", "1abc", "from"]:
        with pytest.raises(InvalidArgument):
            store.create_table(TableSchema(name, (Column("a", "BIGINT"),)))
    for col in ["../c", "a b", "where", "", "_lsn", "_DIFF"]:
        with pytest.raises(InvalidArgument):
            store.create_table(TableSchema("ok", (Column(col, "BIGINT"),)))
    with pytest.raises(InvalidArgument, match="duplicate column name 'A'"):
        store.create_table(TableSchema("ok", (Column("a", "BIGINT"), Column("A", "TEXT"))))
    with pytest.raises(InvalidArgument, match="at least one column"):
        store.create_table(TableSchema("ok", ()))
    with pytest.raises(InvalidArgument, match="types are BIGINT/INT"):
        store.create_table(TableSchema("ok", (Column("a", "DATE"),)))  # type: ignore[arg-type]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()
    assert store.tables() == []

    store.create_table(TableSchema("Visit", (Column("user", "varchar"), Column("n", "INT", True))))
    assert store.table("visit").columns == (Column("user", "TEXT"), Column("n", "BIGINT", True))
    with pytest.raises(AlreadyExists, match="table 'Visit' already exists"):
        store.create_table(TableSchema("VISIT", (Column("a", "BIGINT"),)))
    with pytest.raises(NotFound, match=r"unknown table 'foo'; tables are: Visit"):
        store.table("foo")
    with pytest.raises(NotFound, match="unknown table 'foo'"):
        store.write("foo", [(1,)])
    with pytest.raises(NotFound):
        store.drop_table("foo")
    assert normalize_type("integer") == "BIGINT" and normalize_type("REAL") == "DOUBLE"
    assert normalize_type("VARCHAR(20)") == "TEXT" and normalize_type("bool") == "BOOLEAN"
    # Files only ever appear under data_dir/tables/<lower-cased name>.
    assert {p.name for p in (store.data_dir / "tables").iterdir()} == {"visit"}


def test_views_and_drop_table(make_store, tmp_path: Path) -> None:
    st = make_store()
    st.create_table(KEYED)
    st.save_view("v1", "SELECT * FROM u WHERE id = ?")
    st.save_view("v2", "SELECT name FROM u")
    with pytest.raises(AlreadyExists):
        st.save_view("V1", "SELECT 1")
    with pytest.raises(AlreadyExists):
        st.save_view("u", "SELECT 1")
    with pytest.raises(InvalidArgument):
        st.save_view("bad name", "SELECT 1")
    st.drop_view("v1")
    with pytest.raises(NotFound, match="unknown view 'v1'"):
        st.drop_view("v1")
    st.write("u", [(1, "a")])
    st.flush()
    st.write("u", [(2, "b")])
    st.drop_table("u")
    assert not (st.data_dir / "tables" / "u").exists()
    with pytest.raises(NotFound):
        st.query("SELECT * FROM u")
    st.create_table(KEYED)  # same name, fresh table: nothing of the old one shows up
    st.write("u", [(1, "again")])
    st.close()
    st2 = make_store()
    assert st2.views() == [("v2", "SELECT name FROM u")]
    assert Counter(st2.query("SELECT * FROM u")[1]) == Counter([(1, "again")])
    with pytest.raises(AlreadyExists):
        st2.write("u", [(1, "dup")])
