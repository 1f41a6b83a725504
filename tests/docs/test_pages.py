"""Every example of README.md and docs/*.md, run against a real server as a reader would.

One test per page: a fresh server (its own data directory, a free port, on the session's
Spark) and a fresh working directory, then the page's blocks in order (see runner.py for
the convention). The page's printed output must match what it shows.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from runner import QUIET_LANGUAGES, RUN_LANGUAGES, SYBIL, Shell, fences, page_environment

from partialflow.client import Client
from partialflow.server.config import Config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres(config: dict) -> dict[str, str]:
    """When the server has a PostgreSQL listener, a port for it and PG* for psql."""
    if "pg_port" not in Config.__dataclass_fields__:
        return {}
    config["pg_port"] = _free_port()
    return {"PGHOST": "127.0.0.1", "PGPORT": str(config["pg_port"]), "PGUSER": "partialflow"}


# Pages whose server follows a PostgreSQL (serve --follow): a database made with this DDL on
# the tests' PostgreSQL 15 (tests/pg/upstream.py); its URL is in env UPSTREAM.
FOLLOWED = {
    "docs/follow-postgres.md": [
        # Synchronous commits, so pg_current_wal_lsn() after a commit is past it (the test
        # server commits asynchronously by default).
        "ALTER DATABASE docs_follow SET synchronous_commit = on",
        "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text)",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL, "
        "total float8 NOT NULL, placed timestamptz NOT NULL DEFAULT now())",
        "INSERT INTO customers VALUES (1, 'ann', 'Oslo'), (2, 'bob', 'Lima')",
        "INSERT INTO orders (id, customer, total) VALUES (1, 1, 20.0), (2, 2, 7.5)",
    ],
}


# Pages whose server runs with settings of its own (the page says which).
SERVER_CONFIG: dict[str, dict] = {
    "docs/tiers.md": {"memory_limit": 64 * 1024, "disk_limit": 16 << 20},
}


def _follow(name: str, config: dict) -> dict[str, str]:
    """For a page in FOLLOWED: its upstream database, followed by the page's server."""
    if name not in FOLLOWED:
        return {}
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "pg"))
    import upstream

    reason = upstream.skip_reason()
    if reason:
        pytest.skip(reason)
    up = upstream.upstream()
    up.database("docs_follow", FOLLOWED[name])
    config["follow"] = up.url("docs_follow")
    return {"UPSTREAM": up.url("docs_follow")}


def _workdir(tmp_path: Path) -> Path:
    """A directory that looks like the root of a clone (examples/, scripts/, ... linked),
    so files a page writes land here and not in the checkout."""
    work = tmp_path / "clone"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "build", "site") and not entry.name.startswith("data"):
            (work / entry.name).symlink_to(entry)
    return work


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples(page: Path, spark, tmp_path, monkeypatch) -> None:
    from helpers import InProcessServer

    document = SYBIL.parse(page)
    examples = list(document.examples())
    if not examples:
        pytest.skip("no runnable example on this page")
    config: dict = dict(SERVER_CONFIG.get(str(page.relative_to(ROOT)), {}))
    pg_env = _postgres(config)
    pg_env.update(_follow(str(page.relative_to(ROOT)), config))
    work = _workdir(tmp_path)
    with InProcessServer(tmp_path / "data", spark, **config) as server:
        assert server.address is not None
        env = page_environment(server.address, pg_env)
        for key in [k for k in os.environ if k.startswith(("PARTIALFLOW_", "PG"))]:
            monkeypatch.delenv(key)
        for key, value in {"PARTIALFLOW_SERVER": server.address, **pg_env}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(work)
        document.namespace["__shell__"] = Shell(work, env)
        # Every block runs even after one fails (the reader would go on too); all failures
        # are reported, the first being the likely cause of the rest.
        failures = []
        try:
            for example in examples:
                try:
                    example.evaluate()
                except Exception as err:  # noqa: BLE001 - reported below with its line
                    failures.append(f"{page.relative_to(ROOT)}:{example.line}: {err}")
        finally:
            for value in list(document.namespace.values()):
                if isinstance(value, Client):
                    value.close()
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_is_run_or_marked_not_run(page: Path) -> None:
    """A block in a fence the runner does not know would silently never run."""
    for line, language in fences(page.read_text()):
        assert language in RUN_LANGUAGES + QUIET_LANGUAGES, (
            f"{page.relative_to(ROOT)}:{line}: a ```{language or '(no language)'} block; "
            f"use one of {', '.join(RUN_LANGUAGES)} (run) or ```text (not run, say why)"
        )


#: How many run blocks (python, pycon, console) each page has. A block deleted by mistake
#: would pass unnoticed otherwise (the blocks after it may not need it); lower a number
#: here, in the same commit, when a block is removed on purpose. A page with run blocks
#: must be listed (test_every_page_with_examples_is_counted).
RUN_BLOCKS = {
    "README.md": 5,
    "docs/access-control.md": 1,
    "docs/cli.md": 4,
    "docs/concepts.md": 3,
    "docs/configuration.md": 1,
    "docs/disk-full.md": 3,
    "docs/follow-postgres.md": 5,
    "docs/getting-started.md": 4,
    "docs/index.md": 1,
    "docs/operations.md": 2,
    "docs/postgres-catalog.md": 1,
    "docs/postgres.md": 7,
    "docs/spark-clusters.md": 1,
    "docs/spark-failures.md": 3,
    "docs/sql-reference.md": 3,
    "docs/sql.md": 3,
    "docs/subscriptions-liveness.md": 2,
    "docs/testing.md": 1,
    "docs/tiers.md": 3,
    "docs/transactions.md": 6,
    "docs/wire.md": 1,
}


def test_every_page_with_examples_is_counted() -> None:
    for page in PAGES:
        text = page.read_text()
        if any(language in RUN_LANGUAGES for _, language in fences(text)):
            name = str(page.relative_to(ROOT))
            assert name in RUN_BLOCKS, f"{name} has run blocks: add it to RUN_BLOCKS"


@pytest.mark.parametrize("name", sorted(RUN_BLOCKS))
def test_no_run_block_went_missing(name: str) -> None:
    page = ROOT / name
    found = sum(1 for _, language in fences(page.read_text()) if language in RUN_LANGUAGES)
    assert found >= RUN_BLOCKS[name], (
        f"{name} has {found} run blocks, {RUN_BLOCKS[name]} expected: was one removed (or "
        "turned into text)? If on purpose, lower RUN_BLOCKS in tests/docs/test_pages.py"
    )
