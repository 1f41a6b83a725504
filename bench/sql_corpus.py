"""Refusal rate of a corpus of SELECTs: how many would be refused as views, and why.

Reads sqllogictest files (the format of SQLite's public-domain test corpus: ``statement``
blocks with CREATE TABLE, ``query`` blocks with a SELECT), takes the tables' columns from
the CREATE TABLE statements, and plans every SELECT as a view with the server's planner
(no server, no Spark: planning is where a view is accepted or refused). Prints the number
of queries, the refused share, and the most common refusal reasons (their first words),
each with one full message as the user sees it (it names the construct and why).

    python bench/sql_corpus.py path/to/test/select1.test path/to/test/select2.test ...

The corpus itself is not in the repository; any sqllogictest checkout has it (test/select*.test).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import sqlglot
from sqlglot import exp

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.sql.planner import Planner


def blocks(text: str) -> list[tuple[str, str]]:
    """(kind, sql) of each statement/query block of a sqllogictest file."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.strip().splitlines() if not ln.startswith("#")]
        if not lines:
            continue
        head = lines[0].split()
        if not head or head[0] not in ("statement", "query"):
            continue
        body = []
        for ln in lines[1:]:
            if ln.strip() == "----":
                break
            body.append(ln)
        out.append((head[0], "\n".join(body)))
    return out


def main(paths: list[str]) -> None:
    queries: list[tuple[str, dict[str, tuple[str, ...]]]] = []
    for p in paths:
        tables: dict[str, tuple[str, ...]] = {}  # each file has its own tables
        for kind, sql in blocks(Path(p).read_text()):
            if kind == "statement" and sql.upper().startswith("CREATE TABLE"):
                tree = sqlglot.parse_one(sql)
                schema = tree.this
                cols = tuple(c.name.lower() for c in schema.expressions
                             if isinstance(c, exp.ColumnDef))
                tables[schema.this.name.lower()] = cols
            elif kind == "query" and sql.strip().upper().startswith("SELECT"):
                queries.append((sql, tables))
    reasons: Counter[str] = Counter()
    examples: dict[str, str] = {}
    refused = 0
    for sql, catalog in queries:
        try:
            Planner(catalog.get, lambda _v: None).plan(sql)
        except (InvalidArgument, NotFound) as err:
            refused += 1
            why = " ".join(re.sub(r"'[^']*'|\([^)]*\)", "", str(err)).split()[:8])
            reasons[why] += 1
            examples.setdefault(why, str(err))
        except Exception as err:  # a planner crash is a finding too: count it by type
            refused += 1
            reasons[f"CRASH {type(err).__name__}"] += 1
    n = len(queries)
    print(f"{n} queries, {refused} refused ({100 * refused / max(n, 1):.1f}%)")
    for why, k in reasons.most_common(12):
        print(f"  {k:5d}  {why}")
        if why in examples:
            print(f"         e.g. {examples[why][:300]}")


if __name__ == "__main__":
    main(sys.argv[1:])
