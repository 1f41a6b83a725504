"""tests/docs: the examples of README.md and docs/ (runner.py sits beside the tests)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _warm_spark(request: pytest.FixtureRequest) -> None:
    """A first small job on the shared Spark before any page. Its JIT warm-up would
    otherwise land in a page's first miss, which a reader's 30 s client deadline may not
    cover on a loaded machine. Only when some test here needs Spark at all."""
    if any("spark" in getattr(item, "fixturenames", ()) for item in request.session.items):
        spark = request.getfixturevalue("spark")
        df = spark.range(1000)
        df.groupBy((df.id % 7).alias("k")).count().collect()
