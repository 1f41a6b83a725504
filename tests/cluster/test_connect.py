"""The server on Spark Connect: ``partialflow serve --spark-master sc://...`` against the
Connect server the pyspark package ships (``start-connect-server.sh``), whose own driver
runs on the standalone test cluster.

1. The visits example, a bulk load, a compaction and ``query(as_of)`` work through Connect,
   checked against Spark SQL at the same LSN, and the Connect application's tasks ran on
   the cluster's executors. (``partialflow stress --spark-master sc://...`` works too, but
   is left to the standalone tests to keep the suite short.)
2. What a Connect client cannot do is refused at start-up: a ``--spark-conf`` setting of
   the Connect server's own Spark (here executor memory) stops the server with one line
   naming the setting and why, and a non-zero exit.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dataflow.test_examples import VISITS_VIEW
from dataflow.test_examples import test_visits_max_after_delete as visits_example
from oracle import assert_matches
from sparkcluster import start_server

CONNECT_APP = "Spark Connect server"  # the application start-connect-server.sh names


@pytest.fixture(scope="module")
def connect_url(cluster):
    cluster.run("connect")
    yield cluster.connect_url
    # Its application holds a core of each worker: give them back to the other tests.
    cluster.run("stop-connect")


@pytest.fixture(scope="module")
def connect_server(connect_url, tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("connect-server") / "data", "--spark-master", connect_url
    )
    yield srv
    srv.stop()


def test_seed_examples_load_and_compaction_through_connect(
    cluster, connect_server, uniq, tmp_path
):
    visits_example(connect_server, uniq)  # (the Nexmark example runs on the standalone one)
    p = uniq
    with connect_server.client() as c:
        path = tmp_path / "more_visits.parquet"
        pq.write_table(
            pa.table({"product": ["Potato"], "user": ["Zoe"], "length": [99]}), path
        )
        assert c.load(f"{p}visit", str(path)).rows == 1
        before = c.stats()["storage"]["compactions"]
        c.compact(f"{p}visit")
        assert c.stats()["storage"]["compactions"] > before
        r = c.lookup(f"{p}maxlen", "Vegetable", min_lsn=c.stats()["lsn"])
        assert r.rows == [("Vegetable", 99)]
        assert_matches(c, VISITS_VIEW.format(p=p), ("Vegetable",), r)
    tasks = cluster.tasks(CONNECT_APP)
    assert sum(tasks.values()) > 0, tasks


def test_a_setting_connect_cannot_change_is_refused_at_start(connect_url, tmp_path):
    done = subprocess.run(
        [
            sys.executable, "-m", "partialflow.client.cli", "serve",
            "--data", str(tmp_path / "data"), "--port", "0",
            "--spark-master", connect_url,
            "--spark-conf", "spark.executor.memory=1g",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "listening on" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "spark.executor.memory" in errors[0] and "Spark Connect" in errors[0]
    assert "start-connect-server.sh --conf" in errors[0]
