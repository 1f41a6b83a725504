#!/usr/bin/env python3
"""Write-to-subscriber latency on its own: the ``subscribe`` section of
bench/run.py (``python bench/run.py --only subscribe``) with other settings.

    python bench/subscribe_latency.py [--rates 20,200,2000] [--seconds 10]
        [--subscriptions 32] [--keys 100]

See bench/subscribe.py for what is measured. Prints the section's figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="20,200,2000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--subscriptions", type=int, default=32)
    ap.add_argument("--keys", type=int, default=100)
    args = ap.parse_args()
    import subscribe
    from common import LoadPool

    from partialflow.server.spark import spark_session

    spark = spark_session()
    pool = LoadPool(3)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            res = subscribe.latency(
                Path(tmp) / "data", spark, pool, rates=[float(r) for r in args.rates.split(",")],
                seconds=args.seconds, subscriptions=args.subscriptions, keys=args.keys)
    finally:
        pool.close()
    for ph in res["phases"]:
        ph.pop("cdf_ms", None)
        ph.pop("ack_cdf_ms", None)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
