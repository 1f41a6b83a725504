"""What a stress run creates and reads: tables, views, key domains and their oracles.

The views are the docs' running examples (the longest visit per category over a join;
Nexmark Q4's average winning bid per category, a view over a view, and auctions with more
than ten bids) plus one of each other shape: join, left join, top-k, distinct and union.
Every name carries the run's prefix, so a run can share a server with other data.

Each view has an *oracle*: the same query written over ``{table}_at`` relations that hold
every table as of many LSNs at once, tagged with a column ``_at``. Joins match on ``_at``
and groups include it, so one Spark job answers the view for every (LSN, key) read. The
oracle outputs ``_at``, then the key columns, then the view's columns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CATEGORIES = [f"c{i}" for i in range(8)]
PRODUCTS = [f"p{i}" for i in range(40)]
USERS = [f"u{i}" for i in range(30)]
GAMES = list(range(25))
AUCTIONS = list(range(60))
AUCTION_CATEGORIES = list(range(5))

# Logical table -> (server DDL columns, Spark schema of the same columns).
TABLES: dict[str, tuple[str, str]] = {
    "info": ("product TEXT PRIMARY KEY, category TEXT", "product string, category string"),
    "visit": (
        "product TEXT, user_name TEXT, length BIGINT",
        "product string, user_name string, length bigint",
    ),
    "auction": (
        "id BIGINT PRIMARY KEY, category BIGINT, seller BIGINT, start_time BIGINT, expires BIGINT",
        "id bigint, category bigint, seller bigint, start_time bigint, expires bigint",
    ),
    "bid": (
        "bidder BIGINT, auction BIGINT, bid_time BIGINT, price DOUBLE",
        "bidder bigint, auction bigint, bid_time bigint, price double",
    ),
    "score": (
        "game BIGINT, player BIGINT, points BIGINT",
        "game bigint, player bigint, points bigint",
    ),
}


@dataclass(frozen=True)
class ViewSpec:
    """One view of the workload. SQL uses ``{p}`` for the name prefix."""

    name: str
    shape: str  # what it exercises, for --views help and the report
    sql: str
    oracle: str | None  # None: created only as the base of another view, never read
    keys: tuple[tuple, ...] = ()
    tables: tuple[str, ...] = ()  # logical tables the view reads (its oracle's inputs)
    needs: tuple[str, ...] = ()  # views it is defined over (created first)

    @property
    def key_width(self) -> int:
        return len(self.keys[0]) if self.keys else 0


VIEWS: tuple[ViewSpec, ...] = (
    ViewSpec(
        "maxlen",
        "running example 1: MAX over a join, by category",
        "SELECT category, MAX(length) AS max_length FROM {p}info JOIN {p}visit ON {p}info.product "
        "= {p}visit.product "
        "WHERE category = ? GROUP BY category",
        "SELECT i._at, i.category, i.category, MAX(v.length) FROM info_at i JOIN visit_at v "
        "ON i.product = v.product AND i._at = v._at GROUP BY i._at, i.category",
        tuple((c,) for c in CATEGORIES),
        ("info", "visit"),
    ),
    ViewSpec(
        "product_visits",
        "inner join, keyed on the join column",
        "SELECT {p}visit.product, {p}visit.user_name, {p}visit.length, {p}info.category FROM "
        "{p}visit "
        "JOIN {p}info ON {p}visit.product = {p}info.product WHERE {p}visit.product = ?",
        "SELECT v._at, v.product, v.product, v.user_name, v.length, i.category FROM visit_at v "
        "JOIN info_at i "
        "ON v.product = i.product AND v._at = i._at",
        tuple((p,) for p in PRODUCTS),
        ("info", "visit"),
    ),
    ViewSpec(
        "category_visits",
        "left join, keyed on a column of the left side",
        "SELECT {p}info.product, {p}info.category, {p}visit.user_name, {p}visit.length FROM "
        "{p}info "
        "LEFT JOIN {p}visit ON {p}info.product = {p}visit.product WHERE {p}info.category = ?",
        "SELECT i._at, i.category, i.product, i.category, v.user_name, v.length FROM info_at i "
        "LEFT JOIN visit_at v "
        "ON i.product = v.product AND i._at = v._at",
        tuple((c,) for c in CATEGORIES),
        ("info", "visit"),
    ),
    ViewSpec(
        "top3",
        "top-k per key (ORDER BY ... LIMIT 3)",
        "SELECT game, player, points FROM {p}score WHERE game = ? ORDER BY points DESC, player "
        "LIMIT 3",
        "SELECT _at, game, game, player, points FROM (SELECT *, row_number() OVER "
        "(PARTITION BY _at, game ORDER BY points DESC, player) AS _rn FROM score_at) WHERE _rn <= "
        "3",
        tuple((g,) for g in GAMES),
        ("score",),
    ),
    ViewSpec(
        "user_products",
        "DISTINCT",
        "SELECT DISTINCT user_name, product FROM {p}visit WHERE user_name = ?",
        "SELECT DISTINCT _at, user_name, user_name, product FROM visit_at",
        tuple((u,) for u in USERS),
        ("visit",),
    ),
    ViewSpec(
        "tags",
        "UNION of two tables (the base of tagged)",
        "SELECT category AS tag, product FROM {p}info UNION SELECT user_name AS tag, product FROM "
        "{p}visit WHERE length > 70",
        None,
        (),
        ("info", "visit"),
    ),
    ViewSpec(
        "tagged",
        "a keyed view over a UNION view",
        "SELECT tag, product FROM {p}tags WHERE tag = ?",
        "SELECT DISTINCT _at, tag, tag, product FROM (SELECT _at, category AS tag, product FROM "
        "info_at "
        "UNION SELECT _at, user_name AS tag, product FROM visit_at WHERE length > 70)",
        tuple((t,) for t in CATEGORIES[:4] + USERS[:12]),
        ("info", "visit"),
        ("tags",),
    ),
    ViewSpec(
        "winning",
        "running example 2: the winning (highest) bid per auction (the base of avg_winning)",
        "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price FROM {p}auction a "
        "JOIN {p}bid b ON a.id = b.auction GROUP BY a.id, a.category",
        None,
        (),
        ("auction", "bid"),
    ),
    ViewSpec(
        "avg_winning",
        "running example 2: average winning bid per category (a view over a view)",
        "SELECT category, AVG(price) AS avg_price FROM {p}winning WHERE category = ? GROUP BY "
        "category",
        "SELECT _at, category, category, AVG(price) FROM (SELECT a._at, a.id, a.category, "
        "MAX(b.price) AS price "
        "FROM auction_at a JOIN bid_at b ON a.id = b.auction AND a._at = b._at GROUP BY a._at, "
        "a.id, a.category) "
        "GROUP BY _at, category",
        tuple((c,) for c in AUCTION_CATEGORIES),
        ("auction", "bid"),
        ("winning",),
    ),
    ViewSpec(
        "hot",
        "running example 2: auctions with more than 10 bids (HAVING, no parameters)",
        "SELECT auction, COUNT(*) AS bids FROM {p}bid GROUP BY auction HAVING COUNT(*) > 10",
        "SELECT _at, auction, COUNT(*) FROM bid_at GROUP BY _at, auction HAVING COUNT(*) > 10",
        ((),),
        ("bid",),
    ),
)
BY_NAME = {v.name: v for v in VIEWS}
READ_VIEWS = tuple(v.name for v in VIEWS if v.oracle is not None)


def select_views(names: list[str] | None) -> list[ViewSpec]:
    """The views to create for the given read-view names (all by default), dependencies
    first. Raises ValueError naming the known views."""
    wanted = names or list(READ_VIEWS)
    unknown = [n for n in wanted if n not in READ_VIEWS]
    if unknown:
        raise ValueError(f"unknown view {unknown[0]!r}; views are {', '.join(READ_VIEWS)}")
    out: list[ViewSpec] = []
    for name in wanted:
        for dep in BY_NAME[name].needs:
            if BY_NAME[dep] not in out:
                out.append(BY_NAME[dep])
        if BY_NAME[name] not in out:
            out.append(BY_NAME[name])
    return out


def columns(table: str) -> list[str]:
    """The column names of a logical table, in order."""
    return [c.split()[0] for c in TABLES[table][1].split(",")]


def seed_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """The rows every table starts with (written before the views are created)."""
    return {
        "info": [(p, rng.choice(CATEGORIES)) for p in PRODUCTS],
        "visit": [visit_row(rng) for _ in range(300)],
        "auction": [(a, a % len(AUCTION_CATEGORIES), 100 + a, a, a + 1000) for a in AUCTIONS],
        "bid": [bid_row(rng) for _ in range(400)],
        "score": [score_row(rng) for _ in range(300)],
    }


def visit_row(rng: random.Random) -> tuple:
    return (rng.choice(PRODUCTS), rng.choice(USERS), rng.randrange(100))


def bid_row(rng: random.Random) -> tuple:
    return (
        rng.randrange(40),
        rng.choice(AUCTIONS),
        rng.randrange(10**6),
        float(rng.randrange(1, 1000)) + rng.choice([0.0, 0.25, 0.5]),
    )


def score_row(rng: random.Random) -> tuple:
    return (rng.choice(GAMES), rng.randrange(50), rng.randrange(1000))
