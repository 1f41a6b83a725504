"""Server configuration: one frozen dataclass, built by the CLI or by tests.

``SERVE_OPTIONS`` lists every ``partialflow serve`` flag with the environment variable that
can stand in for it (``--memory-limit`` <- ``PARTIALFLOW_MEMORY_LIMIT``); the CLI builds its
parser from that table and ``resolve_config`` applies the precedence flag > environment >
default, so the docs' table (generated from it), the parser and the code cannot drift apart.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("logfmt", "json")


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


# The PostgreSQL listener's default port: not PostgreSQL's own 5432, so a server beside a
# local PostgreSQL starts without a clash.
DEFAULT_PG_PORT = 55432
PG_OFF = -1  # what ``--pg-port off`` parses to (a flag value of None means "not given")


@dataclass(frozen=True)
class Config:
    """Everything a server needs to start; defaults are the embedded single-machine setup."""

    data_dir: str
    # Loopback by default: the server is reachable from other machines only when asked.
    host: str = "127.0.0.1"
    port: int = 50051
    memory_limit: int | None = None
    # The disk tier under the in-memory states (dataflow/tier.py): bytes of evicted keys it
    # keeps on local disk, exact, instead of holes. None: no tier.
    disk_limit: int | None = None
    spark_master: str = "local[2]"
    # Spark settings passed through to the session after partialflow's own (they win):
    # Hadoop options for S3/HDFS as spark.hadoop.*, executor memory, the UI...
    spark_conf: tuple[tuple[str, str], ...] = ()
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
    # Free space kept on the data directory's filesystem beyond what queued writes and the
    # next flush need; writes are refused (RESOURCE_EXHAUSTED) below it. None: 64 MiB, or
    # 1/16 of the filesystem when smaller (storage/space.py).
    disk_reserve: int | None = None
    # Seconds in-flight calls get to finish on SIGTERM before they are cancelled.
    grace: float = 5.0
    max_message_bytes: int = 512 * 1024 * 1024
    # TLS: PEM files of the server's certificate (chain) and private key; both or neither.
    tls_cert: str | None = None
    tls_key: str | None = None
    # Bearer token every RPC but health must carry; kept out of repr so it never hits a log.
    auth_token: str | None = field(default=None, repr=False)
    # Prometheus endpoint on the same host: None = off, 0 = a free port.
    metrics_port: int | None = None
    log_level: str = "INFO"
    log_format: str = "logfmt"
    # Background read sampler (server/verifier.py): the fraction of served keys re-checked
    # against Spark at the LSN they were served at (0 = off), at most so many per second.
    verify_sample: float = 0.0
    verify_max_per_second: float = 2.0
    # Dataflow checkpoints: every so many seconds (0 = off), into this directory (None:
    # ``checkpoints`` under the data directory). Only changed keys are written each time.
    checkpoint_interval: float = 10.0
    checkpoint_dir: str | None = None
    # A read's fill also fetches the join index keys its keys depend on (dataflow/prefetch.py):
    # fewer index fills under dimension updates, for a background scan and memory per fill.
    index_prefetch: bool = True
    # The PostgreSQL protocol listener (server/pgwire) on the same host: None = off, 0 = a
    # free port. Its default follows --port 0 (see ``effective_pg_port``).
    pg_port: int | None = DEFAULT_PG_PORT
    # Follow an upstream PostgreSQL (server/follow): its URL, and which tables of its public
    # schema (empty: every one).
    follow: str | None = None
    follow_tables: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("data_dir is required")
        for name in ("port", "metrics_port", "pg_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ValueError(f"invalid {name} {value}: must be 0..65535 (0 picks a free one)")
        if self.disk_reserve is not None and self.disk_reserve < 0:
            raise ValueError(f"invalid disk reserve {self.disk_reserve}: must not be negative")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise ValueError(f"invalid memory limit {self.memory_limit}: must be positive")
        if self.disk_limit is not None and self.disk_limit <= 0:
            raise ValueError(f"invalid disk limit {self.disk_limit}: must be positive")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate (--tls-cert) and a key (--tls-key)")
        if self.auth_token is not None and not self.auth_token.strip():
            raise ValueError("the auth token is empty")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ValueError(f"invalid log level {self.log_level!r}; use {', '.join(LOG_LEVELS)}")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(
                f"invalid log format {self.log_format!r}; use {', '.join(LOG_FORMATS)}"
            )
        for name in ("workers", "flush_rows", "max_segments"):
            if getattr(self, name) <= 0:
                raise ValueError(f"invalid {name} {getattr(self, name)}: must be positive")
        for name in ("upquery_timeout", "flush_interval", "grace", "checkpoint_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"invalid {name} {getattr(self, name)}: must not be negative")
        if not 0 <= self.verify_sample <= 1:
            raise ValueError(f"invalid verify_sample {self.verify_sample}: a fraction, 0..1")
        if self.verify_max_per_second <= 0:
            raise ValueError(
                f"invalid verify_max_per_second {self.verify_max_per_second}: must be positive"
            )

    def effective_pg_port(self) -> int | None:
        """The port the PostgreSQL listener binds (None: off). The default port follows
        ``port`` 0: a server asked for a free gRPC port (tests, several servers on one
        machine) gets a free PostgreSQL port too instead of all contending for 55432."""
        if self.pg_port == DEFAULT_PG_PORT and self.port == 0:
            return 0
        return self.pg_port

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def checkpoint_path(self) -> str | None:
        """Where checkpoints go, or None when they are off."""
        if self.checkpoint_interval <= 0:
            return None
        return self.checkpoint_dir or os.path.join(self.data_dir, "checkpoints")


# -- the serve flags ---------------------------------------------------------------------


def _level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"invalid log level {text!r}; use one of {', '.join(LOG_LEVELS)}")
    return level


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"invalid choice {text!r}; use one of {', '.join(allowed)}")
        return text

    return parse


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError(f"invalid choice {text!r}; use on or off")
    return text == "on"


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _port_or_off(text: str) -> int:
    if text.strip().lower() == "off":
        return PG_OFF
    port = _int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid port {port}: must be 0..65535 (0 picks a free one) or off")
    return port


def parse_spark_conf(text: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` pairs separated by whitespace (one per flag, several in the variable);
    every key must be a Spark setting (``spark.*``: Hadoop options are ``spark.hadoop.*``)."""
    pairs = []
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"invalid Spark setting {item!r}: expected KEY=VALUE")
        if not key.startswith("spark."):
            raise ValueError(
                f"invalid Spark setting {key!r}: keys start with 'spark.' (Hadoop options "
                "are spark.hadoop.*, e.g. spark.hadoop.fs.s3a.endpoint=...)"
            )
        pairs.append((key, value))
    if not pairs:
        raise ValueError("expected KEY=VALUE")
    return tuple(pairs)


@dataclass(frozen=True)
class Option:
    """One ``serve`` flag: its Config field, how its text parses, and its help."""

    flag: str
    field: str
    parse: Callable[[str], Any]
    help: str
    metavar: str | None = None
    # Given several times, the values add up (the CLI flattens them into one tuple).
    repeat: bool = False

    @property
    def env(self) -> str:
        """The environment variable read when the flag is absent."""
        return "PARTIALFLOW_" + self.flag.lstrip("-").upper().replace("-", "_")


SERVE_OPTIONS: tuple[Option, ...] = (
    Option("--data", "data_dir", str, "data directory (created if missing); required", "DIR"),
    Option("--host", "host", str, "address to listen on (default 127.0.0.1: this machine only)"),
    Option("--port", "port", _int, "gRPC port (default 50051; 0 picks a free one)"),
    Option(
        "--memory-limit", "memory_limit", parse_size, "state memory limit, e.g. 64MB, 1GB", "SIZE"
    ),
    Option(
        "--disk-limit", "disk_limit", parse_size,
        "keep keys evicted for memory on local disk, up to SIZE (e.g. 10GB), instead of "
        "dropping them; a read of one is a local read, not an upquery", "SIZE"
    ),
    Option("--spark-master", "spark_master", str, "any Spark master (default local[2])", "MASTER"),
    Option(
        "--spark-conf",
        "spark_conf",
        parse_spark_conf,
        "a Spark setting for the session, e.g. spark.hadoop.fs.s3a.endpoint=URL (repeatable)",
        "KEY=VALUE",
        repeat=True,
    ),
    Option("--tls-cert", "tls_cert", str, "PEM certificate (chain): serve TLS", "FILE"),
    Option("--tls-key", "tls_key", str, "PEM private key of --tls-cert", "FILE"),
    Option(
        "--auth-token",
        "auth_token",
        str,
        "require 'authorization: Bearer TOKEN' on every RPC but health",
        "TOKEN",
    ),
    Option(
        "--auth-token-file", "auth_token_file", str, "read the token from FILE (first line)", "FILE"
    ),
    Option(
        "--pg-port",
        "pg_port",
        _port_or_off,
        f"PostgreSQL protocol port (default {DEFAULT_PG_PORT}, a free one with --port 0; "
        "0 picks a free one; off disables it)",
        "PORT|off",
    ),
    Option(
        "--metrics-port",
        "metrics_port",
        _int,
        "serve Prometheus metrics at http://HOST:PORT/metrics (default off; 0 picks a free port)",
        "PORT",
    ),
    Option(
        "--follow",
        "follow",
        str,
        "follow an upstream PostgreSQL: its tables become read-only tables here, kept by "
        "logical replication (e.g. postgresql://user@host/db; needs wal_level=logical)",
        "URL",
    ),
    Option(
        "--follow-tables",
        "follow_tables",
        _names,
        "with --follow: these tables of the upstream's public schema (default: all)",
        "A,B,...",
    ),
    Option("--log-level", "log_level", _level, "DEBUG, INFO (default), WARNING or ERROR", "LEVEL"),
    Option(
        "--log-format",
        "log_format",
        _choice(*LOG_FORMATS),
        "logfmt (default: key=value) or json (one object per line)",
        "FORMAT",
    ),
    Option("--workers", "workers", _int, "gRPC handler threads (default 64)", "N"),
    Option(
        "--upquery-timeout",
        "upquery_timeout",
        _float,
        "seconds a lookup waits for a fill (default 60)",
        "SECONDS",
    ),
    Option(
        "--flush-rows",
        "flush_rows",
        _int,
        "flush logged writes to Parquet at this many rows (default 20000)",
        "N",
    ),
    Option(
        "--flush-interval", "flush_interval", _float, "...or this often (default 1.0 s)", "SECONDS"
    ),
    Option(
        "--retention-lsns",
        "retention_lsns",
        _int,
        "as_of reads stay exact this many LSNs back (default 1000000)",
        "N",
    ),
    Option(
        "--max-segments",
        "max_segments",
        _int,
        "compact a table past this many segments (default 16)",
        "N",
    ),
    Option(
        "--disk-reserve",
        "disk_reserve",
        parse_size,
        "free space kept on the data filesystem; writes are refused below it (default 64MB, "
        "or 1/16 of the filesystem if smaller)",
        "SIZE",
    ),
    Option(
        "--grace", "grace", _float, "seconds in-flight calls get on SIGTERM (default 5)", "SECONDS"
    ),
    Option(
        "--checkpoint-interval",
        "checkpoint_interval",
        _float,
        "checkpoint the views' state this often, only what changed (default 10; 0: off)",
        "SECONDS",
    ),
    Option(
        "--checkpoint-dir",
        "checkpoint_dir",
        str,
        "where checkpoints go (default DIR/checkpoints under --data)",
        "DIR",
    ),
    Option(
        "--index-prefetch",
        "index_prefetch",
        _on_off,
        "a read's fill also fetches the join index keys it depends on (default on)",
        "on|off",
    ),
    Option(
        "--verify-sample",
        "verify_sample",
        _float,
        "re-check this fraction of served reads against Spark at their LSN (default 0: off)",
        "RATE",
    ),
    Option(
        "--verify-max-per-second",
        "verify_max_per_second",
        _float,
        "at most this many of those checks per second (default 2)",
        "N",
    ),
)


def read_token_file(path: str) -> str:
    """The token in ``path``: its first line, stripped (ValueError naming the problem)."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as err:
        raise ValueError(f"cannot read the auth token file {path}: {err.strerror}") from None
    if not token:
        raise ValueError(f"the auth token file {path} is empty")
    return token


def resolve_config(given: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Config:
    """A Config from flag values (``None`` = not given) with the environment filling the gaps.

    ``given`` maps option fields to parsed flag values. Precedence: flag, then
    ``PARTIALFLOW_*`` variable, then the Config default. The token and the token file are
    one setting (a flag for either beats a variable for either; both at once is refused).
    A bad variable raises ValueError naming it; so does a missing data directory.
    """
    environ = os.environ if environ is None else environ
    flags = {k: v for k, v in given.items() if v is not None}
    for option in SERVE_OPTIONS:  # a repeated flag: a list of tuples, as one tuple
        if option.repeat and isinstance(flags.get(option.field), list):
            flags[option.field] = tuple(item for value in flags[option.field] for item in value)
    env: dict[str, Any] = {}
    for option in SERVE_OPTIONS:
        text = environ.get(option.env, "")
        if text != "":
            try:
                env[option.field] = option.parse(text)
            except ValueError as err:
                raise ValueError(f"{option.env}={text!r}: {err}") from None
    token = _token(flags, "--auth-token and --auth-token-file")
    if token is None:
        token = _token(env, "PARTIALFLOW_AUTH_TOKEN and PARTIALFLOW_AUTH_TOKEN_FILE")
    values = {**env, **flags}
    values.pop("auth_token_file", None)
    values.pop("auth_token", None)
    if token is not None:
        values["auth_token"] = token
    values = {k: v for k, v in values.items() if k in _FIELDS}
    if values.get("pg_port") == PG_OFF:
        values["pg_port"] = None
    if "data_dir" not in values:
        raise ValueError("a data directory is required: --data DIR or PARTIALFLOW_DATA")
    return Config(**values)


_FIELDS = set(Config.__dataclass_fields__)


def _token(source: Mapping[str, Any], both: str) -> str | None:
    if "auth_token" in source and "auth_token_file" in source:
        raise ValueError(f"give one of {both}, not both")
    if "auth_token_file" in source:
        return read_token_file(source["auth_token_file"])
    return source.get("auth_token")


def log_level_number(level: str) -> int:
    """``logging``'s number for one of LOG_LEVELS."""
    return logging.getLevelName(level.upper())
