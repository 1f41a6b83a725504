"""``partialflow stress``: a consistency check of a running server, under load.

It creates its own tables and views (under a name prefix), runs concurrent writers and
readers with evictions (and, on a server with test hooks, injected Spark faults), then
verifies every read against Spark at the read's own LSN and every acknowledged write
against the final tables, prints a report and exits non-zero on any wrong answer or lost
write. See docs/testing.md.

Modules: ``workload`` (tables, views, oracles), ``load`` (the threads), ``record`` (what is
remembered), ``verify`` (the checks), ``report`` (the summary), ``run`` (the sequence),
``hooks`` (the test-hook client). This module only declares the command line, so the CLI
does not import Spark or sqlglot until a stress run starts.
"""

from __future__ import annotations

import argparse
from typing import Any

HELP = "stress a server with concurrent reads, writes and evictions, and verify every read"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Declare the ``stress`` options on ``parser`` (connection options come from the CLI)."""
    from partialflow.client.stress.workload import READ_VIEWS

    parser.add_argument(
        "--views",
        type=lambda s: [v.strip() for v in s.split(",") if v.strip()],
        default=None,
        metavar="V1,V2",
        help=f"views to read (default all): {', '.join(READ_VIEWS)}",
    )
    parser.add_argument(
        "--writers", type=int, default=4, metavar="N", help="writer threads (default 4)"
    )
    parser.add_argument(
        "--readers", type=int, default=4, metavar="M", help="reader threads (default 4)"
    )
    parser.add_argument(
        "--subscribers",
        type=int,
        default=2,
        metavar="K",
        help="threads that subscribe to every key of a view (views in turn) and record the "
        "rows they rebuild, verified like reads (default 2)",
    )
    parser.add_argument(
        "--evict-rate",
        type=float,
        default=0.05,
        metavar="P",
        help="chance that a read is preceded by an explicit evict (default 0.05)",
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, metavar="S", help="seconds of load (default 60)"
    )
    parser.add_argument(
        "--seed", type=int, default=1, metavar="X", help="random seed of the workload (default 1)"
    )
    parser.add_argument(
        "--write-rate",
        type=float,
        default=25.0,
        metavar="W",
        help="writes per second per writer, 0 = unthrottled (default 25; every write "
        "is a snapshot the verifier may have to rebuild)",
    )
    parser.add_argument(
        "--faults",
        type=lambda s: [m.strip() for m in s.split(",") if m.strip()],
        default=[],
        metavar="MODES",
        help="inject Spark-scan faults in windows, e.g. fail,slow:2,hang "
        "(the server needs PARTIALFLOW_TEST_HOOKS=1)",
    )
    parser.add_argument(
        "--fault-window",
        type=float,
        default=8.0,
        metavar="S",
        help="seconds per fault window (default 8)",
    )
    parser.add_argument(
        "--fault-settle",
        type=float,
        default=None,
        metavar="S",
        help="seconds after a window whose errors still count as its own (default: the "
        "call timeout)",
    )
    parser.add_argument(
        "--plant-wrong-answer",
        metavar="VIEW",
        default=None,
        help="test the checkers: plant a wrong row in the first key of VIEW that is "
        "read (the server needs PARTIALFLOW_TEST_HOOKS=1); the run must then FAIL",
    )
    parser.add_argument(
        "--read-bound",
        type=float,
        default=20.0,
        metavar="S",
        help="a read with no fault active must be answered within S seconds; a slower or "
        "failed one fails the run (default 20)",
    )
    parser.add_argument(
        "--subscription-gap",
        type=float,
        default=10.0,
        metavar="S",
        help="a subscriber's stream whose LSN stands still (no change, no heartbeat at a newer "
        "LSN) for longer than S seconds with no fault active fails the run (default 10; "
        "heartbeats come every second)",
    )
    parser.add_argument(
        "--miss-ms",
        type=float,
        default=50.0,
        metavar="MS",
        help="reads slower than this count as misses in the latency split (default 50)",
    )
    parser.add_argument(
        "--disk-limit",
        type=_size,
        default=None,
        metavar="SIZE",
        help="run with the server's disk tier limited to SIZE (e.g. 64KB: keys shelved, "
        "brought back and made holes at once); the server needs --disk-limit and "
        "PARTIALFLOW_TEST_HOOKS=1, and gets its own limit back afterwards",
    )
    parser.add_argument(
        "--prefix", default=None, help="name prefix of the tables and views (default: random)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the tables and views afterwards")
    parser.add_argument(
        "--spark-master", default="local[2]", help="Spark for the verification (default local[2])"
    )
    parser.add_argument(
        "--report-json", metavar="FILE", default=None, help="also write the report as JSON"
    )
    return parser


def _size(text: str) -> int:
    from partialflow.server.config import parse_size

    try:
        size = parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive")
    return size


def run(client: Any, args: argparse.Namespace) -> int:
    """The command: returns 0 if every check passed, 1 otherwise."""
    from partialflow.client.stress.run import run_stress

    return run_stress(client, args)
