"""The Node.js example client (examples/node/client.js) against a real server.

The client creates a table, writes a RowBatch and repeated Rows, creates two views keyed
by a `?` parameter, looks keys up (sent as Key messages and as a key batch, each answered
as one columnar block), reads the typed Stats and triggers each error status. This test
runs it with `node`, then checks from Python, independently, that the table holds exactly
the rows the client meant to write and that the view answers it saw equal Spark SQL
(Client.query) at the same LSN.

Skipped only when `node` is not on PATH. When examples/node/node_modules is missing the
test runs `npm ci` there first (the npm registry is reachable on CI).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[2] / "examples" / "node"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None,
    reason="node is not on PATH (install Node >= 18, e.g. `apt-get install nodejs npm`; "
    "see examples/node/README.md)",
)

# What client.js writes, stated here independently of it: (id, product, who, length,
# score, seen). Row 4 carries 2^53 + 1, which a JS number cannot hold.
WRITTEN_BATCH = [
    (1, "Apple", "Alice", 10, 1.5, True),
    (2, "Apple", None, 20, 2.25, None),
    (3, "Banana", "Bob", None, None, False),
    (4, "Carrot", "Eve", 2**53 + 1, 7.0, True),
]
WRITTEN_ROWS = [
    (5, "Banana", "Carol", 40, 4.0, True),
    (6, None, "Dan", 5, None, None),
]
KEYS = ["Apple", "Banana", "Carrot", "Durian"]

# The SQL of the client's two views with the parameter bound, to run on Spark.
VIEW_SQL = {
    "by_product": "SELECT product, COUNT(*) AS visits, SUM(length) AS total_length, "
    "MAX(score) AS best FROM {table} WHERE product = '{key}' GROUP BY product",
    "visits_of": "SELECT id, who, length, seen FROM {table} WHERE product = '{key}'",
}


def _order(v) -> tuple:
    # JSON has one number type (the Node client's 7.0 arrives as 7): order numbers as floats.
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (1, repr(float(v)))
    return (0 if v is None else 2, repr(v))


def _sorted(rows) -> list[tuple]:
    """Rows as tuples in a total order (NULLs and mixed types included)."""
    return sorted((tuple(r) for r in rows), key=lambda r: [_order(v) for v in r])


def _int64(obj: dict):
    """The SUMMARY line writes int64 values as {"int64": "digits"}."""
    return int(obj["int64"]) if obj.keys() == {"int64"} else obj


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """examples/node with its dependencies installed (`npm ci` if they are missing)."""
    installed = all(
        (NODE_DIR / "node_modules" / "@grpc" / name / "package.json").is_file()
        for name in ("grpc-js", "proto-loader")
    )
    if not installed:
        npm = shutil.which("npm")
        assert npm, "node is on PATH but npm is not: install npm to run `npm ci` in examples/node"
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"npm ci failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return NODE_DIR


def test_node_client_end_to_end(server, node_modules):
    prefix = f"node_{uuid.uuid4().hex[:10]}"
    started = time.monotonic()
    try:
        done = subprocess.run(
            [NODE, "client.js", server.address, prefix],
            cwd=node_modules,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"node client.js did not finish in 120 s; its output so far:\n{err.stdout}")
    elapsed = time.monotonic() - started
    print(f"node client.js took {elapsed:.1f} s")
    output = f"--- node client.js ({elapsed:.1f} s)\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, f"node client.js exited {done.returncode}\n{output}"
    assert "FAIL" not in done.stdout, output
    summaries = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert len(summaries) == 1, output
    summary = json.loads(summaries[0][len("SUMMARY ") :], object_hook=_int64)

    table = f"{prefix}_visit"
    views = {"by_product": f"{prefix}_by_product", "visits_of": f"{prefix}_visits_of"}
    assert summary["table"] == table and summary["views"] == list(views.values()), output
    lsn_batch, lsn_rows = summary["lsns"]
    assert 0 < lsn_batch < lsn_rows
    # The client's own account of what it wrote agrees with this file's.
    assert [tuple(r) for r in summary["written"]] == WRITTEN_BATCH + WRITTEN_ROWS
    # min_lsn beyond the last write is refused at once, not waited for until the deadline.
    assert summary["min_lsn_status"] == "OUT_OF_RANGE", output

    columns = "id, product, who, length, score, seen"
    with server.client(timeout=120) as c:
        # Exactly the rows written, each write atomic at its LSN, with exact types.
        after_batch = c.query(f"SELECT {columns} FROM {table}", as_of=lsn_batch)
        assert _sorted(after_batch.rows) == _sorted(WRITTEN_BATCH)
        after_rows = c.query(f"SELECT {columns} FROM {table}", as_of=lsn_rows)
        assert _sorted(after_rows.rows) == _sorted(WRITTEN_BATCH + WRITTEN_ROWS)
        latest = c.query(f"SELECT {columns} FROM {table}")
        # The refused writes (bad batch, wrong type, no kind, duplicate key) wrote nothing.
        assert _sorted(latest.rows) == _sorted(WRITTEN_BATCH + WRITTEN_ROWS)
        big = c.query(f"SELECT length FROM {table} WHERE id = 4").rows
        assert big == [(2**53 + 1,)] and type(big[0][0]) is int
        scores = c.query(f"SELECT score FROM {table} WHERE id IN (4, 5)").rows
        assert all(type(s) is float for (s,) in scores)

        for name, view in views.items():
            seen = summary["lookups"][view]
            assert seen["columns"] == list(c.lookup(view, "Apple", min_lsn=lsn_rows).columns)
            assert sorted(seen["results"]) == sorted(KEYS)
            for key in KEYS:
                sql = VIEW_SQL[name].format(table=table, key=key)
                # What the Node client saw equals Spark SQL at the LSN it was answered at.
                node_answer = seen["results"][key]
                at_node = c.query(sql, as_of=node_answer["lsn"])
                assert _sorted(node_answer["rows"]) == _sorted(at_node.rows), (view, key)
                # And a Python lookup now equals Spark SQL at its own LSN.
                mine = c.lookup(view, key, min_lsn=lsn_rows)
                assert mine.lsn >= lsn_rows
                at_mine = c.query(sql, as_of=mine.lsn)
                assert _sorted(mine.rows) == _sorted(at_mine.rows), (view, key)
                assert _sorted(mine.rows) == _sorted(node_answer["rows"]), (view, key)
        # The aggregate, stated by hand as well.
        assert c.lookup(views["by_product"], "Apple").rows == [("Apple", 2, 30, 2.25)]
        assert c.lookup(views["by_product"], "Carrot").rows == [("Carrot", 1, 2**53 + 1, 7.0)]
        assert c.lookup(views["by_product"], "Durian").rows == []
