"""Structured server logs: one record per line on stderr, as logfmt or JSON.

  ts=2026-11-21T10:00:00.123Z level=info logger=partialflow.server.app.main msg="serving" port=50051
  {"ts": "2026-11-21T10:00:00.123Z", "level": "info", "msg": "serving", "port": 50051, ...}

Fields passed with ``log.info("loaded", extra={"table": "t", "rows": 10})`` become their own
keys, so a log shipper can index them without parsing the message.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came in through ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record as ordered fields: ts, level, logger, msg, the extras, then any traceback."""
    fields: dict[str, Any] = {
        "ts": _timestamp(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            fields[key] = value
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(c in text for c in ' "=\n\t\\'):
        return text
    return json.dumps(text)  # quoted with escapes, which logfmt readers accept


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes or newlines are double-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in record_fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record), default=str)


def setup_logging(level: str = "INFO", fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in ``fmt``.

    Replaces the root logger's handlers, so calling it again reconfigures instead of
    doubling lines. py4j stays at WARNING even under DEBUG: it logs every message it
    exchanges with the JVM, which would drown the server's own records.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
