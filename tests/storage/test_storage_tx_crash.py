"""kill -9 in the middle of large transactions: a child process commits transactions of
thousands of rows over two tables (small log files, flushes all the time) and is killed at
random moments, so kills land in a transaction's log write, in its fsync and in flushes.
After recovery every transaction is in both tables whole or in neither, and every
acknowledged one is there: split into two log records, a kill between them would leave a
transaction in one table only."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from partialflow.server.storage import TableChange

CHILD = textwrap.dedent(
    """
    import sys
    from partialflow.server.errors import AlreadyExists
    from partialflow.server.storage import Column, Storage, TableChange, TableSchema
    st = Storage(sys.argv[1], None, flush_rows=int(sys.argv[3]), flush_interval=0.02,
                 max_segments=10**6, wal_rotate_bytes=256 << 10)
    st.open()
    for name in ("a", "b"):
        try:
            st.create_table(TableSchema(name, (Column("tx", "BIGINT"), Column("i", "BIGINT"),
                                               Column("v", "BIGINT"), Column("pad", "TEXT"))))
        except AlreadyExists:
            pass
    rnd, size = int(sys.argv[2]), int(sys.argv[4])
    for n in range(10**6):
        tx = rnd * 10**6 + n
        rows = [(tx, i, i + 1, "x" * 40) for i in range(size)]
        lsn = st.write_many([TableChange("a", inserts=rows),
                             TableChange("b", inserts=[(t, i, -v, p) for t, i, v, p in rows])],
                            upstream_lsn=tx)
        print(f"ack {lsn} {tx}", flush=True)
    """
)


def test_kill_9_mid_transaction_keeps_it_whole_or_absent(make_store, tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"random seed {seed}")
    rng = random.Random(seed)
    data = tmp_path / "killed"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    acked: set[int] = set()
    size = 3000
    for rnd in range(4):
        errors = tmp_path / f"child-{rnd}.err"
        with open(errors, "w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(script), str(data), str(rnd), str(rng.choice([500, 5000])),
                 str(size)], stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        target = rng.randint(1, 6)
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while len(lines) < target and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        time.sleep(rng.uniform(0.0, 0.3))  # inside the next transaction's write or flush
        os.kill(proc.pid, signal.SIGKILL)
        lines += proc.stdout.read().splitlines()
        proc.wait()
        assert "Traceback" not in errors.read_text(), errors.read_text()[-3000:]
        got = [line.split() for line in lines if line.startswith("ack ")]
        assert got, "the child acknowledged nothing"
        acked.update(int(parts[2]) for parts in got if len(parts) == 3)

    st = make_store(data)
    per_tx: dict[str, Counter] = {}
    for name in ("a", "b"):
        rows = st.query(f"SELECT tx, COUNT(*), SUM(v) FROM {name} GROUP BY tx")[1]
        per_tx[name] = Counter({tx: (n, s) for tx, n, s in rows})
    whole = (size, size * (size + 1) // 2)
    assert set(per_tx["a"]) == set(per_tx["b"]), "a transaction is in one table only"
    for tx, (n, s) in per_tx["a"].items():
        assert (n, s) == whole and per_tx["b"][tx] == (size, -s), (tx, per_tx["b"][tx])
    assert acked <= set(per_tx["a"]), f"acknowledged transactions lost: {acked - set(per_tx['a'])}"
    # The upstream LSN recovered is that of the last transaction there (they increase).
    assert st.upstream_lsn == max(per_tx["a"])
    # Writes go on: the next transaction commits whole.
    lsn = st.write_many([TableChange("a", inserts=[(-1, 0, 1, "")]),
                         TableChange("b", inserts=[(-1, 0, -1, "")])])
    assert lsn == st.last_lsn
