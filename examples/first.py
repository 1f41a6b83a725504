"""The first session as a script: products, visits and the longest visit per category.

    python examples/first.py [HOST:PORT]

The server's address comes from the command line, else from PARTIALFLOW_SERVER, else
127.0.0.1:50051 (the default of `partialflow serve`). Run it against a fresh server: it
creates the tables `info` and `visit` and the view `max_visit`.
"""

from __future__ import annotations

import os
import sys

from partialflow.client import Client


def main(address: str) -> None:
    # The first read of a freshly started server waits for Spark's first job (JVM warm-up):
    # allow a minute per call, as the `partialflow` command does, rather than 30 s.
    with Client(address, timeout=60) as db:
        db.execute("CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)")
        db.execute("CREATE TABLE visit (product TEXT, user_name TEXT, length BIGINT)")
        db.insert("info", [("Apple", "Fruit"), ("Banana", "Fruit"),
                           ("Carrot", "Vegetable"), ("Potato", "Vegetable")])
        before = db.insert("visit", [("Apple", "Alice", 10), ("Apple", "Bob", 20),
                                     ("Carrot", "Bob", 50), ("Banana", "Alice", 40),
                                     ("Potato", "Eve", 60)])
        db.execute("""
            CREATE VIEW max_visit AS
            SELECT category, MAX(length) AS max_length
            FROM info JOIN visit ON info.product = visit.product
            WHERE category = ?
            GROUP BY category""")
        print(db.lookup("max_visit", "Fruit").rows)      # a miss: filled by Spark
        print(db.lookup("max_visit", "Vegetable").rows)  # another miss
        lsn = db.delete("visit", [("Potato", "Eve", 60)])  # every write returns its LSN
        # min_lsn: wait until the view reflects that write (read your own writes)
        print(db.lookup("max_visit", "Vegetable", min_lsn=lsn).rows)
        # Any SELECT over the base tables, on Spark, now or as of an earlier LSN:
        print(db.query("SELECT COUNT(*) AS n FROM visit").rows)
        print(db.query("SELECT COUNT(*) AS n FROM visit", as_of=before).rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1
         else os.environ.get("PARTIALFLOW_SERVER", "127.0.0.1:50051"))
