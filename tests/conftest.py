"""Shared fixtures: one small session-scoped local Spark for the whole test run."""

from __future__ import annotations

import pytest

from partialflow.server.spark import spark_session


@pytest.fixture(scope="session")
def spark():
    return spark_session("local[2]")
