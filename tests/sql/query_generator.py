"""The random queries of test_generated_queries.py: a seeded generator of SELECTs over five
small tables, with the data and key pools they are read with.

Table names are placeholders ({r}, {q}, {w}, {p}, {v}) so one query text serves the server
(each test's own table names), Spark and sqlite. Every kind below is a method ``_<kind>``;
``Generator.query`` picks one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SCHEMA = {
    "r": [("k", "BIGINT"), ("a", "BIGINT"), ("s", "TEXT")],
    "q": [("k", "BIGINT"), ("b", "BIGINT"), ("u", "TEXT")],
    "w": [("a", "BIGINT"), ("c", "DOUBLE")],
    # p and v exist for joins of 4 and 5 tables (with self-joins of r, q and w).
    "p": [("b", "BIGINT"), ("t", "TEXT")],
    "v": [("k", "BIGINT"), ("d", "BIGINT")],
}
SIZES = {"r": 30, "q": 20, "w": 15, "p": 10, "v": 10}  # rows at the start
# The values a parameter on that column is read with (by column name).
KEYS = {"k": list(range(7)), "s": ["x", "y", "z"], "a": list(range(10)), "u": ["p", "q"],
        "b": list(range(8)), "t": ["m", "n"]}


def row(table: str, rng: random.Random) -> tuple:
    """A random row of ``table``; NULLs in most columns, join columns included."""
    if table == "r":
        return (rng.randrange(6), rng.choice([*range(10), None]), rng.choice("xyz") if
                rng.random() > 0.15 else None)
    if table == "q":
        return (rng.randrange(7), rng.randrange(8), rng.choice(["p", "q", None]))
    if table == "w":
        return (rng.randrange(10), rng.choice([0.5, 1.25, 2.0, None]))
    if table == "p":
        return (rng.choice([*range(8), None]), rng.choice(["m", "n", None]))
    return (rng.choice([*range(7), None]), rng.randrange(5))


# Join columns by the values they share: k links to k; the small integers a, b and d link
# to each other.
LINKS = {"r": {"k": "k", "a": "n"}, "q": {"k": "k", "b": "n"}, "w": {"a": "n"},
         "p": {"b": "n"}, "v": {"k": "k", "d": "n"}}
KEYABLE = {"r": ["k", "s", "a"], "q": ["k", "u", "b"], "w": ["a"], "p": ["b", "t"], "v": ["k"]}
NUMERIC = {"r": ["a", "k"], "q": ["b", "k"], "w": ["c"], "p": ["b"], "v": ["d"]}


@dataclass
class Query:
    sql: str  # with {r}, {q}, {w} for the table names
    key: str | None  # the parameter's column (its values from KEYS), or None: no parameter
    sqlite: bool = True  # the dialects agree on it
    spark: bool = True  # Spark runs it (it refuses a correlated scalar subquery in the
    # SELECT list of a grouped query: SCALAR_SUBQUERY_IS_IN_GROUP_BY_OR_AGGREGATE_FUNCTION)
    refused: str | None = None  # expected refusal (words of the message)
    kind: str = ""  # the generator's kind (set by Generator.query)
    construct: str = ""  # a finer label: cross products by table count, subqueries by
    # position and correlation (the long run's checks are counted by it)


KINDS = ["filter", "join", "join3", "comma", "aggregate", "join_aggregate", "distinct", "in",
         "not_in", "exists", "scalar", "setop", "topk", "refused", "multiway", "multiway",
         "cross", "cross", "subexpr", "subexpr", "subexpr", "scalar_rows"]


class Generator:
    def __init__(self, rng: random.Random, kinds: list[str] | None = None) -> None:
        self.rng = rng
        self.kinds = kinds or KINDS  # a subset, to look at one kind closely

    def pred_r(self, t: str = "{r}") -> str:
        rng = self.rng
        n = rng.randrange(10)
        return rng.choice([
            f"{t}.a > {n}", f"{t}.a <= {n}", f"{t}.s = '{rng.choice('xyz')}'", f"{t}.s IS NULL",
            f"{t}.a IS NOT NULL", f"({t}.a > {n} OR {t}.s = 'y')",
            f"{t}.a BETWEEN {n} AND {n + 3}", f"COALESCE({t}.a, 0) < {n}",
            f"{t}.a + {t}.k > {n}", f"NOT ({t}.s = 'x')", f"{t}.s IN ('x', 'z')",
        ])

    def pred_q(self, t: str = "{q}") -> str:
        rng = self.rng
        n = rng.randrange(8)
        return rng.choice([f"{t}.b > {n}", f"{t}.u = 'p'", f"{t}.u IS NOT NULL",
                           f"({t}.b < {n} OR {t}.u IS NULL)", f"{t}.k <> {n % 7}"])

    def pred(self, table: str, ref: str) -> str:
        """A predicate on one FROM item (``ref`` is its name or alias) of ``table``."""
        if table == "r":
            return self.pred_r(ref)
        if table == "q":
            return self.pred_q(ref)
        n = self.rng.randrange(8)
        return self.rng.choice({
            "w": [f"{ref}.c > 1", f"{ref}.c IS NULL", f"{ref}.a < {n}"],
            "p": [f"{ref}.t = 'm'", f"{ref}.t IS NOT NULL", f"{ref}.b >= {n}"],
            "v": [f"{ref}.d <> {n % 5}", f"{ref}.k IS NULL", f"{ref}.d < {n}"],
        }[table])

    def where(self, preds: list[str], key: str | None) -> str:
        parts = list(preds)
        if key is not None:
            parts.append(f"{key} = ?")
        return f" WHERE {' AND '.join(parts)}" if parts else ""

    def maybe(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def query(self) -> Query:
        kind = self.rng.choice(self.kinds)
        self._correlated: set[str] = set()  # the subquery texts below naming the outer query
        q: Query = getattr(self, f"_{kind}")()
        q.kind = kind
        q.construct = q.construct or kind
        return q

    def _filter(self) -> Query:
        key = "{r}.k" if self.maybe() else None
        preds = [self.pred_r() for _ in range(self.rng.randrange(3))]
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}}{self.where(preds, key)}",
                     "k" if key else None)

    def _join(self) -> Query:
        kind = self.rng.choice(["JOIN", "LEFT JOIN"])
        key = self.rng.choice([None, ("{r}.k", "k"), ("{r}.s", "s")])
        preds = [self.pred_r()] if self.maybe() else []
        sql = (f"SELECT {{r}}.k, {{r}}.s, {{r}}.a, {{q}}.b FROM {{r}} {kind} {{q}} ON "
               f"{{r}}.k = {{q}}.k{self.where(preds, key[0] if key else None)}")
        return Query(sql, key[1] if key else None)

    def _join3(self) -> Query:
        key = self.rng.choice([None, ("{r}.k", "k")])
        preds = [self.pred_q()] if self.maybe() else []
        sql = (f"SELECT {{r}}.k, {{q}}.b, {{w}}.c FROM {{r}} JOIN {{q}} ON {{r}}.k = {{q}}.k "
               f"JOIN {{w}} ON {{r}}.a = {{w}}.a{self.where(preds, key[0] if key else None)}")
        return Query(sql, key[1] if key else None)

    def _comma(self) -> Query:
        key = "{q}.u" if self.maybe() else None
        sql = (f"SELECT {{q}}.u, {{q}}.b, {{w}}.c FROM {{q}}, {{w}} WHERE {{q}}.b = {{w}}.a AND "
               f"{self.pred_q()}" + (f" AND {key} = ?" if key else ""))
        return Query(sql, "u" if key else None)

    def _aggregates(self, x: str) -> str:
        picks = self.rng.sample(
            ["COUNT(*) AS n", f"SUM({x}) AS total", f"MIN({x}) AS lo", f"MAX({x}) AS hi",
             f"AVG({x}) AS mean", f"COUNT({x}) AS cnt", f"COUNT(DISTINCT {x}) AS nd",
             f"SUM(DISTINCT {x}) AS sd"], self.rng.randrange(1, 4))
        return ", ".join(picks)

    def _aggregate(self) -> Query:
        g = self.rng.choice(["k", "s"])
        key = g if self.maybe(0.7) else None
        preds = [self.pred_r()] if self.maybe() else []
        having = f" HAVING COUNT(*) > {self.rng.randrange(3)}" if self.maybe(0.3) else ""
        sql = (f"SELECT {{r}}.{g}, {self._aggregates('{r}.a')} FROM {{r}}"
               f"{self.where(preds, f'{{r}}.{g}' if key else None)} GROUP BY {{r}}.{g}{having}")
        return Query(sql, key)

    def _join_aggregate(self) -> Query:
        key = "k" if self.maybe(0.7) else None
        sql = (f"SELECT {{r}}.k, {self._aggregates('{q}.b')} FROM {{r}} JOIN {{q}} ON "
               f"{{r}}.k = {{q}}.k{self.where([], '{r}.k' if key else None)} GROUP BY {{r}}.k")
        return Query(sql, key)

    def _distinct(self) -> Query:
        key = "s" if self.maybe() else None
        preds = [self.pred_r()] if self.maybe() else []
        return Query(f"SELECT DISTINCT {{r}}.s, {{r}}.a FROM {{r}}"
                     f"{self.where(preds, '{r}.s' if key else None)}", key)

    def _in(self) -> Query:
        key = "k" if self.maybe() else None
        sub = f"SELECT {{q}}.b FROM {{q}} WHERE {self.pred_q()}"
        return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                     f"{self.where([f'{{r}}.a IN ({sub})'], '{r}.k' if key else None)}", key)

    def _not_in(self) -> Query:
        key = "k" if self.maybe() else None
        value = self.rng.choice(["{q}.b", "CASE WHEN {q}.b > 5 THEN NULL ELSE {q}.b END"])
        sub = f"SELECT {value} FROM {{q}} WHERE {self.pred_q()}"
        return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                     f"{self.where([f'{{r}}.a NOT IN ({sub})'], '{r}.k' if key else None)}", key)

    def _scalar(self) -> Query:
        key = "k" if self.maybe() else None
        agg = self.rng.choice(["MAX(z.b)", "AVG(z.b)", "COUNT(*)", "SUM(z.b)", "MIN(z.b)"])
        link = self.rng.choice(["", "z.k = {r}.k AND "])
        sub = f"(SELECT {agg} FROM {{q}} z WHERE {link}{self.pred_q('z')})"
        if self.maybe():
            return Query(f"SELECT {{r}}.k, {{r}}.a FROM {{r}}"
                         f"{self.where([f'{{r}}.a >= {sub}'], '{r}.k' if key else None)}", key)
        return Query(f"SELECT {{r}}.k, {{r}}.s, {sub} AS x FROM {{r}}"
                     f"{self.where([], '{r}.k' if key else None)}", key)

    def _exists(self) -> Query:
        key = "k" if self.maybe() else None
        neg = "NOT " if self.maybe() else ""
        link = self.rng.choice(["z.k = {r}.k", "z.b = {r}.a", "z.k = {r}.k AND z.b = {r}.a"])
        sub = f"SELECT 1 FROM {{q}} z WHERE {link} AND {self.pred_q('z')}"
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}}"
                     f"{self.where([f'{neg}EXISTS ({sub})'], '{r}.k' if key else None)}", key)

    def _setop(self) -> Query:
        op = self.rng.choice(["UNION", "UNION ALL", "EXCEPT", "INTERSECT", "EXCEPT ALL",
                              "INTERSECT ALL"])
        left = f"SELECT {{r}}.k, {{r}}.a FROM {{r}} WHERE {self.pred_r()}"
        right = f"SELECT {{q}}.k, {{q}}.b FROM {{q}} WHERE {self.pred_q()}"
        # sqlite has no EXCEPT ALL / INTERSECT ALL.
        return Query(f"{left} {op} {right}", None, sqlite=not op.endswith(" ALL")
                     or op == "UNION ALL")

    def _topk(self) -> Query:
        n = self.rng.randrange(1, 4)
        # Selected columns are the key and the order columns: ties are identical rows.
        return Query(f"SELECT {{r}}.k, {{r}}.a, {{r}}.s FROM {{r}} WHERE {{r}}.k = ? AND "
                     f"{{r}}.a IS NOT NULL ORDER BY {{r}}.a DESC, {{r}}.s LIMIT {n}", "k")

    def _refused(self) -> Query:
        sql, why = self.rng.choice([
            ("SELECT {r}.k FROM {r} GROUP BY {r}.k ORDER BY (SELECT COUNT(*) FROM {q}) LIMIT 2",
             "scalar subquery"),
            ("SELECT {r}.k, COUNT(*) AS n FROM {r} GROUP BY {r}.k HAVING COUNT(*) > "
             "(SELECT {q}.b FROM {q})", "may return more than one row"),
            ("SELECT {r}.k, ROW_NUMBER() OVER (ORDER BY {r}.a) AS n FROM {r}", "window"),
            ("SELECT {r}.k FROM {r} RIGHT JOIN {q} ON {r}.k = {q}.k", "RIGHT JOIN"),
        ])
        return Query(sql, None, refused=why)



    def _cross(self) -> Query:
        """A cross product of 2 or 3 of the small tables (w, p, v; self-products included):
        a comma list, CROSS JOIN or a JOIN ON with non-equalities only; filtered on one
        side, on both (a theta join) or not at all; rows, DISTINCT or grouped; keyed or
        not."""
        rng = self.rng
        n = rng.choice([2, 2, 3])
        tables = [rng.choice("wpv") for _ in range(n)]
        refs = [f"x{i}" for i in range(n)]
        items = [f"{{{t}}} {refs[i]}" for i, t in enumerate(tables)]
        num = {t: NUMERIC[t][0] for t in "wpv"}
        thetas = [f"{refs[i]}.{num[tables[i]]} {rng.choice(['<', '>=', '<>'])} "
                  f"{refs[j]}.{num[tables[j]]}" for i in range(n) for j in range(i + 1, n)]
        where = [self.pred(tables[i], refs[i]) for i in rng.sample(range(n), rng.randrange(n))]
        where += rng.sample(thetas, rng.randrange(len(thetas) + 1))
        form = rng.choice(["comma", "cross", "on"])
        if form == "comma":
            text = ", ".join(items)
        elif form == "cross":
            text = " CROSS JOIN ".join(items)
        else:
            text = items[0]
            for i in range(1, n):
                text += f" JOIN {items[i]} ON {thetas[i - 1] if i == 1 else thetas[-1]}"
        at = rng.randrange(n)
        col = rng.choice(KEYABLE[tables[at]])
        key = f"{refs[at]}.{col}" if self.maybe(0.5) else None
        shape = rng.choice(["rows", "rows", "distinct", "aggregate"])
        if shape == "aggregate":
            x = rng.randrange(n)
            aggs = self._aggregates(f"{refs[x]}.{num[tables[x]]}")
            sql = (f"SELECT {refs[at]}.{col} AS g, {aggs} FROM {text}{self.where(where, key)} "
                   f"GROUP BY {refs[at]}.{col}")
            return Query(sql, col if key else None, construct=f"cross {n} tables")
        picks = [f"{refs[i]}.{c}" for i in range(n) for c, _ in SCHEMA[tables[i]]]
        cols = rng.sample(picks, rng.randrange(2, 5))
        out = ", ".join(f"{c} AS c{m}" for m, c in enumerate(cols))
        distinct = "DISTINCT " if shape == "distinct" else ""
        return Query(f"SELECT {distinct}{out} FROM {text}{self.where(where, key)}",
                     col if key else None, construct=f"cross {n} tables")

    def _scalar_sub(self, outer: str, correlated: bool | None = None) -> str:
        """A one-value subquery over q: an aggregate, correlated with ``outer`` (r's name)
        by an equality, an inequality or both, or not at all."""
        rng = self.rng
        agg = rng.choice(["MAX(z.b)", "MIN(z.b)", "COUNT(*)", "SUM(z.b)", "COUNT(z.u)",
                          "MAX(z.b) - MIN(z.b)", "COUNT(*) + 1"])
        corr = rng.choice(["", "z.k = {o}.k AND ", "z.b < {o}.a AND ", "z.k = {o}.k AND "
                           "z.b >= {o}.a AND ", "z.b + 1 > {o}.k AND "])
        if correlated is False:
            corr = ""
        text = f"(SELECT {agg} FROM {{q}} z WHERE {corr.format(o=outer)}{self.pred_q('z')})"
        if corr:
            self._correlated.add(text)
        return text

    def _predicate_sub(self, outer: str) -> str:
        """EXISTS / IN / NOT IN over q, correlated with ``outer`` or not."""
        rng = self.rng
        corr = rng.choice(["", "z.k = {o}.k AND ", "z.b > {o}.a AND ", "z.k <> {o}.k AND "])
        cond = f"{corr.format(o=outer)}{self.pred_q('z')}"
        value = rng.choice(["z.b", "CASE WHEN z.b > 5 THEN NULL ELSE z.b END"])
        text = rng.choice([
            f"EXISTS (SELECT 1 FROM {{q}} z WHERE {cond})",
            f"NOT EXISTS (SELECT 1 FROM {{q}} z WHERE {cond})",
            f"{outer}.a IN (SELECT {value} FROM {{q}} z WHERE {cond})",
            f"{outer}.a NOT IN (SELECT {value} FROM {{q}} z WHERE {cond})",
            f"{outer}.k + 1 IN (SELECT z.b FROM {{q}} z WHERE {cond})",
        ])
        if corr:
            self._correlated.add(text)
        return text

    def _subexpr(self) -> Query:
        """Subqueries in every expression position over r: arithmetic, CASE, BETWEEN, an IN
        list, COALESCE, inside OR / NOT, the SELECT list, HAVING of a grouped query."""
        rng = self.rng
        o = "{r}"
        key = "k" if self.maybe() else None
        where_key = f"{o}.k" if key else None
        s, p = self._scalar_sub(o), self._predicate_sub(o)
        n = rng.randrange(6)
        position = rng.choice(["arith", "case", "between", "inlist", "or", "not", "select_pred",
                               "coalesce", "having", "having_select"])
        if position in ("having", "having_select"):
            g = self._scalar_sub(o, correlated=False) if self.maybe(0.4) else (
                "(SELECT COUNT(*) FROM {q} z WHERE z.k = {r}.k)")
            if position == "having":
                sql = (f"SELECT {o}.k, COUNT(*) AS n, SUM({o}.a) AS s FROM {o}"
                       f"{self.where([], where_key)} GROUP BY {o}.k HAVING COUNT(*) + 1 > {g}")
            else:
                sql = (f"SELECT {o}.k, MAX({o}.a) AS m, {g} AS sub FROM {o}"
                       f"{self.where([], where_key)} GROUP BY {o}.k")
                return Query(sql, key, spark="{r}.k" not in g,
                             construct=self._label(position, sql, g))
            return Query(sql, key, construct=self._label(position, sql, g))
        if position == "arith":
            sql = f"SELECT {o}.k, {o}.a, {o}.a * 2 - {s} AS x FROM {o}{self.where([], where_key)}"
        elif position == "case":
            sql = (f"SELECT {o}.k, CASE WHEN {p} THEN 'y' WHEN {o}.a > {s} THEN 'a' ELSE 'n' END "
                   f"AS c FROM {o}{self.where([], where_key)}")
        elif position == "between":
            sql = (f"SELECT {o}.k, {o}.a FROM {o}"
                   f"{self.where([f'{o}.a BETWEEN {s} AND {s} + {n}'], where_key)}")
        elif position == "inlist":
            sql = (f"SELECT {o}.k, {o}.s FROM {o}"
                   f"{self.where([f'{o}.a IN ({n}, {s}, {s} + 1)'], where_key)}")
        elif position == "or":
            sql = (f"SELECT {o}.k, {o}.a, {o}.s FROM {o}"
                   f"{self.where([f'({self.pred_r()} OR {p})'], where_key)}")
        elif position == "not":
            sql = (f"SELECT {o}.k, {o}.a FROM {o}"
                   f"{self.where([f'NOT ({p} AND {o}.a > {s})'], where_key)}")
        elif position == "select_pred":
            sql = (f"SELECT {o}.k, CASE WHEN {p} THEN 1 ELSE 0 END AS m FROM {o}"
                   f"{self.where([], where_key)}")
        else:
            sql = (f"SELECT {o}.k, COALESCE({s}, -1) AS v FROM {o}"
                   f"{self.where([self.pred_r()], where_key)}")
        return Query(sql, key, construct=self._label(position, sql))

    def _label(self, position: str, sql: str, *correlated: str) -> str:
        """``subexpr <position> correlated|uncorrelated`` for the check counts."""
        corr = any(t in sql for t in self._correlated) or any("{r}." in t for t in correlated)
        return f"subexpr {position} {'correlated' if corr else 'uncorrelated'}"

    def _scalar_rows(self) -> Query:
        """A scalar subquery without an aggregate: none, one or several rows as the writes
        go, correlated by an equality or not, in the SELECT list or a WHERE comparison. A
        read meeting several rows must fail (FailedPrecondition) exactly when Spark's query
        does (SCALAR_SUBQUERY_TOO_MANY_ROWS); sqlite takes the first row instead."""
        rng = self.rng
        o = "{r}"
        corr = rng.choice(["", "z.k = {r}.k AND "])
        cond = rng.choice([f"z.k = {rng.randrange(7)} AND z.u = 'p'",
                           f"z.b = {rng.randrange(8)} AND z.u IS NOT NULL", "z.u = 'q'"])
        sub = f"(SELECT z.b FROM {{q}} z WHERE {corr}{cond})"
        key = "k" if self.maybe(0.7) else None
        where_key = f"{o}.k" if key else None
        if self.maybe():
            sql = f"SELECT {o}.k, {o}.a, {sub} + 1 AS x FROM {o}{self.where([], where_key)}"
        else:
            sql = (f"SELECT {o}.k, {o}.s FROM {o}"
                   f"{self.where([f'{o}.a >= {sub}'], where_key)}")
        return Query(sql, key, sqlite=False, construct="scalar_rows " + (
            "correlated" if corr else "uncorrelated"))

    def _multiway(self) -> Query:
        """A join of 4 or 5 tables, self-joins included: a random tree of equalities written
        as JOIN / LEFT JOIN ... ON, as a comma join (equalities in WHERE, FROM in any order)
        or as two comma-separated groups of JOINs; keyed on one table's column or not;
        plain rows, DISTINCT, or an aggregate grouped on the key column."""
        rng = self.rng
        n = rng.choice([4, 5])
        tables = [rng.choice("rq")] + [rng.choice("rqwpv") for _ in range(n - 1)]
        refs: list[str] = []
        items: list[str] = []
        for i, t in enumerate(tables):
            if t in tables[:i]:  # a self-join: the repeat gets an alias
                refs.append(f"{t}{i}")
                items.append(f"{{{t}}} {rng.choice(['AS ', ''])}{t}{i}")
            else:
                refs.append(f"{{{t}}}")
                items.append(f"{{{t}}}")
        form = rng.choice(["on", "on", "comma", "mixed"])
        starts = {"on": [0], "comma": list(range(n)), "mixed": [0, rng.randrange(2, n)]}[form]
        where: list[str] = []
        text = items[0]
        for i in range(1, n):
            start = max(s for s in starts if s <= i)
            # A new comma unit links to anything before it (in WHERE); a JOIN's ON sees only
            # its own unit.
            earlier = range(i) if i == start else range(start, i)
            pairs = [(j, cj, ci) for j in earlier for cj, d in LINKS[tables[j]].items()
                     for ci, e in LINKS[tables[i]].items() if d == e]
            j, cj, ci = rng.choice(pairs)
            eqs = [self._eq(f"{refs[j]}.{cj}", f"{refs[i]}.{ci}")]
            more = [(cj2, ci2) for j2, cj2, ci2 in pairs if j2 == j and (cj2, ci2) != (cj, ci)]
            if more and self.maybe(0.2):  # a two-column join
                cj2, ci2 = rng.choice(more)
                eqs.append(self._eq(f"{refs[j]}.{cj2}", f"{refs[i]}.{ci2}"))
            if i == start:
                where += eqs
                text += f", {items[i]}"
                continue
            kind = rng.choice(["JOIN", "INNER JOIN", "LEFT JOIN", "LEFT JOIN"])
            if kind != "LEFT JOIN" and self.maybe(0.2):  # LEFT JOIN ON takes equalities only
                eqs.append(self.pred(tables[i], refs[i]))
            text += f" {kind} {items[i]} ON {' AND '.join(eqs)}"
        if form == "comma":  # the planner joins them in link order, whatever the FROM order
            text = ", ".join(rng.sample(items, n))
        where += [self.pred(tables[i], refs[i]) for i in rng.sample(range(n), rng.randrange(3))]
        rng.shuffle(where)
        at = rng.randrange(n)
        col = rng.choice(KEYABLE[tables[at]])
        key = f"{refs[at]}.{col}" if self.maybe(0.7) else None
        shape = rng.choice(["rows", "rows", "distinct", "aggregate"])
        if shape == "aggregate":
            x = rng.randrange(n)
            aggs = self._aggregates(f"{refs[x]}.{rng.choice(NUMERIC[tables[x]])}")
            having = f" HAVING COUNT(*) > {rng.randrange(3)}" if self.maybe(0.3) else ""
            sql = (f"SELECT {refs[at]}.{col} AS g, {aggs} FROM {text}{self.where(where, key)} "
                   f"GROUP BY {refs[at]}.{col}{having}")
            return Query(sql, col if key else None)
        picks = [f"{refs[i]}.{c}" for i in range(n) for c, _ in SCHEMA[tables[i]]]
        cols = rng.sample(picks, rng.randrange(2, 5 if shape == "distinct" else 7))
        out = ", ".join(f"{c} AS c{m}" for m, c in enumerate(cols))
        distinct = "DISTINCT " if shape == "distinct" else ""
        return Query(f"SELECT {distinct}{out} FROM {text}{self.where(where, key)}",
                     col if key else None)

    def _eq(self, left: str, right: str) -> str:
        return f"{left} = {right}" if self.maybe() else f"{right} = {left}"
