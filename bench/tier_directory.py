"""Memory of the disk tier's in-memory directory: Python bytes per shelved key, which
``--memory-limit`` does not count (docs/tiers.md, Known limits).

Runs the dataflow without a JVM (the tests' stepped harness, base tables in Python), a
memory limit of 2 KB so nearly every key filled is shelved, and measures with tracemalloc
what the Python heap grows by while N more keys of a COUNT/SUM view are read and shelved,
per shelved state key and per key of the view. The keys' own tuples and values are made
before the measurement (a real server holds them too, once per shelved key: add them).

    .venv/bin/python bench/tier_directory.py [KEYS ...]
"""

from __future__ import annotations

import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "dataflow")]

from stepped import Harness  # noqa: E402  (the tests' JVM-free harness)

VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"


def measure(n: int, text: bool) -> tuple[float, float, int]:
    """(bytes per shelved state key, bytes per view key, shelved state keys measured)."""
    key = (lambda i: f"key-{i:08d}") if text else (lambda i: i)
    with tempfile.TemporaryDirectory() as d:
        h = Harness(memory_limit=2000, tier=Path(d) / "tier.db")
        try:
            h.table("ev", [("id", "BIGINT"), ("k", "TEXT" if text else "BIGINT"),
                           ("v", "BIGINT")], [(i, key(i), i) for i in range(n)])
            h.view("counts", VIEW)
            keys = [(key(i),) for i in range(n)]
            h.lookup("counts", keys[:1000])
            h.settle()
            gc.collect()
            tracemalloc.start()
            before, shelved_before = tracemalloc.get_traced_memory()[0], h.tier.keys
            for i in range(1000, n, 500):
                h.lookup("counts", keys[i:i + 500])
                h.settle()
            gc.collect()
            grew = tracemalloc.get_traced_memory()[0] - before
            shelved = h.tier.keys - shelved_before
            tracemalloc.stop()
        finally:
            h.close()
    return grew / shelved, grew / (n - 1000), shelved


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [11_000, 41_000]
    print("key      view keys  shelved state keys  B/shelved state key  B/view key")
    for text in (False, True):
        for n in sizes:
            per_state_key, per_view_key, shelved = measure(n, text)
            print(f"{'text' if text else 'bigint':<8} {n - 1000:>9}  {shelved:>18}  "
                  f"{per_state_key:>19.0f}  {per_view_key:>10.0f}")


if __name__ == "__main__":
    main()
