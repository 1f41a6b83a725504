"""Helpers for tests on a real standalone Spark cluster (tests/cluster): ``Cluster`` drives
``scripts/spark-cluster.sh`` (a master and two workers as separate JVMs, and on demand a
Spark Connect server on them); ``start_server`` runs ``partialflow serve`` against it;
``run_stress`` runs a short ``partialflow stress`` and checks its report.

``Cluster.tasks(app_name)`` reads the executors' own logs in the workers' directories: how
many tasks each executor of that application finished. That is the proof, independent of
the server, that Spark jobs ran on the workers' executors (a standalone cluster has no
executor in the driver).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import ServerProcess

from partialflow.client import Client

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "spark-cluster.sh"
_FINISHED = re.compile(r"Executor: Finished task ")


@dataclass
class Cluster:
    dir: Path

    def run(self, command: str) -> str:
        done = subprocess.run(
            [str(SCRIPT), command, str(self.dir)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"spark-cluster.sh {command}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    @property
    def master_url(self) -> str:
        return (self.dir / "master-url").read_text().strip()

    @property
    def connect_url(self) -> str:
        return (self.dir / "connect-url").read_text().strip()

    def master_json(self) -> dict:
        url = (self.dir / "master-webui").read_text().strip() + "/json/"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def app_ids(self, name: str) -> list[str]:
        """Ids of the applications (running or finished) called ``name``."""
        info = self.master_json()
        return [a["id"] for a in info["activeapps"] + info["completedapps"] if a["name"] == name]

    def tasks(self, name: str) -> dict[str, int]:
        """Tasks finished per executor (``worker-N/EXECUTOR``) of the applications called
        ``name``, from the executors' logs."""
        out: dict[str, int] = {}
        for app in self.app_ids(name):
            for log in sorted(self.dir.glob(f"work-*/{app}/*/stderr")):
                worker, executor = log.parts[-4], log.parts[-2]
                text = log.read_text(errors="replace")
                out[f"{worker}/{executor}"] = len(_FINISHED.findall(text))
        return out

    def worker_pid(self, n: int) -> int:
        return int((self.dir / f"worker-{n}.pid").read_text())

    def alive_workers(self) -> int:
        return int(self.master_json()["aliveworkers"])


class ClusterServer(ServerProcess):
    """A server process whose clients wait longer: on a cluster the first jobs also wait
    for executors to start, and this machine is shared."""

    def client(self, **kwargs: Any) -> Client:
        kwargs.setdefault("timeout", 180.0)
        return super().client(**kwargs)


def start_server(data: Path, *args: str, hooks: bool = False) -> ClusterServer:
    """``partialflow serve`` with ``args`` (and test hooks on if ``hooks``), started."""
    old = os.environ.get("PARTIALFLOW_TEST_HOOKS")
    if hooks:
        os.environ["PARTIALFLOW_TEST_HOOKS"] = "1"
    try:
        return ClusterServer(data, args=args).start()
    finally:
        if old is None:
            os.environ.pop("PARTIALFLOW_TEST_HOOKS", None)
        else:
            os.environ["PARTIALFLOW_TEST_HOOKS"] = old


def run_stress(address: str, master: str, report: Path, seed: int) -> dict:
    """A short ``partialflow stress`` run whose checker uses ``master``; its JSON report."""
    cmd = [
        sys.executable, "-m", "partialflow.client.cli", "stress",
        "--server", address,
        "--spark-master", master,
        "--report-json", str(report),
        # Two views (a join with MAX, a view over a view) keep the checker's work small.
        "--views", "maxlen,avg_winning",
        "--duration", "8", "--writers", "1", "--write-rate", "10", "--readers", "2",
        "--timeout", "120", "--seed", str(seed),
        # Correctness is under test here, not speed: the first jobs of a cluster wait for
        # executors and code generation, on a machine other test runs share.
        "--read-bound", "120",
    ]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    r = json.loads(report.read_text())
    # Every read was checked against Spark over the recorded history and none differed;
    # every acknowledged write is in the tables; every error was a clean one.
    assert r["reads"]["keys"] > 0 and r["writes"]["acknowledged"] > 0
    # Subscribers' rebuilt rows (--subscribers, default 2) are checked like reads.
    assert r["verification"]["checked"] == (
        r["reads"]["keys"] + r["reads"]["recovery_keys"] + r["reads"].get("subscription_keys", 0)
    )
    assert r["verification"]["mismatches"] == 0 and r["lost_writes"]["differences"] == 0
    assert r["errors"]["unclean"] == []
    return r
