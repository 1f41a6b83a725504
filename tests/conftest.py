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
#: Seconds per directory under tests/ and phase (setup, call, teardown), and tests per
#: directory: printed at the end of a run, so every CI log says where its time went
#: (a fixture's start-up is in "setup", of the first test that needs it).
_times: dict[str, dict[str, float]] = {}
_tests: dict[str, int] = {}


def _directory(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    where = _directory(report.nodeid)
    phases = _times.setdefault(where, {"setup": 0.0, "call": 0.0, "teardown": 0.0})
    phases[report.when] += report.duration
    if report.when == "setup":
        _tests[where] = _tests.get(where, 0) + 1
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
    if len(_times) > 1:
        terminalreporter.write_sep("-", "seconds by directory")
        terminalreporter.write_line(
            f"{'directory':<20} {'tests':>6} {'setup':>8} {'call':>8} {'teardown':>8} {'total':>8}")
        rows = sorted(_times.items(), key=lambda kv: -sum(kv[1].values()))
        total = {k: sum(r[k] for _, r in rows) for k in ("setup", "call", "teardown")}
        for where, t in [*rows, ("all", total)]:
            n = _tests.get(where, sum(_tests.values()))
            terminalreporter.write_line(
                f"{where:<20} {n:>6} {t['setup']:>8.1f} {t['call']:>8.1f} "
                f"{t['teardown']:>8.1f} {sum(t.values()):>8.1f}")


@pytest.fixture
def uniq():
    """A prefix that keeps table and view names of tests sharing one server apart."""
    return f"t{next(_ids)}_"


@pytest.fixture(scope="session")
def spark():
    # Imported here: tests that need no Spark (tests/dataflow) then never import pyspark.
    from helpers import local_spark_conf

    from partialflow.server.spark import spark_session

    return spark_session("local[2]", conf=local_spark_conf())


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
