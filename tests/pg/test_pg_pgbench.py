"""pgbench with a custom script of point lookups of a view, in the simple, extended and
prepared protocols: a few seconds each, two clients, no failed transaction."""

from __future__ import annotations

import re
import subprocess

import pytest
from pg_helpers import need

KEYS = 50


@pytest.fixture(scope="module")
def bench_view(pg_env, server, tmp_path_factory):
    import psycopg

    t, v = "pgb_accounts", "pgb_by_id"
    with psycopg.connect(f"host={pg_env['PGHOST']} port={pg_env['PGPORT']} user=t",
                         autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {t} (id BIGINT PRIMARY KEY, balance DOUBLE)")
        values = ", ".join(f"({i}, {i * 1.5})" for i in range(1, KEYS + 1))
        conn.execute(f"INSERT INTO {t} VALUES {values}")
        conn.execute(f"CREATE VIEW IF NOT EXISTS {v} AS SELECT id, balance FROM {t} WHERE id = ?")
        keys = ", ".join(str(i) for i in range(1, KEYS + 1))
        rows = conn.execute(f"SELECT * FROM {v} WHERE id IN ({keys})").fetchall()  # one fill
        assert sorted(rows) == [(i, i * 1.5) for i in range(1, KEYS + 1)]
    script = tmp_path_factory.mktemp("pgbench") / "lookup.sql"
    script.write_text(f"\\set k random(1, {KEYS})\nSELECT * FROM {v} WHERE id = :k;\n")
    return script


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_pgbench_lookups(pg_env, bench_view, mode):
    done = subprocess.run(
        [need("pgbench"), "-n", "-f", str(bench_view), "-M", mode, "-T", "3", "-c", "2", "-j",
         "2", "-r"],
        env=pg_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    processed = int(re.search(r"number of transactions actually processed: (\d+)",
                              done.stdout).group(1))
    failed = re.search(r"number of failed transactions: (\d+)", done.stdout)
    assert processed > 10, done.stdout
    assert failed is None or int(failed.group(1)) == 0, done.stdout
    assert "error" not in done.stderr.lower(), done.stderr
