"""SQL text as the front end handles it before parsing: statements split on top-level
semicolons, ``$n`` parameters found and replaced by literals, the leading keyword.

One small scanner that knows quotes, dollar quotes and comments, so a ``;`` or ``$1`` inside
a string is left alone and the text handed on is the client's own (not re-rendered).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_PARAM = re.compile(r"\$(\d+)")


def _tokens(sql: str) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) spans: 'quote' (strings, quoted names, comments) or 'code'."""
    i, n, start = 0, len(sql), 0
    while i < n:
        c = sql[i]
        if c in "'\"":
            if start < i:
                yield "code", start, i
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                if sql[j] == "\\" and c == "'" and i > 0 and sql[i - 1] in "eE":
                    j += 1
                j += 1
            yield "quote", i, min(j + 1, n)
            i = start = min(j + 1, n)
        elif sql.startswith("--", i):
            if start < i:
                yield "code", start, i
            j = sql.find("\n", i)
            j = n if j < 0 else j
            yield "quote", i, j
            i = start = j
        elif sql.startswith("/*", i):
            if start < i:
                yield "code", start, i
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            yield "quote", i, j
            i = start = j
        elif c == "$" and (m := _DOLLAR_TAG.match(sql, i)) and not sql[i + 1:i + 2].isdigit():
            if start < i:
                yield "code", start, i
            end = sql.find(m.group(0), m.end())
            end = n if end < 0 else end + len(m.group(0))
            yield "quote", i, end
            i = start = end
        else:
            i += 1
    if start < n:
        yield "code", start, n


def split_statements(sql: str) -> list[str]:
    """The statements of a simple Query, each without its ';' (empty ones dropped)."""
    out, begin = [], 0
    for kind, s, e in _tokens(sql):
        if kind != "code":
            continue
        pos = sql.find(";", s, e)
        while pos >= 0:
            out.append(sql[begin:pos])
            begin = pos + 1
            pos = sql.find(";", begin, e)
    out.append(sql[begin:])
    return [s for s in out if strip_comments(s).strip()]


def strip_comments(sql: str) -> str:
    return "".join(sql[s:e] if k == "code" or not sql.startswith(("--", "/*"), s) else " "
                   for k, s, e in _tokens(sql))


def first_words(sql: str, n: int = 2) -> list[str]:
    return strip_comments(sql).upper().replace("(", " ( ").split()[:n]


def param_count(sql: str) -> int:
    """The highest ``$n`` in the code (not in strings)."""
    top = 0
    for kind, s, e in _tokens(sql):
        if kind == "code":
            for m in _PARAM.finditer(sql, s, e):
                top = max(top, int(m.group(1)))
    return top


def literal(value: Any) -> str:
    """A Python value as an SQL literal (the engine and Spark read these back)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return f"CAST('{value}' AS DOUBLE)"
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def bind_params(sql: str, params: list[Any]) -> str:
    """``sql`` with every ``$n`` replaced by the literal of ``params[n-1]``."""
    if not params:
        return sql
    parts = []
    for kind, s, e in _tokens(sql):
        if kind != "code":
            parts.append(sql[s:e])
            continue

        def sub(m: re.Match[str]) -> str:
            i = int(m.group(1))
            if not 1 <= i <= len(params):
                return m.group(0)
            return literal(params[i - 1])

        parts.append(_PARAM.sub(sub, sql[s:e]))
    return "".join(parts)
