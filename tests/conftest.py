"""Shared fixtures: one small session-scoped local Spark for the whole test run."""

from __future__ import annotations

import itertools

import pytest

_ids = itertools.count()


@pytest.fixture
def uniq():
    """A prefix that keeps table and view names of tests sharing one server apart."""
    return f"t{next(_ids)}_"


@pytest.fixture(scope="session")
def spark():
    # Imported here: tests that need no Spark (tests/dataflow) then never import pyspark.
    from partialflow.server.spark import spark_session

    return spark_session("local[2]")


@pytest.fixture(scope="session")
def server(spark, tmp_path_factory):
    """One in-process server (create_server on the session Spark) shared by the whole run.

    Tests sharing it use their own table and view names. See tests/helpers.py for a
    subprocess server (crash/restart tests) and for in-process servers with other configs.
    """
    from helpers import InProcessServer

    srv = InProcessServer(tmp_path_factory.mktemp("server") / "data", spark).start()
    yield srv
    srv.stop()
