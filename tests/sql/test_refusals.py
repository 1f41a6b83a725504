"""Views the server cannot maintain are refused at CREATE VIEW with InvalidArgument naming
the construct (or NotFound for unknown names), nothing is created, and explain shows how
an accepted view is maintained."""

from __future__ import annotations

import pytest

from partialflow.client import InvalidArgument, NotFound

REFUSED = [
    ("SELECT a.k FROM {t} a RIGHT JOIN {t} b ON a.k = b.k", "RIGHT JOIN"),
    ("SELECT a.k FROM {t} a FULL OUTER JOIN {t} b ON a.k = b.k", "FULL"),
    ("SELECT k, ROW_NUMBER() OVER (ORDER BY v) FROM {t}", "window"),
    ("SELECT k FROM {t} WHERE v IN (SELECT v FROM {t})", "subquer"),
    ("SELECT k, COUNT(DISTINCT v) FROM {t} GROUP BY k", "DISTINCT"),
    ("SELECT k, v FROM {t} LIMIT 3", "LIMIT needs an ORDER BY"),
    ("SELECT k, v FROM {t} ORDER BY v LIMIT 3 OFFSET 2", "OFFSET"),
    ("SELECT k, v FROM {t} WHERE k = ? OR v = 1", "parameter"),
    ("SELECT k, v FROM {t} WHERE k > ?", "parameter"),
    ("SELECT k, nope FROM {t}", "unknown column 'nope'"),
    ("SELECT k, v FROM {t} GROUP BY k", "must appear in GROUP BY"),
    ("SELECT a.k FROM {t} a JOIN {t} b ON a.k > b.k", "no equality"),
    ("SELECT a.k FROM {t} a, {t} b WHERE a.v > b.v", "cross product: no equality in WHERE joins"),
    ("SELECT a.k FROM {t} a CROSS JOIN {t} b", "cross product"),
    ("SELECT k FROM {t} WHERE k = ? UNION SELECT k FROM {t}", "parameters"),
    ("WITH x AS (SELECT k FROM {t}) SELECT k FROM x", "WITH"),
    ("SELEC k FROM {t}", "malformed SQL"),
]


@pytest.mark.parametrize("sql,needle", REFUSED, ids=[n for _, n in REFUSED])
def test_unsupported_view_is_refused_by_name(server, uniq, sql, needle):
    t = f"{uniq}t"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        with pytest.raises(InvalidArgument) as err:
            c.execute(f"CREATE VIEW {uniq}v AS " + sql.format(t=t))
        assert needle.lower() in str(err.value).lower()
        assert f"{uniq}v" not in c.stats()["views"]
        with pytest.raises(NotFound):
            c.lookup(f"{uniq}v", ())


def test_unknown_table_and_view_are_not_found(server, uniq):
    with server.client() as c:
        with pytest.raises(NotFound, match="nosuch"):
            c.execute(f"CREATE VIEW {uniq}v AS SELECT k FROM {uniq}nosuch")
        with pytest.raises(NotFound, match="unknown view"):
            c.lookup(f"{uniq}nosuch", 1)


def test_wrong_key_arity_is_invalid(server, uniq):
    t = f"{uniq}t"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        c.execute(f"CREATE VIEW {uniq}v AS SELECT k, v FROM {t} WHERE k = ?")
        with pytest.raises(InvalidArgument, match="1 parameter"):
            c.lookup(f"{uniq}v", (1, 2))


def test_explain_shows_operators_and_state(server, uniq):
    p = uniq
    with server.client() as c:
        c.execute(f"CREATE TABLE {p}info (product TEXT, category TEXT)")
        c.execute(f"CREATE TABLE {p}visit (product TEXT, user TEXT, length BIGINT)")
        c.execute(
            f"CREATE VIEW {p}v AS SELECT category, MAX(length) AS m FROM {p}info JOIN {p}visit "
            f"ON {p}info.product = {p}visit.product WHERE category = ? GROUP BY category"
        )
        text, dot = c.explain(f"{p}v")
        for needle in ("reader", "γ", "⋈", f"table {p}info", "partial on", "full", "evict-on-miss"):
            assert needle in text, f"{needle!r} missing from:\n{text}"
        assert dot.startswith("digraph") and "->" in dot
