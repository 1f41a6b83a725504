"""Shared fixtures: one small session-scoped local Spark for the whole test run (per
worker process when the suite runs under pytest-xdist, see scripts/test.sh), and the
run summary lines of the fuzz tests."""

from __future__ import annotations

import itertools

import pytest

_ids = itertools.count()

#: ``request.node.user_properties`` entries named this, ``(title, line)``, are printed
#: in the run's closing summary (what a fuzz test covered). They travel with the test's
#: report, so they reach the summary from an xdist worker too, where config attributes
#: set in the worker would not.
SUMMARY = "partialflow_summary"
_summaries: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == SUMMARY:
            title, line = value
            _summaries.append((title, line))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for title, line in _summaries:
        terminalreporter.write_sep("-", title)
        terminalreporter.write_line(line)


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
