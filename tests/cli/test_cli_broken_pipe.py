"""A reader that goes away (`partialflow graph v | head`) ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys


def test_output_to_a_closed_pipe_is_not_an_error(server, uniq) -> None:
    with server.client() as db:
        db.execute(f"CREATE TABLE {uniq}t (k TEXT, v BIGINT)")
        db.execute(f"CREATE VIEW {uniq}v AS SELECT k, SUM(v) AS s FROM {uniq}t "
                   "WHERE k = ? GROUP BY k")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line: every write fails
    try:
        done = subprocess.run(
            [sys.executable, "-m", "partialflow.client.cli", "graph", "--server",
             server.address, f"{uniq}v"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
