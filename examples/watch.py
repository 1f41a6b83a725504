"""Watch keys of a view change: a snapshot, then every change as writes arrive.

    python examples/watch.py [--server HOST:PORT] VIEW KEY [KEY ...]

e.g. `python examples/watch.py max_visit Fruit Vegetable` after examples/first.py. Write
from another terminal (`partialflow sql "INSERT INTO visit VALUES ('Apple', 'Dan', 45)"`)
to see a change; Ctrl-C stops it, printing the LSN to resume from. The address comes from
--server, else PARTIALFLOW_SERVER, else 127.0.0.1:50051.
"""

from __future__ import annotations

import argparse
import os
import sys

from partialflow.client import Change, Client, Heartbeat, Snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("PARTIALFLOW_SERVER",
                                                           "127.0.0.1:50051"))
    parser.add_argument("--count", type=int, default=None,
                        help="stop after this many changes (default: until Ctrl-C)")
    parser.add_argument("view")
    parser.add_argument("keys", nargs="+")
    args = parser.parse_args(argv)
    changes = 0
    with Client(args.server) as db, db.subscribe(args.view, args.keys) as sub:
        try:
            for event in sub:
                if isinstance(event, Snapshot):
                    for key, rows in event.rows.items():
                        print(f"lsn {event.lsn}: {key[0]} is {rows}", flush=True)
                    print("waiting for changes (write from another terminal; Ctrl-C stops)",
                          flush=True)
                elif isinstance(event, Change):
                    print(f"lsn {event.lsn}: {event.key[0]} +{event.inserted} "
                          f"-{event.deleted}", flush=True)
                    changes += 1
                    if args.count is not None and changes >= args.count:
                        break
                elif isinstance(event, Heartbeat):
                    pass  # about once a second while nothing changes: still exact at event.lsn
        except KeyboardInterrupt:
            # Leaving the `with` closes the stream; sub.lsn is where to resume from
            # (db.subscribe(view, keys, from_lsn=...)).
            print(f"stopped; resume from lsn {sub.lsn}", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
