"""The benchmark's sections, in the order run.py calls them; each adds its figures to
``results["sections"]``. Data sets are built once, on first use, each in its own data
directory; every section starts its own server on them (views start with empty state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets as ds
import memory
import reads
import write_path
from common import InProcServer, LoadPool, log, ratio


class Suite:
    def __init__(self, cfg: dict, work: Path, spark: Any, pool: LoadPool, results: dict,
                 save: Callable[[], None]) -> None:
        self.cfg = cfg
        self.work = work
        self.spark = spark
        self.pool = pool
        self.results = results
        self.sections = results["sections"]
        self.save = save
        self._built: set[str] = set()

    # -- data sets ---------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return self.work / name / "data"

    def _build(self, name: str, tables: list[str], views: list[str],
               load: Callable[[Any], int]) -> Path:
        d = self._dir(name)
        if name in self._built:
            return d
        t0 = time.perf_counter()
        with InProcServer(d, self.spark) as srv:
            for sql in tables:
                srv.engine.execute(sql)
            rows = load(srv.engine.storage)
            loaded = time.perf_counter() - t0
            srv.engine.flush()
            srv.engine.compact()  # one segment per table: no background compaction later
            for sql in views:
                srv.engine.execute(sql)
        self.results.setdefault("datasets", {})[name] = {
            "rows": rows, "load_s": round(loaded, 1), "rows_per_s": round(rows / loaded),
            "ready_s": round(time.perf_counter() - t0, 1),
        }
        log(f"data set {name}: {rows} rows loaded in {loaded:.1f} s (in-process storage.write)")
        self._built.add(name)
        return d

    def events(self) -> Path:
        n = self.cfg["events_keys"]
        return self._build("events", ds.EVENTS_TABLES, ds.EVENTS_VIEWS,
                           lambda st: ds.load_events(st, n))

    def visits(self) -> Path:
        v = self.cfg["visits"]
        return self._build("visits", ds.VISITS_TABLES, ds.VISITS_VIEWS,
                           lambda st: ds.load_visits(st, v["products"], v["categories"],
                                                     v["visits"]))

    def nexmark_data(self) -> Path:
        x = self.cfg["nexmark"]
        return self._build("nexmark", ds.NEXMARK_TABLES, ds.NEXMARK_VIEWS,
                           lambda st: ds.load_nexmark(st, x["people"], x["auctions"], x["bids"]))

    # -- sections ----------------------------------------------------------------------
    def reads(self) -> None:
        cfg = self.cfg
        n = cfg["events_keys"]
        sec: dict[str, Any] = {"cold": [], "coalescing": []}
        self.sections["miss_path"] = sec
        with InProcServer(self.events(), self.spark) as srv:
            # Cold keys from the top of the key space; hit-path keys from the bottom.
            cold = list(range(n - 1, n - 1 - (cfg["miss_trials"] + 1), -1))
            sec["cold"].append(reads.miss_path(
                srv, view="user_totals", sql=ds.USER_TOTALS_SQL.replace("?", "{key}"),
                tables=["events"], keys=cold, literal=repr))
            fan_keys = list(range(n // 2, n // 2 + 65 * cfg["coalesce_trials"]))
            sec["coalescing"].append(reads.coalescing(
                srv, self.pool, view="user_totals", keys=fan_keys,
                trials=cfg["coalesce_trials"]))
            self.save()
            self.sections["hit_path"] = reads.hit_path(
                srv, self.pool, view="user_totals", keys=list(range(cfg["hit_keys"])),
                seconds=cfg["hit_seconds"], batches=cfg["hit_batches"],
                concurrency=[tuple(c) for c in cfg["hit_concurrency"]])
        self.save()
        v = cfg["visits"]
        with InProcServer(self.visits(), self.spark) as srv:
            cats = [f"c{i}" for i in range(v["categories"])]
            sec["cold"].append(reads.miss_path(
                srv, view="max_visit", sql=ds.MAX_VISIT_SQL.replace("?", "{key}"),
                tables=["info", "visit"], keys=cats[: cfg["miss_trials"] + 1],
                literal=lambda k: f"'{k}'"))
            rest = cats[cfg["miss_trials"] + 1 :]
            trials = min(cfg["coalesce_trials"], len(rest) // 65)
            sec["coalescing"].append(reads.coalescing(
                srv, self.pool, view="max_visit", keys=rest, trials=trials))

    def memory(self) -> None:
        cfg = self.cfg
        n, s = cfg["events_keys"], cfg["zipf_s"]
        sec: dict[str, Any] = {"keys": n, "zipf_s": s, "zipf_batch": cfg["zipf_batch"],
                               "readers": cfg["zipf_procs"] * cfg["zipf_threads"]}
        self.sections["memory"] = sec
        zipf = {"view": "user_totals", "n": n, "s": s, "batch": cfg["zipf_batch"],
                "procs": cfg["zipf_procs"], "threads": cfg["zipf_threads"]}
        with InProcServer(self.events(), self.spark) as srv:
            full = memory.materialize_all(srv, "user_totals", n, cfg["fill_batch"])
            sec["full"] = full
            self.save()
            full["zipf"] = memory.zipf_reads(srv, self.pool, warm=0, seconds=cfg["zipf_seconds"],
                                             seed=1, **zipf)
            log(f"zipf full: hit rate {full['zipf']['hit_rate']}, "
                f"{full['zipf']['reads']['items_per_s']:.0f} keys/s, p50 "
                f"{full['zipf']['reads']['latency_ms']['p50']} ms")
            self.save()
            sec["recompute"] = memory.recompute(
                srv, self.pool, sql=ds.USER_TOTALS_SQL.replace("?", "{key}"), n=n, s=s,
                procs=cfg["zipf_procs"], threads=cfg["zipf_threads"],
                seconds=cfg["recompute_seconds"])
        self.save()
        sec["limits"] = memory.memory_limits(
            self.events(), self.spark, self.pool, full_bytes=full["memory_bytes"],
            bytes_per_key=full["bytes_per_key"], fractions=cfg["memory_fractions"],
            warm=cfg["zipf_warm"], seconds=cfg["zipf_seconds"], **zipf)
        rec = sec["recompute"]
        # Recomputation answers one key per request; partialflow's Zipf readers ask for
        # zipf_batch keys per request, so compare keys answered per second and latency.
        sec["vs_recompute"] = [
            {"config": f"limit {r['fraction']:.0%}" if "fraction" in r else "full",
             "keys_per_s": r["reads"]["items_per_s"],
             "speedup_keys_per_s": ratio(r["reads"]["items_per_s"], rec["items_per_s"]),
             "p50_ms": r["reads"]["latency_ms"]["p50"], "p99_ms": r["reads"]["latency_ms"]["p99"]}
            for r in [*sec["limits"], full["zipf"]]
        ]

    def restart(self) -> None:
        mem = self.sections.get("memory")
        if not mem or not mem.get("limits"):
            log("restart: needs the memory section's figures (run it too); skipped")
            return
        cfg = self.cfg
        lim = max(mem["limits"], key=lambda r: r["fraction"])
        self.sections["restart"] = memory.restart(
            self.events(), self.pool, view="user_totals", n=cfg["events_keys"], s=cfg["zipf_s"],
            memory_limit=lim["memory_limit"], target_hit_rate=round(0.9 * lim["hit_rate"], 4),
            batch=cfg["zipf_batch"], procs=cfg["zipf_procs"], threads=cfg["zipf_threads"],
            cap=cfg["restart_cap"])
        self.sections["restart"]["pre_restart_hit_rate"] = lim["hit_rate"]

    def _writes(self, name: str, data: Path, gen: dict, fill: Callable[[Any], None],
                readers: list[dict], checks: list[tuple]) -> None:
        cfg = self.cfg
        sec: dict[str, Any] = {}
        self.sections[f"writes_{name}"] = sec
        with InProcServer(data, self.spark) as srv:
            with srv.client() as c:
                t0 = time.perf_counter()
                fill(c)
                sec["fill_s"] = round(time.perf_counter() - t0, 2)
            sec["peak"] = write_path.write_peak(
                srv, self.pool, gen=gen, batches=cfg["write_batches"], procs=cfg["write_procs"],
                threads=cfg["write_threads"], seconds=cfg["write_seconds"])
            self.save()
            hb = cfg["half_peak_batch"]
            peak = max((r for r in sec["peak"] if r["batch"] == hb),
                       key=lambda r: r["view"]["applied_rows_per_s"])
            sec["half_peak"] = write_path.half_peak(
                srv, self.pool, gen=gen, batch=hb, peak=peak["view"]["applied_rows_per_s"],
                procs=cfg["write_procs"], threads=cfg["write_threads"],
                seconds=cfg["half_peak_seconds"], readers=readers)
            sec["check"] = write_path.check_views(srv, checks)
            with srv.client() as c:
                st = c.stats()
            sec["stats"] = {k: v for k, v in st.items() if k not in ("storage", "views")}
            sec["stats"]["views"] = st.get("views")

    def writes(self) -> None:
        v = self.cfg["visits"]
        gen = {"gen": "visits", "products": v["products"], "categories": v["categories"]}
        cats = [f"c{i}" for i in range(v["categories"])]

        def fill(c: Any) -> None:
            c.lookup_many("max_visit", cats)

        checks = [("max_visit", k, ds.MAX_VISIT_SQL.replace("?", f"'{k}'")) for k in cats[:5]]
        self._writes("visits", self.visits(), gen, fill, [], checks)

    def nexmark(self) -> None:
        x = self.cfg["nexmark"]
        gen = {"gen": "nexmark", "people": x["people"], "auctions": x["auctions"],
               "categories": ds.CATEGORIES}
        cats = list(range(ds.CATEGORIES))

        def fill(c: Any) -> None:
            c.lookup_many("avg_winning", cats)
            c.lookup("hot", ())

        readers = [
            {
                "name": "avg_winning (per category)",
                "threads": 4,
                "op": {
                    "kind": "lookup",
                    "view": "avg_winning",
                    "keys": {"type": "list", "values": cats},
                },
            },
            {
                "name": "hot (auctions with > 10 bids)",
                "threads": 1,
                "op": {"kind": "lookup", "view": "hot", "keys": {"type": "list", "values": [()]}},
            },
        ]
        checks = [
            (
                "avg_winning",
                k,
                ds.AVG_WINNING_SQL.replace("FROM winning", f"FROM ({ds.WINNING_SQL}) w").replace(
                    "?", str(k)
                ),
            )
            for k in cats[:3]
        ]
        checks.append(("hot", (), ds.HOT_SQL))
        self._writes("nexmark", self.nexmark_data(), gen, fill, readers, checks)
