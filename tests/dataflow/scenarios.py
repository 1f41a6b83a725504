"""The tables, rows and views the JVM-free ordering tests run over.

Every view shape of ``tests/dataflow/test_random_shapes.py`` (over the same two tables), a
few of them together on shared nodes, and the docs' running examples: the visits
MAX-per-category join and the Nexmark Q4 view over a view. Key values are drawn mostly
from a small domain with one hot key, so groups grow past the bounded MIN/MAX and top-k
candidates and deletions exhaust them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, when imported alone

from test_random_shapes import SHAPES  # one list of shapes for both

Row = tuple[Any, ...]


@dataclass
class Scenario:
    tables: dict[str, list[tuple[str, str]]]
    rows: dict[str, st.SearchStrategy]  # a row of each table
    views: dict[str, str]  # name -> SQL, created in this order
    keys: dict[str, list[Row]]  # view -> keys to read (with some that match nothing)
    initial: int = 12  # rows per table before the views are created
    memory_limits: list[int | None] = field(default_factory=lambda: [None, None, 3_000, 12_000])
    # (MIN/MAX candidates, top-k slack) the planner gives partial state, if not its own:
    # small ones make deletions exhaust groups often (then they are refilled by upquery).
    candidates: tuple[int, int] | None = None
    # (table, group column or None for all rows, column) whose extreme values the
    # delete_extreme rule deletes: the groups and values the views' MIN/MAX/top-k keep.
    extremes: list[tuple[str, int | None, int]] = field(default_factory=list)


def _hot(values: list[Any]) -> st.SearchStrategy:
    """Values of ``values``, the first of them about half the time."""
    return st.one_of(st.just(values[0]), st.sampled_from(values))


ROW_A = st.tuples(_hot(list(range(6))), st.integers(0, 9), st.sampled_from(["x", "y", "z", None]),
                  st.sampled_from([0.5, 1.25, 2.0, None, 3.75]))
ROW_B = st.tuples(_hot(list(range(7))), st.integers(0, 5), st.sampled_from(["p", "q"]))
TABLES_AB = {
    "a": [("k", "BIGINT"), ("v", "BIGINT"), ("s", "TEXT"), ("x", "DOUBLE")],
    "b": [("k", "BIGINT"), ("w", "BIGINT"), ("t", "TEXT")],
}
KEYS = {
    "k": [(k,) for k in range(7)] + [(None,)],
    "s": [("x",), ("y",), ("z",), ("w",), (None,)],
    None: [()],
}


def _shape(sqls: dict[str, tuple[str, str | None]]) -> Scenario:
    views = {name: sql.format(a="a", b="b") for name, (sql, _) in sqls.items()}
    keys = {name: KEYS[keycol] for name, (_, keycol) in sqls.items()}
    return Scenario(
        TABLES_AB, {"a": ROW_A, "b": ROW_B}, views, keys, extremes=[("a", 0, 1), ("b", 0, 1)]
    )


# Shapes whose answers follow Spark's semantics where SQLite's differ (CAST type names, a
# BOOLEAN type, `/` dividing as doubles), or that SQLite lacks (EXCEPT ALL, INTERSECT
# ALL): the SQLite oracle here can't check them, so they are left to
# test_random_shapes.py, which checks every shape against Spark SQL. The ordering rules
# these machines test do not depend on what the expressions compute.
SPARK_ONLY = {"expressions", "except_all", "intersect_all", "except_all_keyed"}

SCENARIOS: dict[str, Scenario] = {
    name: _shape({"v": SHAPES[name]}) for name in SHAPES if name not in SPARK_ONLY
}

# Several views on shared nodes: one table, one join, several aggregates over them.
SCENARIOS["shared"] = _shape(
    {
        name: SHAPES[name]
        for name in ("count", "min_max", "topk", "join_on_key", "join_other_key", "left_join")
    }
)

# Running example 1 (README, docs/concepts.md): the visits view (MAX per category over a
# join on another key).
SCENARIOS["visits"] = Scenario(
    tables={"info": [("product", "TEXT"), ("category", "TEXT")],
            "visit": [("product", "TEXT"), ("user", "TEXT"), ("length", "BIGINT")]},
    rows={"info": st.tuples(_hot(["Apple", "Banana", "Carrot", "Potato", "Cherry"]),
                            st.sampled_from(["Fruit", "Vegetable", "Meat"])),
          "visit": st.tuples(_hot(["Apple", "Banana", "Carrot", "Potato", "Cherry", "Durian"]),
                             st.sampled_from(["Alice", "Bob", "Eve"]), st.integers(0, 12))},
    views={"maxlen": "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
                     "ON info.product = visit.product WHERE category = ? GROUP BY category"},
    keys={"maxlen": [("Fruit",), ("Vegetable",), ("Meat",), ("Fish",)]},
    extremes=[("visit", None, 2), ("visit", 0, 2)],
)

# Running example 2: Nexmark Q4 — the average winning bid per category (a view over a
# view) and auctions with many bids (the threshold scaled down to these small tables).
SCENARIOS["nexmark"] = Scenario(
    tables={
        "auction": [
            ("id", "BIGINT"),
            ("category", "BIGINT"),
            ("seller", "BIGINT"),
            ("start_time", "BIGINT"),
            ("expires", "BIGINT"),
        ],
        "bid": [
            ("bidder", "BIGINT"),
            ("auction", "BIGINT"),
            ("bid_time", "BIGINT"),
            ("price", "DOUBLE"),
        ],
    },
    rows={
        "auction": st.tuples(
            st.integers(0, 5), st.integers(0, 2), st.just(7), st.just(1), st.just(9)
        ),
        "bid": st.tuples(
            st.integers(0, 3),
            _hot(list(range(7))),
            st.integers(0, 3),
            st.sampled_from([1.0, 2.5, 10.0, 99.5]),
        ),
    },
    views={
        "winning": (
            "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
            "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category"
        ),
        "avg_winning": (
            "SELECT category, AVG(price) AS avg_price FROM winning WHERE category = ? "
            "GROUP BY category"
        ),
        "hot": "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction HAVING COUNT(*) > 3",
    },
    keys={"winning": [()], "avg_winning": [(0,), (1,), (2,), (3,)], "hot": [()]},
    extremes=[("bid", 1, 3)],
)


# Nexmark Q4 with auction ids beyond the bids' range (new auctions, as ids grow, and a few
# below it): the key bound (server/dataflow/bounds.py) proves their bid-index holes empty,
# until a bid on such an id widens it.
SCENARIOS["nexmark_bounds"] = replace(
    SCENARIOS["nexmark"],
    rows={**SCENARIOS["nexmark"].rows,
          "auction": st.tuples(st.integers(-3, 12), st.integers(0, 2), st.just(7), st.just(1),
                               st.just(9)),
          "bid": st.tuples(st.integers(0, 3), st.one_of(_hot(list(range(7))), st.integers(-3, 14)),
                           st.integers(0, 3), st.sampled_from([1.0, 2.5, 10.0, 99.5]))},
)

# Bounded candidates that run out often: MIN/MAX keep 2 values, top-k k + 1 rows.
for _name in ("min_max", "topk", "global_count", "visits", "nexmark"):
    SCENARIOS[f"{_name}_small"] = replace(SCENARIOS[_name], candidates=(2, 1))
