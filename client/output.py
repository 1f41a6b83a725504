"""What the command line prints: aligned tables, results, statistics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

# Per-view figures, in the order the stats table shows them.
VIEW_COLUMNS = ("keys_filled", "hits", "misses", "upqueries", "evictions", "memory_bytes")


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
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(
            isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
            for r in rows
            if r[i] is not None
        )
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return " | ".join(parts).rstrip()

    out = [line(list(columns)), "-+-".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def print_result(result: Any, out: TextIO) -> None:
    """A statement's result: a table and ``(N rows, lsn L)``, or ``OK (lsn L)`` for DDL."""
    if result.columns:
        print(format_table(result.columns, result.rows), file=out)
        noun = "row" if len(result.rows) == 1 else "rows"
        print(f"({len(result.rows)} {noun}, lsn {result.lsn})", file=out)
    else:
        print(f"OK (lsn {result.lsn})", file=out)


def _flatten(prefix: str, value: Any, into: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flatten(f"{prefix}.{key}" if prefix else str(key), value[key], into)
    else:
        into.append((prefix, value))


def format_stats(stats: dict) -> str:
    """Server statistics as two tables: one row per view, then every other figure by name
    (nested figures as ``storage.flushes``, ``upquery_ms.p50`` ...)."""
    views = stats.get("views") or {}
    parts = []
    if views:
        rows = [
            (name, *(figures.get(c) for c in VIEW_COLUMNS))
            for name, figures in sorted(views.items())
        ]
        parts.append(format_table(("view", *VIEW_COLUMNS), rows))
    else:
        parts.append("(no views)")
    figures: list[tuple[str, Any]] = []
    _flatten("", {k: v for k, v in stats.items() if k != "views"}, figures)
    # One value column mixes numbers and text, so right-align it only if all are numbers.
    parts.append(format_table(("stat", "value"), figures))
    return "\n\n".join(parts)


def format_compaction(report: dict) -> str:
    """A compaction report: one row per table, then the total and the time taken."""
    columns = ("segments_before", "segments_after", "rows_before", "rows_after")
    tables = report.get("tables") or {}
    rows = [(name, *(figures.get(c) for c in columns)) for name, figures in sorted(tables.items())]
    rows.append(("(total)", *(report.get(c) for c in columns)))
    return (
        format_table(("table", *columns), rows) + f"\n({float(report.get('seconds') or 0):.2f} s)"
    )
