"""The dataflow core imports no pyspark, and the ordering tests run without a JVM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_dataflow_package_imports_no_pyspark() -> None:
    _run(
        "import sys\n"
        "import partialflow.server.dataflow\n"
        "from partialflow.server.dataflow import executor, fills, evictor, reads, graph, "
        "materialize, publish\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not bad, bad\n"
    )


def test_a_stepped_dataflow_on_the_model_starts_no_jvm() -> None:
    # Lookups check key types with storage's validator, whose module imports Spark's type
    # classes (plain Python); no Spark session, gateway or JVM may start.
    _run(
        "import sys\n"
        "sys.path.insert(0, '.')\n"
        "from stepped import Harness\n"
        "h = Harness()\n"
        "h.table('a', [('k', 'BIGINT'), ('v', 'BIGINT')], [(1, 2), (1, 3), (2, 5)])\n"
        "h.view('v', 'SELECT k, SUM(v) AS total FROM a WHERE k = ? GROUP BY k')\n"
        "assert h.lookup('v', [(1,), (2,)])[0][0] == [(1, 5)]\n"
        "pyspark = sys.modules.get('pyspark')\n"
        "assert pyspark is None or pyspark.SparkContext._gateway is None\n"
        "assert pyspark is None or pyspark.SparkContext._active_spark_context is None\n"
    )
