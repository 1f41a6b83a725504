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
    ("SELECT k FROM {t} WHERE v NOT IN (SELECT k, v FROM {t})", "SELECT of one column"),
    ("SELECT k FROM {t} WHERE v IN (SELECT k, v FROM {t})", "must select one column"),
    ("SELECT k FROM {t} EXCEPT SELECT k, v FROM {t}", "EXCEPT branches have different numbers"),
    ("SELECT k, COUNT(*) FROM {t} GROUP BY k HAVING COUNT(*) > (SELECT v FROM {t})",
     "may return more than one row"),
    ("SELECT k FROM {t} y WHERE EXISTS (SELECT 1 FROM {t} x WHERE x.v = y.k OR x.k IS NULL)",
     "names the outer query other than in a comparison"),
    ("SELECT k FROM {t} y WHERE v IN (SELECT v FROM {t} x WHERE x.k = y.k LIMIT 2)",
     "LIMIT in this subquery"),
    ("SELECT k, COUNT(*) FROM {t} y GROUP BY k HAVING COUNT(*) > (SELECT COUNT(*) FROM {t} x "
     "WHERE x.v = y.v)", "not a GROUP BY column"),
    ("SELECT k FROM {t} INTERSECT ALL SELECT v FROM {t} LIMIT 2", "LIMIT needs an ORDER BY"),
    ("SELECT k, COUNT(DISTINCT v), COUNT(DISTINCT k) FROM {t} GROUP BY k",
     "DISTINCT over two different arguments"),
    ("SELECT k, v FROM {t} LIMIT 3", "LIMIT needs an ORDER BY"),
    ("SELECT k, v FROM {t} ORDER BY v LIMIT 3 OFFSET 2", "OFFSET"),
    ("SELECT k, v FROM {t} WHERE k = ? OR v = 1", "parameter"),
    ("SELECT k, v FROM {t} WHERE k > ?", "parameter"),
    ("SELECT k, nope FROM {t}", "unknown column 'nope'"),
    ("SELECT k, v FROM {t} GROUP BY k", "must appear in GROUP BY"),
    ("SELECT a.k FROM {t} a LEFT JOIN {t} b ON a.k > b.k", "LEFT JOIN conditions must be"),
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


# Refused for the construct itself, wherever it sits, named with its place in the statement
# the user sent: (view SQL, words the message must hold, the text the position points at).
REFUSED_AT = [
    ("SELECT k FROM {t} GROUP BY k ORDER BY (SELECT MAX(v) FROM {t}) LIMIT 2", "scalar subquery",
     "SELECT MAX"),
    ("SELECT k FROM {t}\n GROUP BY k\n ORDER BY EXISTS (SELECT v FROM {t} x WHERE x.k = k)",
     "EXISTS (SELECT", "EXISTS"),
    ("SELECT k, ROW_NUMBER() OVER (ORDER BY v) AS r FROM {t}", "window function", "ROW_NUMBER"),
]


@pytest.mark.parametrize("sql,needle,at", REFUSED_AT, ids=[n for _, n, _ in REFUSED_AT])
def test_refusal_names_the_construct_and_where_it_is(server, uniq, sql, needle, at):
    t = f"{uniq}t"
    statement = f"CREATE VIEW {uniq}v AS " + sql.format(t=t)
    offset = statement.index(at)
    line = statement.count("\n", 0, offset) + 1
    column = offset - statement.rfind("\n", 0, offset)
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        with pytest.raises(InvalidArgument) as err:
            c.execute(statement)
        message = str(err.value)
        assert needle in message
        assert f"at line {line}, column {column}" in message, message
        # Not a symptom of planning around it.
        assert "FROM clause" not in message and "GROUP BY" not in message
        assert f"{uniq}v" not in c.stats()["views"]


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


def test_explain_shows_how_new_constructs_are_planned(server, uniq):
    t, u = f"{uniq}t", f"{uniq}u"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, v BIGINT)")
        c.execute(f"CREATE TABLE {u} (k BIGINT, w BIGINT)")
        views = {
            # a comma join is a join, not a filter over a cross product
            "comma": (f"SELECT {t}.v FROM {t}, {u} WHERE {t}.k = {u}.k AND {t}.k = ?", "⋈"),
            # DISTINCT aggregates: distinct (δ) below the aggregate (γ)
            "dagg": (f"SELECT k, COUNT(DISTINCT v) AS n FROM {t} WHERE k = ? GROUP BY k", "γ"),
            # IN (SELECT ...): a join with the distinct values of the subquery
            "semi": (f"SELECT k FROM {t} WHERE v IN (SELECT w FROM {u}) AND k = ?", "⋈"),
            # EXCEPT ALL: counts per row (γ over a tagged ⋃), multiplicity as rows (ρ)
            "exceptall": (f"SELECT k, v FROM {t} EXCEPT ALL SELECT k, w FROM {u}", "ρ"),
            # NOT EXISTS: a left join with the distinct correlated values, unmatched rows kept
            "anti": (f"SELECT k FROM {t} WHERE NOT EXISTS (SELECT 1 FROM {u} WHERE {u}.k = "
                     f"{t}.v) AND k = ?", "⟕"),
        }
        for name, (sql, op) in views.items():
            c.execute(f"CREATE VIEW {uniq}{name} AS {sql}")
            text, _ = c.explain(f"{uniq}{name}")
            assert op in text, f"{name}: {op!r} missing from:\n{text}"
            assert "σ" not in text or name != "comma", text
            if name == "exceptall":
                assert text.index("γ") > text.index("ρ") and "⋃" in text, text
            if name in ("dagg", "semi", "anti"):
                assert text.index("δ") > text.index(op), f"δ not below {op}:\n{text}"
