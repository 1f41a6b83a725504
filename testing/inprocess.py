"""A server in this process, on a Spark session the caller already has.

Tests and benchmarks start many servers; each would otherwise start a JVM of its own
(about 5 s). ``InProcessServer`` binds a free port, serves on the given session and
closes its engine when stopped; the session stays the caller's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from partialflow.client import Client
from partialflow.server.app.main import create_server, engine_of, stop_server
from partialflow.server.config import Config
from partialflow.server.engine import Engine


class InProcessServer:
    """``create_server`` on ``spark`` with ``Config(data_dir, port=0, **config)``."""

    def __init__(self, data_dir: str | os.PathLike[str], spark: Any, **config: Any) -> None:
        self.config = Config(data_dir=str(data_dir), port=0, **config)
        self.spark = spark
        self.server: Any = None
        self.engine: Engine | None = None
        self.address: str | None = None

    @property
    def data_dir(self) -> Path:
        return Path(self.config.data_dir)

    def start(self) -> InProcessServer:
        """Open storage and the dataflow, bind a free port and start serving."""
        self.server, port = create_server(self.config, spark=self.spark)
        self.engine = engine_of(self.server)
        self.server.start()
        self.address = f"{self.config.host}:{port}"
        return self

    def stop(self) -> None:
        """Stop serving and close the engine (storage flushes and closes)."""
        if self.server is not None:
            stop_server(self.server, grace=1.0)
            self.server = None

    def client(self, **kwargs: Any) -> Client:
        """A new client connected to this server."""
        assert self.address, "not started"
        return Client(self.address, **kwargs)

    def wait_applied(self, lsn: int, timeout: float = 600.0) -> float:
        """Block until the dataflow has applied ``lsn``; returns the monotonic time then."""
        assert self.engine is not None, "not started"
        self.engine.dataflow.executor.wait_for(lsn, time.monotonic() + timeout)
        return time.monotonic()

    def view_counters(self, view: str) -> dict[str, int]:
        """A view's hits, misses and upqueries (lock-free hits are drained first)."""
        assert self.engine is not None, "not started"
        c = self.engine.dataflow.stats().views[view]
        return {"hits": c.hits, "misses": c.misses, "upqueries": c.upqueries}

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
