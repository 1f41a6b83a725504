"""psql against the PostgreSQL listener: -c, -f with a multi-statement script, errors with
their SQLSTATEs, and Ctrl-C (SIGINT: psql sends a CancelRequest) ending a slow read."""

from __future__ import annotations

import signal
import subprocess
import time

from pg_helpers import canon, need, spark_rows


def psql(env: dict[str, str], *args: str, check: bool = True, timeout: float = 120
         ) -> subprocess.CompletedProcess:
    return subprocess.run([need("psql"), "-X", "-v", "VERBOSITY=verbose", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=check)


def rows_of(out: str) -> list[tuple[str, ...]]:
    """Rows of psql -A -t output (| separated)."""
    return [tuple(line.split("|")) for line in out.splitlines() if line.strip()]


def test_psql_c_and_f_script(pg_env, server, tmp_path, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    script = tmp_path / "setup.sql"
    script.write_text(f"""
-- a table, rows, a view; then a read by key
CREATE TABLE {t} (id BIGINT PRIMARY KEY, g TEXT, amount DOUBLE);
INSERT INTO {t} VALUES (1, 'x', 10), (2, 'x', 5.5), (3, 'y', 1);
CREATE VIEW {v} AS SELECT g, COUNT(*) AS n, SUM(amount) AS total FROM {t} WHERE g = ? GROUP BY g;
SELECT * FROM {v} WHERE g = 'x'; SHOW partialflow.lsn;
UPDATE {t} SET amount = amount + 1 WHERE g = 'x';
SELECT g, n, total FROM {v} WHERE g = 'x';
SHOW partialflow.lsn;
""")
    done = psql(pg_env, "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", str(script))
    out = rows_of(done.stdout)
    # CREATE/INSERT/... tags are not printed with -t; the rows and LSNs are.
    first, lsn1, second, lsn2 = out[-4], out[-3], out[-2], out[-1]
    assert canon([(first[0], int(first[1]), float(first[2]))]) == spark_rows(
        server, f"SELECT g, COUNT(*), SUM(amount) FROM {t} WHERE g = 'x' GROUP BY g",
        int(lsn1[0]))
    assert int(lsn2[0]) > int(lsn1[0])
    assert canon([(second[0], int(second[1]), float(second[2]))]) == spark_rows(
        server, f"SELECT g, COUNT(*), SUM(amount) FROM {t} WHERE g = 'x' GROUP BY g",
        int(lsn2[0])) == [("x", 2, 17.5)]
    done = psql(pg_env, "-A", "-t", "-c", f"SELECT id, amount FROM {t} WHERE id < 3 ORDER BY id")
    assert rows_of(done.stdout) == [("1", "11"), ("2", "6.5")]


def test_psql_errors_name_sqlstates_and_write_nothing(pg_env, server, uniq):
    lsn = server.engine.storage.last_lsn
    for sql, code in [(f"SELECT * FROM {uniq}missing", "42P01"), ("SELEC 1", "42601"),
                      ("COPY x FROM STDIN", "0A000"), ("BEGIN; SAVEPOINT s", "0A000")]:
        done = psql(pg_env, "-c", sql, check=False)
        assert done.returncode == 1
        assert f"ERROR:  {code}:" in done.stderr, done.stderr
    assert server.engine.storage.last_lsn == lsn


def test_psql_ctrl_c_cancels_a_slow_read(pg_env, server, uniq):
    t, v = f"{uniq}t", f"{uniq}v"
    psql(pg_env, "-c", f"CREATE TABLE {t} (id BIGINT, g TEXT)",
         "-c", f"INSERT INTO {t} VALUES (1, 'x')",
         "-c", f"CREATE VIEW {v} AS SELECT id FROM {t} WHERE g = ?")
    faults = server.engine.dataflow.runner.faults
    faults.mode = "hang"
    try:
        proc = subprocess.Popen([need("psql"), "-X", "-c", f"SELECT * FROM {v} WHERE g = 'x'"],
                                env=pg_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        # Until the read's fill is issued (its scan then hangs): psql is waiting on it.
        deadline = time.monotonic() + 60
        while not server.engine.stats()["views"][v]["upqueries"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.05)
        assert proc.poll() is None  # waiting on the fill
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        faults.mode = ""
    assert "canceling statement due to user request" in err, (out, err)
