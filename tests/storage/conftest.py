"""Fixtures for storage tests: a Storage on real files under tmp_path, on the shared Spark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partialflow.server.storage import Column, Storage, TableSchema

# Background flushes/compactions are switched off by default so tests decide when they happen.
QUIET = dict(flush_rows=10**9, flush_interval=3600.0, max_segments=10**6)


@pytest.fixture
def make_store(tmp_path: Path, spark) -> Iterator[Callable[..., Storage]]:
    """Factory: ``make_store(**kwargs)`` opens a Storage on tmp_path/data; all are closed at
    the end of the test (crashed ones are skipped by close's idempotence)."""
    opened: list[Storage] = []

    def make(data_dir: Path | None = None, **kwargs) -> Storage:
        st = Storage(data_dir or tmp_path / "data", spark, **{**QUIET, **kwargs})
        st.open()
        opened.append(st)
        return st

    yield make
    for st in opened:
        st.close()


@pytest.fixture
def store(make_store) -> Storage:
    return make_store()


BAG = TableSchema(
    "t",
    (Column("k", "BIGINT"), Column("s", "TEXT"), Column("x", "DOUBLE"), Column("b", "BOOLEAN")),
)
KEYED = TableSchema("u", (Column("id", "BIGINT", True), Column("name", "TEXT")))
