"""The ``partialflow`` command: run a server, or talk to one.

    partialflow serve --data DIR [--host H] [--port P] [--memory-limit SIZE] [--spark-master M]
    partialflow sql [--server ADDR] [--as-of LSN] "STATEMENT"
    partialflow lookup [--server ADDR] [--min-lsn LSN] VIEW [KEY ...]
    partialflow stats [--server ADDR]
    partialflow explain [--server ADDR] [--dot] VIEW

Errors print one line on stderr and exit with status 1 (2 for bad command-line usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

DEFAULT_SERVER = "127.0.0.1:50051"


def _size(text: str) -> int:
    from partialflow.server.config import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_key_value(text: str) -> Any:
    """A key parameter from the command line: a JSON scalar (``42``, ``1.5``, ``true``,
    ``null``, ``"42"``) or else the text itself (``Fruit``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, (int, float, str, bool)) else text


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as an aligned text table with a header line (numbers right-aligned)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    numeric = [
        all(
            isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
            for r in rows
            if r[i] is not None
        )
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return " | ".join(parts).rstrip()

    out = [line(list(columns)), "-+-".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def _print_result(result: Any) -> None:
    if result.columns:
        print(format_table(result.columns, result.rows))
        noun = "row" if len(result.rows) == 1 else "rows"
        print(f"({len(result.rows)} {noun}, lsn {result.lsn})")
    else:
        print(f"OK (lsn {result.lsn})")


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the server pulls in pyspark, which the client commands never need.
    from partialflow.server.config import Config
    from partialflow.server.main import serve

    config = Config(
        data_dir=args.data,
        host=args.host,
        port=args.port,
        memory_limit=args.memory_limit,
        spark_master=args.spark_master,
    )
    return serve(config)


def _sql(client: Any, args: argparse.Namespace) -> int:
    if args.as_of is not None:
        _print_result(client.query(args.statement, as_of=args.as_of))
    else:
        _print_result(client.execute(args.statement))
    return 0


def _lookup(client: Any, args: argparse.Namespace) -> int:
    key = tuple(parse_key_value(k) for k in args.key)
    _print_result(client.lookup(args.view, key, min_lsn=args.min_lsn))
    return 0


def _stats(client: Any, args: argparse.Namespace) -> int:
    print(json.dumps(client.stats(), indent=2, sort_keys=True))
    return 0


def _explain(client: Any, args: argparse.Namespace) -> int:
    text, dot = client.explain(args.view)
    print(dot if args.dot else text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="partialflow", description="partialflow server and client"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a server")
    serve.add_argument("--data", required=True, help="data directory (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    serve.add_argument("--memory-limit", type=_size, default=None, help="e.g. 64MB, 1GB, 12345")
    serve.add_argument("--spark-master", default="local[2]")
    serve.set_defaults(run=_serve, remote=False)

    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument(
        "--server",
        default=os.environ.get("PARTIALFLOW_SERVER", DEFAULT_SERVER),
        help=f"server address (default $PARTIALFLOW_SERVER or {DEFAULT_SERVER})",
    )
    remote.add_argument("--timeout", type=float, default=30.0, help="seconds per call")

    sql = commands.add_parser("sql", parents=[remote], help="run one SQL statement")
    sql.add_argument("statement")
    sql.add_argument("--as-of", type=int, default=None, help="run a SELECT as of this LSN")
    sql.set_defaults(run=_sql, remote=True)

    lookup = commands.add_parser("lookup", parents=[remote], help="read a view by key")
    lookup.add_argument("view")
    lookup.add_argument("key", nargs="*", help="parameter values (JSON scalars or text)")
    lookup.add_argument(
        "--min-lsn", type=int, default=None, help="wait until the view has this LSN"
    )
    lookup.set_defaults(run=_lookup, remote=True)

    stats = commands.add_parser("stats", parents=[remote], help="print server statistics (JSON)")
    stats.set_defaults(run=_stats, remote=True)

    explain = commands.add_parser("explain", parents=[remote], help="print a view's dataflow graph")
    explain.add_argument("view")
    explain.add_argument("--dot", action="store_true", help="Graphviz DOT instead of a text tree")
    explain.set_defaults(run=_explain, remote=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``partialflow`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if not args.remote:
        return args.run(args)
    from partialflow.client import Client, PartialflowError

    try:
        with Client(args.server, timeout=args.timeout) as client:
            return args.run(client, args)
    except PartialflowError as err:
        print(f"error: {err.code.name}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
