"""A real standalone Spark cluster for the tests in this folder (see tests/sparkcluster.py),
started once and stopped when the session ends."""

from __future__ import annotations

import subprocess

import pytest
from sparkcluster import SCRIPT, Cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        c.run("start")
        yield c
    finally:
        subprocess.run([str(SCRIPT), "stop", str(c.dir)], capture_output=True, timeout=300)
