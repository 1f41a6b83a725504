"""The ``partialflow`` command: run a server, or talk to one.

    partialflow serve --data DIR [--host H] [--port P] [--memory-limit SIZE] ...
    partialflow sql [STATEMENT] [--as-of LSN]      (no statement: a shell, or stdin's script)
    partialflow lookup [--min-lsn LSN] VIEW [KEY ...]
    partialflow watch [--from-lsn LSN] [--json] [--heartbeats] [--count N] VIEW KEY...
    partialflow stats [--json]
    partialflow explain [--dot] VIEW
    partialflow graph [--png FILE] VIEW
    partialflow load [--format parquet|csv] [--header] [--force] TABLE PATH
    partialflow compact [TABLE]
    partialflow checkpoint                      (take a dataflow checkpoint now)
    partialflow stress [--duration S] [--views V,..] [--faults MODES] ...  (see client/stress/)

Client commands take ``--server`` (default ``$PARTIALFLOW_SERVER`` or 127.0.0.1:50051),
``--token`` (``$PARTIALFLOW_TOKEN``) and ``--tls-ca`` (``$PARTIALFLOW_TLS_CA``). Every
``serve`` flag can also come from its ``PARTIALFLOW_*`` variable (the flag wins). Errors
print one line on stderr and exit with status 1 (2 for bad command-line usage).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from partialflow.client import stress
from partialflow.client.errors import AlreadyExists
from partialflow.client.output import format_compaction, format_stats, format_table, print_result
from partialflow.server.config import SERVE_OPTIONS, resolve_config

DEFAULT_SERVER = "127.0.0.1:50051"

__all__ = ["build_parser", "format_table", "main", "parse_key_value"]


def parse_key_value(text: str) -> Any:
    """A key parameter from the command line: a JSON scalar (``42``, ``1.5``, ``true``,
    ``null``, ``"42"``) or else the text itself (``Fruit``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, (int, float, str, bool)) else text


class CommandError(Exception):
    """A client-side failure (a file, a missing tool): printed as ``error: message``."""


# -- commands -----------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    given = {o.field: getattr(args, o.field) for o in SERVE_OPTIONS}
    try:
        config = resolve_config(given)
    except ValueError as err:
        print(f"partialflow serve: error: {err}", file=sys.stderr)
        return 2
    # Imported only now: the server pulls in pyspark, which a usage error need not wait for.
    from partialflow.server.app.main import serve

    return serve(config)


def _sql(client: Any, args: argparse.Namespace) -> int:
    from partialflow.client import shell

    if args.statement is None:
        if sys.stdin.isatty():
            return shell.run_shell(client)
        return shell.run_script(client, sys.stdin.read(), sys.stdout, sys.stderr)
    if args.as_of is not None:
        print_result(client.query(args.statement, as_of=args.as_of), sys.stdout)
    else:
        print_result(client.execute(args.statement), sys.stdout)
    return 0


def _lookup(client: Any, args: argparse.Namespace) -> int:
    key = tuple(parse_key_value(k) for k in args.key)
    print_result(client.lookup(args.view, key, min_lsn=args.min_lsn,
                               min_upstream_lsn=args.min_upstream_lsn), sys.stdout)
    return 0


def parse_watch_key(text: str) -> tuple:
    """A ``watch`` key: a JSON array for a view of several parameters (``'["a", 1]'``),
    else one parameter value as ``lookup`` takes it."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, list):
        return tuple(value)
    return (parse_key_value(text),)


def _watch_line(event: Any, as_json: bool) -> str:
    """One printed line per key of a snapshot, per change, per heartbeat."""
    from partialflow.client import CaughtUp, Change, Heartbeat, Snapshot

    def js(x: Any) -> str:
        return json.dumps(x, default=str)

    if isinstance(event, Snapshot):
        if as_json:
            return "\n".join(js({"event": "snapshot", "lsn": event.lsn, "key": list(k),
                                  "rows": [list(r) for r in rows]})
                             for k, rows in event.rows.items())
        return "\n".join(f"lsn {event.lsn} snapshot key={js(list(k))} rows={js(rows)}"
                         for k, rows in event.rows.items())
    if isinstance(event, Change):
        if as_json:
            return js({"event": "change", "lsn": event.lsn, "key": list(event.key),
                       "inserted": [list(r) for r in event.inserted],
                       "deleted": [list(r) for r in event.deleted]})
        return (f"lsn {event.lsn} change key={js(list(event.key))} "
                f"+{js(event.inserted)} -{js(event.deleted)}")
    kind = "caught_up" if isinstance(event, CaughtUp) else "heartbeat"
    assert isinstance(event, (CaughtUp, Heartbeat))
    return js({"event": kind, "lsn": event.lsn}) if as_json else f"lsn {event.lsn} {kind}"


def _watch(client: Any, args: argparse.Namespace) -> int:
    from partialflow.client import Heartbeat

    keys = [parse_watch_key(k) for k in args.key]
    n = 0
    with client.subscribe(args.view, keys, from_lsn=args.from_lsn) as sub:
        try:
            for event in sub:
                if isinstance(event, Heartbeat) and not args.heartbeats:
                    continue
                print(_watch_line(event, args.json), flush=True)
                n += 1
                if args.count is not None and n >= args.count:
                    break
        except KeyboardInterrupt:
            print(f"resume with --from-lsn {sub.lsn}", file=sys.stderr)
            return 130
    return 0


def _stats(client: Any, args: argparse.Namespace) -> int:
    stats = client.stats()
    print(json.dumps(stats, indent=2, sort_keys=True) if args.json else format_stats(stats))
    return 0


def _status(client: Any, args: argparse.Namespace) -> int:
    """What the server follows and how far it has got (serve --follow)."""
    stats = client.stats()
    follow = stats.get("follow")
    if args.json:
        print(json.dumps({"lsn": stats["lsn"], "follow": follow}, indent=2, sort_keys=True))
        return 0
    print(f"lsn: {stats['lsn']}")
    if not follow:
        print("follow: off (this server follows no PostgreSQL)")
        return 0
    for name in ("upstream", "state", "error", "slot", "slot_status",
                 "last_applied_upstream_lsn", "caught_up_upstream_lsn", "lag_bytes",
                 "lag_seconds", "transactions_applied", "rows_applied", "resnapshots",
                 "retries", "copy"):
        value = follow.get(name)
        if value not in ("", None) or name in ("lag_bytes", "lag_seconds"):
            print(f"{name}: {value}")
    print(f"tables: {', '.join(follow.get('tables') or []) or '(none)'}")
    for table, why in sorted((follow.get("refused") or {}).items()):
        print(f"refused {table}: {why}")
    return 0


def _explain(client: Any, args: argparse.Namespace) -> int:
    text, dot = client.explain(args.view)
    print(dot if args.dot else text)
    return 0


def render_png(dot: str, path: str) -> None:
    """Render Graphviz DOT to a PNG file with the ``dot`` program."""
    program = shutil.which("dot")
    if program is None:
        raise CommandError(
            "cannot write a PNG: Graphviz's `dot` is not installed (e.g. apt-get install "
            "graphviz); without --png the graph is printed as DOT"
        )
    done = subprocess.run(
        [program, "-Tpng", "-o", path], input=dot, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["failed"])[0]
        raise CommandError(f"dot could not write {path}: {detail}")


def _graph(client: Any, args: argparse.Namespace) -> int:
    _, dot = client.explain(args.view)
    if args.png:
        render_png(dot, args.png)
        print(f"wrote {args.png}")
    else:
        print(dot)
    return 0


def _options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--option takes KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


def _load(client: Any, args: argparse.Namespace) -> int:
    from partialflow.client.progress import LoadBar

    # The server's Spark reads the path; a file that exists here is most likely on the
    # same machine, and must not depend on the server's working directory.
    path = os.path.abspath(args.path) if os.path.exists(args.path) else args.path
    fmt = args.format or ("csv" if path.lower().endswith((".csv", ".csv.gz")) else "parquet")
    try:
        with LoadBar() as bar:
            result = client.load(
                args.table,
                path,
                format=fmt,
                header=args.header,
                force=args.force,
                options=_options(args.option),
                progress=bar,
            )
    except AlreadyExists as err:
        # The server speaks of "force" (a LoadRequest field); here it is a flag.
        raise AlreadyExists(f"{err} (add --force)") from None
    noun = "row" if result.rows == 1 else "rows"
    print(f"loaded {result.rows} {noun} into {args.table} (lsn {result.lsn})")
    return 0


def _compact(client: Any, args: argparse.Namespace) -> int:
    print(format_compaction(client.compact(args.table)))
    return 0


def _checkpoint(client: Any, args: argparse.Namespace) -> int:
    c = client.checkpoint()
    files = "file" if c["chain_files"] == 1 else "files"
    print(f"checkpoint {c['seq']} ({c['kind']}) at lsn {c['lsn']}: {c['bytes']} bytes in "
          f"{c['duration_s']:.2f} s; recovery reads a chain of {c['chain_files']} {files}")
    return 0


# -- the grammar --------------------------------------------------------------------------


def _arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An Option parser as an argparse type (its ValueError message becomes the usage error)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run a server",
        description="Run a server. Every flag may instead come from the environment variable "
        "named after it (e.g. PARTIALFLOW_MEMORY_LIMIT); a flag beats its variable.",
    )
    for option in SERVE_OPTIONS:
        serve.add_argument(
            option.flag,
            dest=option.field,
            type=_arg_type(option.parse),
            default=None,
            action="append" if option.repeat else "store",
            metavar=option.metavar,
            help=f"{option.help} [${option.env}]",
        )
    serve.set_defaults(run=_serve, remote=False)


def _remote_options() -> argparse.ArgumentParser:
    remote = argparse.ArgumentParser(add_help=False)
    env = os.environ.get
    remote.add_argument(
        "--server",
        default=env("PARTIALFLOW_SERVER", DEFAULT_SERVER),
        help=f"server address (default $PARTIALFLOW_SERVER or {DEFAULT_SERVER})",
    )
    # A first lookup on a cold server waits for Spark; the server itself gives up after 60 s.
    remote.add_argument("--timeout", type=float, default=60.0, help="seconds per call (60)")
    remote.add_argument(
        "--token",
        default=env("PARTIALFLOW_TOKEN") or None,
        help="bearer token for a server with --auth-token (default $PARTIALFLOW_TOKEN)",
    )
    remote.add_argument(
        "--tls-ca",
        default=env("PARTIALFLOW_TLS_CA") or None,
        metavar="FILE",
        help="connect with TLS, trusting this PEM CA/certificate (default $PARTIALFLOW_TLS_CA)",
    )
    remote.add_argument(
        "--tls", action="store_true", help="connect with TLS, trusting the system's CAs"
    )
    remote.add_argument(
        "--tls-server-name",
        default=None,
        metavar="NAME",
        help="the name the server's certificate must carry, if not the --server host",
    )
    return remote


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="partialflow", description="partialflow server and client"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(commands)
    remote = _remote_options()

    def command(name: str, run: Callable[..., int], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[remote], help=help, description=help)
        sub.set_defaults(run=run, remote=True)
        return sub

    sql = command("sql", _sql, "run SQL: one statement, a script on stdin, or a shell")
    sql.add_argument("statement", nargs="?", help="omit for a shell (or a script on stdin)")
    sql.add_argument("--as-of", type=int, default=None, help="run a SELECT as of this LSN")

    lookup = command("lookup", _lookup, "read a view by key")
    lookup.add_argument("view")
    lookup.add_argument("key", nargs="*", help="parameter values (JSON scalars or text)")
    lookup.add_argument(
        "--min-lsn", type=int, default=None, help="wait until the view has this LSN"
    )
    lookup.add_argument(
        "--min-upstream-lsn", default=None, metavar="X/Y",
        help="wait until the followed PostgreSQL's commits up to this WAL position are applied"
    )

    watch = command("watch", _watch, "print a view's changes for some keys as they happen")
    watch.add_argument("view")
    watch.add_argument(
        "key", nargs="+", help="one key each: a value, or a JSON array for several parameters"
    )
    watch.add_argument("--from-lsn", type=int, default=None,
                       help="resume: print the changes since this LSN instead of a snapshot")
    watch.add_argument("--json", action="store_true", help="one JSON object per line")
    watch.add_argument("--heartbeats", action="store_true",
                       help="also print the heartbeat LSN (about once a second when idle)")
    watch.add_argument("--count", type=int, default=None, metavar="N",
                       help="stop after N printed lines' events")

    stats = command("stats", _stats, "print server statistics as tables")
    stats.add_argument("--json", action="store_true", help="print JSON instead")

    status = command("status", _status,
                     "print what the server follows (serve --follow) and its replication lag")
    status.add_argument("--json", action="store_true", help="print JSON instead")

    explain = command("explain", _explain, "print a view's dataflow graph as a tree")
    explain.add_argument("view")
    explain.add_argument("--dot", action="store_true", help="Graphviz DOT instead of a text tree")

    graph = command("graph", _graph, "print a view's dataflow graph as Graphviz DOT")
    graph.add_argument("view")
    graph.add_argument("--png", metavar="FILE", help="render it to a PNG file (needs `dot`)")

    load = command("load", _load, "bulk-load a Parquet or CSV file as one atomic write")
    load.add_argument("table")
    load.add_argument("path", help="read by the server's Spark (local paths made absolute)")
    load.add_argument(
        "--format",
        choices=("parquet", "csv"),
        default=None,
        help="default: csv for *.csv, else parquet",
    )
    load.add_argument("--header", action="store_true", help="CSV: the first line names columns")
    load.add_argument("--force", action="store_true", help="load even if loaded before")
    load.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark reader option (repeatable), e.g. sep=;",
    )

    compact = command("compact", _compact, "compact one table's segments, or all tables'")
    compact.add_argument("table", nargs="?")

    command("checkpoint", _checkpoint, "take a dataflow checkpoint now (only what changed)")

    stress.add_arguments(command("stress", stress.run, stress.HELP))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``partialflow`` console script; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`partialflow graph v | head`): it has what it wanted, so no
        # error line. Python would also complain when it flushes stdout at exit; point
        # stdout at /dev/null first (the recipe of the `signal` module's documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if not args.remote:
        return args.run(args)
    from partialflow.client import Client, PartialflowError
    from partialflow.client.shell import error_line

    try:
        with Client(
            args.server,
            timeout=args.timeout,
            token=args.token,
            tls_ca=args.tls_ca,
            tls=args.tls,
            tls_server_name=args.tls_server_name,
        ) as client:
            return args.run(client, args)
    except PartialflowError as err:
        print(error_line(err), file=sys.stderr)
    except BrokenPipeError:
        raise  # not an error of the command: see main
    except (CommandError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
