"""Server configuration: one frozen dataclass, built by the CLI or by tests."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in a size such as ``64MB``, ``1GB``, ``1.5GiB`` or ``12345``.

    Units are binary (``1KB`` = 1024 bytes, as memory limits usually are); case is ignored.
    Raises ValueError naming the accepted forms.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"invalid size {text}: must not be negative")
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"invalid size {text!r}: expected a number of bytes with an optional unit "
            "B, KB, MB, GB or TB (e.g. 64MB, 1GB, 12345)"
        )
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class Config:
    """Everything a server needs to start; defaults are the embedded single-machine setup."""

    data_dir: str
    host: str = "127.0.0.1"
    port: int = 50051
    memory_limit: int | None = None
    spark_master: str = "local[2]"
    # gRPC handler threads: enough for many concurrent clients blocked in group commit
    # or waiting on an upquery.
    workers: int = 64
    # Upper bound on how long a lookup waits for a miss to be filled (and for min_lsn).
    upquery_timeout: float = 60.0
    # Storage tuning (see partialflow.server.storage.Storage).
    flush_rows: int = 20_000
    flush_interval: float = 1.0
    retention_lsns: int = 1_000_000
    max_segments: int = 16
    # Seconds in-flight calls get to finish on SIGTERM before they are cancelled.
    grace: float = 5.0
    max_message_bytes: int = 512 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("data_dir is required")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"invalid port {self.port}: must be 0..65535 (0 picks a free one)")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise ValueError(f"invalid memory limit {self.memory_limit}: must be positive")
