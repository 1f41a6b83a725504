"""A real PostgreSQL 15 for the tests: the oracle the emulated catalog is compared with.

``upstream()`` starts one server per test process (initdb as the ``postgres`` OS user in a
temp dir under /tmp, a free port, loopback and a socket dir of its own) and stops it with
``pg_ctl stop`` at exit; ``skip_reason()`` says why it cannot run here (binaries missing:
scripts/install-pg.sh installs them). ``database(name, ddl)`` makes a fresh database.

PostgreSQL refuses to run as root, so only the server commands run as ``postgres``; the
clients stay this process.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BIN = Path(os.environ.get("PARTIALFLOW_PG_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass
class Upstream:
    host: str
    port: int
    root: Path
    opts: str = ""

    def restart(self, down_for: float = 0.0) -> None:
        """Stop the server (fast: sessions are cut), wait ``down_for`` s, start it again on
        the same port."""
        data = self.root / "data"
        subprocess.run([str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       check=True, capture_output=True, **_as_postgres())
        time.sleep(down_for)
        subprocess.run([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60",
                        "-l", str(self.root / "log"), "start", "-o", self.opts],
                       check=True, capture_output=True, **_as_postgres())

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user=postgres dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{dbname}"

    def database(self, name: str, ddl: list[str]) -> str:
        """Drop and create database ``name``, run ``ddl`` in it; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}"')
            con.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        with psycopg.connect(self.dsn(name), autocommit=True) as con:
            for stmt in ddl:
                con.execute(stmt)
        return self.dsn(name)


_started: Upstream | None = None


def skip_reason() -> str | None:
    if not (BIN / "initdb").exists():
        return f"PostgreSQL 15 is not installed ({BIN}/initdb missing; scripts/install-pg.sh)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' OS user to run PostgreSQL as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    return None


def _as_postgres() -> dict:
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def upstream() -> Upstream:
    """The process's PostgreSQL 15, started on first use."""
    global _started
    if _started is not None:
        return _started
    root = Path(tempfile.mkdtemp(prefix="pf-upstream-", dir="/tmp"))
    pw = pwd.getpwnam("postgres")
    if os.geteuid() == 0:
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data = root / "data"
    subprocess.run([str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "-E", "UTF8", "--locale=C.UTF-8"], check=True, capture_output=True,
                   **_as_postgres())
    for attempt in range(5):
        port = _free_port()
        opts = (f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root}"
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
                # Logical replication for tests/follow (serve --follow): a restart-only
                # setting, so every test's server has it.
                " -c wal_level=logical -c max_wal_senders=20 -c max_replication_slots=20"
                " -c wal_sender_timeout=10s")
        r = subprocess.run([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60",
                            "-l", str(root / "log"), "start", "-o", opts],
                           capture_output=True, **_as_postgres())
        if r.returncode == 0:
            break
        time.sleep(0.2 * (attempt + 1))
    else:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {r.stderr.decode()} {log[-2000:]}")
    _started = Upstream("127.0.0.1", port, root, opts)
    atexit.register(_stop, data, root)
    return _started


def _stop(data: Path, root: Path) -> None:
    subprocess.run([str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
                   capture_output=True, **_as_postgres())
    shutil.rmtree(root, ignore_errors=True)


def pg_port(server: object) -> int:
    """The PostgreSQL port of an InProcessServer (tests/conftest.py's ``server``)."""
    from partialflow.server.app.main import pg_port_of

    port = pg_port_of(server.server)  # type: ignore[attr-defined]
    assert port is not None, "the server has no PostgreSQL listener"
    return port


def visit_schema(u: str) -> tuple[list[str], list[str]]:
    """The driver tests' schema, prefixed by ``u``: (ours, PostgreSQL's). A view's ``?``
    parameter is a plain column in PostgreSQL (its readers filter on it)."""
    ours = [
        f"CREATE TABLE {u}visit (id BIGINT PRIMARY KEY, user TEXT, dur DOUBLE, ok BOOLEAN)",
        f"CREATE VIEW {u}by_user AS SELECT id, user, dur, ok FROM {u}visit WHERE user = ?",
        f"CREATE VIEW {u}per_user AS SELECT user, COUNT(*) AS n, SUM(dur) AS total "
        f"FROM {u}visit GROUP BY user",
    ]
    theirs = [
        f'CREATE TABLE {u}visit (id bigint PRIMARY KEY, "user" text, dur double precision, '
        "ok boolean)",
        f'CREATE VIEW {u}by_user AS SELECT id, "user", dur, ok FROM {u}visit',
        f'CREATE VIEW {u}per_user AS SELECT "user", count(*) AS n, sum(dur) AS total '
        f'FROM {u}visit GROUP BY "user"',
    ]
    return ours, theirs


VISITS = [(1, "ann", 1.5, True), (2, "bob", 2.25, False), (3, "ann", 4.0, None),
          (4, "cy", -0.5, True)]
