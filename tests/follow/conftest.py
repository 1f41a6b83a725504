"""tests/follow: serve --follow against a real PostgreSQL 15 (tests/pg/upstream.py, started
with wal_level=logical). The upstream is the oracle: every table and view here is compared
with PostgreSQL's own answer to the same SQL at the same commit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pg"))

import upstream as pg_upstream


@pytest.fixture(scope="session")
def pgup() -> Any:
    reason = pg_upstream.skip_reason()
    if reason:
        pytest.skip(reason)
    return pg_upstream.upstream()
