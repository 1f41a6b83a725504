"""examples/*.py as a reader runs them: the address from the command line, and a watch
that Ctrl-C ends cleanly (no traceback) with the LSN to resume from."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def test_first_takes_the_address_from_the_command_line(spark, tmp_path) -> None:
    from helpers import InProcessServer

    with InProcessServer(tmp_path / "data", spark) as server:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "first.py"), server.address],
            env=_env(), capture_output=True, text=True, timeout=300, check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        # The last two lines count the visits now and as of the LSN before the delete;
        # Spark over the same tables says the same.
        with server.client() as db:
            now = db.query("SELECT COUNT(*) AS n FROM visit").rows
            before = db.query("SELECT COUNT(*) AS n FROM visit", as_of=2).rows
        assert lines[-2:] == [str(now), str(before)] and now != before


def test_watch_prints_changes_and_ends_cleanly_on_ctrl_c(server, uniq) -> None:
    view = f"{uniq}longest"
    with server.client() as db:
        db.execute(f"CREATE TABLE {uniq}visit (product TEXT, length BIGINT)")
        first = db.insert(f"{uniq}visit", [("Apple", 10)])
        db.execute(f"CREATE VIEW {view} AS SELECT product, MAX(length) AS longest "
                   f"FROM {uniq}visit WHERE product = ? GROUP BY product")
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "watch.py"), "--server", server.address,
             view, "Apple"],
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            seen = []
            while not seen or not seen[-1].startswith("waiting for changes"):
                line = lines.get(timeout=120)
                assert line is not None, f"watch.py ended: {proc.stderr.read()}"
                seen.append(line)
            # The server is shared with other tests: the snapshot is at the insert or later.
            at, _, rest = seen[0].partition(": ")
            assert rest == "Apple is [('Apple', 10)]" and int(at.removeprefix("lsn ")) >= first
            lsn = db.insert(f"{uniq}visit", [("Apple", 45)])
            assert lines.get(timeout=60) == f"lsn {lsn}: Apple +[('Apple', 45)] -[('Apple', 10)]"
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"stopped; resume from lsn {lsn}"
