"""The benchmark's data: schemas, views, loaders and row generators.

Four data sets, each in its own data directory so one's state never counts against
another's memory limit:

- ``events``: ``events(user_id, amount)`` with two rows per key and the one-parameter view
  ``user_totals`` (COUNT, SUM per user): the key-value shaped workload for the hit and
  miss paths, Zipf reads under memory limits, recomputation and restart.
- ``visits``: the docs' running example 1 (``info``, ``visit``, ``max_visit``: a join
  then MAX per category).
- ``joins5``: the visits tables with three more dimensions (``users``: a visitor's country,
  ``cats``: a category's department, ``countries``: a country's region) and the view
  ``region_visits``, a 5-table join keyed on ``cats.category``: the multi-way join miss
  of the miss path section. Its own data set, so the visits sections keep their one view.
- ``nexmark``: running example 2, Nexmark Q4 over ``person``, ``auction`` and ``bid``
  from a Nexmark-style generator (person:auction:bid = 1:3:46; half of the bids go to a
  few hot auctions, three quarters come from a few hot bidders).

Every table that a view reads has a twin ``<name>_plain`` that no view reads: writing
the same rows there is the storage-only baseline of the write benchmarks.

Generators are plain Python (no numpy) so load processes import this cheaply.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

# -- events ------------------------------------------------------------------------------

EVENTS_TABLES = ["CREATE TABLE events (user_id BIGINT, amount BIGINT)"]
USER_TOTALS_SQL = (
    "SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM events "
    "WHERE user_id = ? GROUP BY user_id"
)
EVENTS_VIEWS = [f"CREATE VIEW user_totals AS {USER_TOTALS_SQL}"]


def load_events(storage: Any, keys: int, rows_per_key: int = 2, batch: int = 50_000) -> int:
    """``rows_per_key`` rows for each user 0..keys-1, written straight to storage."""
    total = keys * rows_per_key
    for start in range(0, total, batch):
        stop = min(start + batch, total)
        storage.write("events", inserts=[(i % keys, i) for i in range(start, stop)])
    return total


# -- visits ------------------------------------------------------------------------------

VISITS_TABLES = [
    "CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)",
    "CREATE TABLE visit (product TEXT, user_name TEXT, length BIGINT)",
    "CREATE TABLE visit_plain (product TEXT, user_name TEXT, length BIGINT)",
]
MAX_VISIT_SQL = (
    "SELECT category, MAX(length) AS max_length FROM info JOIN visit "
    "ON info.product = visit.product WHERE category = ? GROUP BY category"
)
VISITS_VIEWS = [f"CREATE VIEW max_visit AS {MAX_VISIT_SQL}"]


def category_of(product: int, categories: int) -> str:
    return f"c{product % categories}"


def visit_rows(rng: random.Random, n: int, products: int) -> list[tuple]:
    return [
        (f"p{rng.randrange(products)}", f"u{rng.randrange(100_000)}", rng.randrange(1_000_000))
        for _ in range(n)
    ]


def load_visits(storage: Any, products: int, categories: int, visits: int, seed: int = 1) -> int:
    storage.write("info", inserts=[(f"p{i}", category_of(i, categories)) for i in range(products)])
    rng = random.Random(seed)
    for start in range(0, visits, 50_000):
        storage.write("visit", inserts=visit_rows(rng, min(50_000, visits - start), products))
    return visits


# -- joins5 -----------------------------------------------------------------------------

JOINS5_TABLES = [
    "CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT)",
    "CREATE TABLE visit (product TEXT, user_name TEXT, length BIGINT)",
    "CREATE TABLE users (user_name TEXT PRIMARY KEY, country TEXT)",
    "CREATE TABLE cats (category TEXT PRIMARY KEY, dept TEXT)",
    "CREATE TABLE countries (country TEXT PRIMARY KEY, region TEXT)",
]
REGION_VISITS_SQL = (
    "SELECT c.category, n.region, COUNT(*) AS visits, MAX(v.length) AS longest "
    "FROM cats c JOIN info i ON c.category = i.category "
    "JOIN visit v ON i.product = v.product "
    "JOIN users u ON v.user_name = u.user_name "
    "JOIN countries n ON u.country = n.country "
    "WHERE c.category = ? GROUP BY c.category, n.region"
)
JOINS5_VIEWS = [f"CREATE VIEW region_visits AS {REGION_VISITS_SQL}"]
JOINS5_USERS = 100_000  # visit_rows' user names: u0 .. u99999
JOINS5_COUNTRIES = 50
JOINS5_REGIONS = 5
JOINS5_DEPTS = 20


def load_joins5(storage: Any, products: int, categories: int, visits: int, seed: int = 1) -> int:
    """The visits data set's rows, plus every user's country, every category's department
    and every country's region."""
    load_visits(storage, products, categories, visits, seed)
    for start in range(0, JOINS5_USERS, 50_000):
        storage.write("users", inserts=[(f"u{i}", f"k{i % JOINS5_COUNTRIES}")
                                        for i in range(start, min(start + 50_000, JOINS5_USERS))])
    storage.write("cats", inserts=[(f"c{i}", f"d{i % JOINS5_DEPTS}") for i in range(categories)])
    storage.write("countries", inserts=[(f"k{i}", f"r{i % JOINS5_REGIONS}")
                                        for i in range(JOINS5_COUNTRIES)])
    return visits + products + JOINS5_USERS + categories + JOINS5_COUNTRIES


# -- nexmark -----------------------------------------------------------------------------

NEXMARK_TABLES = [
    f"CREATE TABLE person{s} (id BIGINT PRIMARY KEY, name TEXT, city TEXT, state TEXT)"
    for s in ("", "_plain")
] + [
    f"CREATE TABLE auction{s} (id BIGINT PRIMARY KEY, category BIGINT, seller BIGINT, "
    "start_time BIGINT, expires BIGINT)"
    for s in ("", "_plain")
] + [
    f"CREATE TABLE bid{s} (bidder BIGINT, auction BIGINT, bid_time BIGINT, price DOUBLE)"
    for s in ("", "_plain")
]
WINNING_SQL = (
    "SELECT a.id AS auction, a.category AS category, MAX(b.price) AS price "
    "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.category"
)
AVG_WINNING_SQL = (
    "SELECT category, AVG(price) AS avg_price FROM winning WHERE category = ? GROUP BY category"
)
HOT_SQL = "SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction HAVING COUNT(*) > 10"
NEXMARK_VIEWS = [
    f"CREATE VIEW winning AS {WINNING_SQL}",
    f"CREATE VIEW avg_winning AS {AVG_WINNING_SQL}",
    f"CREATE VIEW hot AS {HOT_SQL}",
]
CATEGORIES = 10
HOT_AUCTIONS = 20
HOT_BIDDERS = 100
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne"]
STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]


@dataclass
class Nexmark:
    """A Nexmark-style event stream. Ids of new people and auctions start at ``id_base``
    so several generators (one per load thread) never collide; bids go to the preloaded
    population and to the generator's own new auctions."""

    seed: int
    people: int  # preloaded people 0..people-1
    auctions: int  # preloaded auctions 0..auctions-1
    id_base: int = 0
    clock: int = 0
    rng: random.Random = field(init=False)
    own_people: int = 0
    own_auctions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _person_id(self) -> int:
        r = self.rng
        if r.random() < 0.75:  # hot bidders
            return r.randrange(min(HOT_BIDDERS, self.people))
        if self.own_people and r.random() < 0.1:
            return self.id_base + r.randrange(self.own_people)
        return r.randrange(self.people)

    def _auction_id(self) -> int:
        r = self.rng
        if r.random() < 0.5:  # hot auctions: the first HOT_AUCTIONS ids, skewed
            return min(int(r.paretovariate(1.5)) - 1, HOT_AUCTIONS - 1)
        if self.own_auctions and r.random() < 0.2:
            return r.choice(self.own_auctions[-1000:])
        return r.randrange(self.auctions)

    def batch(self, n: int) -> dict[str, list[tuple]]:
        """``n`` events as rows per table (person, auction, bid)."""
        out: dict[str, list[tuple]] = {"person": [], "auction": [], "bid": []}
        r = self.rng
        for _ in range(n):
            self.clock += 1
            x = r.randrange(50)
            if x == 0:
                pid = self.id_base + self.own_people
                self.own_people += 1
                out["person"].append(person_row(pid, r))
            elif x < 4:
                aid = self.id_base + len(self.own_auctions)
                self.own_auctions.append(aid)
                out["auction"].append(auction_row(aid, self._person_id(), self.clock))
            else:
                aid = self._auction_id()
                out["bid"].append(bid_row(self._person_id(), aid, self.clock, r))
        return out


def person_row(pid: int, r: random.Random) -> tuple:
    return (pid, f"person{pid}", r.choice(CITIES), r.choice(STATES))


def auction_row(aid: int, seller: int, clock: int) -> tuple:
    return (aid, aid % CATEGORIES, seller, clock, clock + 10_000)


def bid_row(bidder: int, auction: int, clock: int, r: random.Random) -> tuple:
    # Prices drift upwards with time, as bids on a live auction do.
    return (bidder, auction, clock, round(100.0 + clock / 100.0 + r.random() * 1000.0, 2))


def load_nexmark(storage: Any, people: int, auctions: int, bids: int, seed: int = 2) -> int:
    r = random.Random(seed)
    storage.write("person", inserts=[person_row(i, r) for i in range(people)])
    storage.write("auction", inserts=[auction_row(i, i % people, 0) for i in range(auctions)])
    gen = Nexmark(seed=seed, people=people, auctions=auctions, id_base=10**12)
    done = 0
    while done < bids:
        n = min(50_000, bids - done)
        rows = [bid_row(gen._person_id(), gen._auction_id(), done + i, r) for i in range(n)]
        storage.write("bid", inserts=rows)
        done += n
    return people + auctions + bids
