"""tests/app: the wire contract from outside (raw gRPC stubs, a protocol fuzz test)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzz test's count of messages, in every run's summary (without -s too)."""
    line = getattr(config, "partialflow_fuzz_report", None)
    if line:
        terminalreporter.write_sep("-", "protocol fuzz")
        terminalreporter.write_line(line)
