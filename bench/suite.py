"""The benchmark's sections, in the order run.py calls them; each adds its figures to
``results["sections"]``. Data sets are built once, on first use, each in its own data
directory; every section starts its own server on them (views start with empty state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkpoints
import datasets as ds
import memory
import peers
import reads
import stream
import subscribe
import write_path
from common import InProcServer, LoadPool, build_data, log, ratio


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
        rows, loaded = build_data(d, self.spark, tables, views, load)
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

    def joins5(self) -> Path:
        v = self.cfg["visits"]
        n = self.cfg["joins5_visits"]
        return self._build("joins5", ds.JOINS5_TABLES, ds.JOINS5_VIEWS,
                           lambda st: ds.load_joins5(st, v["products"], v["categories"], n))

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
        self.save()
        with InProcServer(self.joins5(), self.spark) as srv:
            # A 5-table join keyed on one table's column.
            cats = [f"c{i}" for i in range(v["categories"])]
            sec["cold"].append(reads.miss_path(
                srv, view="region_visits", sql=ds.REGION_VISITS_SQL.replace("?", "{key}"),
                tables=["visit", "info", "users", "cats", "countries"],
                keys=cats[: cfg["miss_trials"] + 1], literal=lambda k: f"'{k}'",
                label="5-table join"))

    def hits(self) -> None:
        """Lookups of filled keys (single and batched) against a same-size no-op call."""
        cfg = self.cfg
        with InProcServer(self.events(), self.spark) as srv:
            self.sections["hit_path"] = reads.hit_path(
                srv, self.pool, view="user_totals", keys=list(range(cfg["hit_keys"])),
                seconds=cfg["hit_seconds"], batches=cfg["hit_batches"],
                concurrency=[tuple(c) for c in cfg["hit_concurrency"]])

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
        sec: dict[str, Any] = {"pre_restart_hit_rate": lim["hit_rate"]}
        self.sections["restart"] = sec
        # Warm first: the cold run starts without checkpoints, and storage then no longer
        # keeps the log a later warm start would need.
        for name, on in (("warm", True), ("cold", False)):
            sec[name] = memory.restart(
                self.events(), self.pool, view="user_totals", n=cfg["events_keys"],
                s=cfg["zipf_s"], memory_limit=lim["memory_limit"],
                target_hit_rate=round(0.9 * lim["hit_rate"], 4), batch=cfg["zipf_batch"],
                procs=cfg["zipf_procs"], threads=cfg["zipf_threads"],
                cap=min(30.0, cfg["restart_cap"]) if on else cfg["restart_cap"], checkpoints=on,
                prefill=int(lim["capacity_keys"] * 0.95))
            self.save()

    def checkpoints(self) -> None:
        cfg = self.cfg
        sec: dict[str, Any] = {}
        self.sections["checkpoints"] = sec
        sec["sizes"] = checkpoints.sizes(self.work / "checkpoints", self.spark, cfg["ckpt_sizes"])
        self.save()
        v = cfg["visits"]
        gen = {"gen": "visits", "products": v["products"], "categories": v["categories"]}
        sec["writes"] = checkpoints.write_cost(
            self.visits(), self.spark, self.pool, gen=gen,
            categories=[f"c{i}" for i in range(v["categories"])], batch=cfg["half_peak_batch"],
            procs=cfg["write_procs"], threads=cfg["write_threads"],
            seconds=cfg["ckpt_write_seconds"], rounds=cfg["ckpt_rounds"])

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
                # Warm includes the join index keys the fills prefetch (prefetch.py), one
                # background upquery: the write phases must not race it.
                while c.stats().get("fills_in_flight", 0):
                    time.sleep(0.1)
                sec["prefetch_s"] = round(time.perf_counter() - t0, 2)
                sec["memory_after_fill"] = c.stats()["memory_bytes"]
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
        if name == "visits":
            self._writes_prefetch_off(sec, data, gen, fill)

    def _writes_prefetch_off(self, sec: dict, data: Path, gen: dict,
                             fill: Callable[[Any], None]) -> None:
        """The peak again with ``--index-prefetch off``: what the read fills' prefetch of
        the visit index (prefetch.py) costs writes and memory when no product moves (this
        workload only inserts visits), against what it saves when products do (the stream
        section). The table has grown by the writes above; each run is against its own
        plain twin."""
        cfg = self.cfg
        with InProcServer(data, self.spark, index_prefetch=False) as srv:
            with srv.client() as c:
                fill(c)
                sec["memory_after_fill_prefetch_off"] = c.stats()["memory_bytes"]
            sec["peak_prefetch_off"] = write_path.write_peak(
                srv, self.pool, gen=gen, batches=[b for b in cfg["write_batches"] if b >= 100],
                procs=cfg["write_procs"], threads=cfg["write_threads"],
                seconds=cfg["write_seconds"])
        self.save()

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

    def _nexmark_peak(self, srv: InProcServer, gen: dict) -> tuple[float, str]:
        """Nexmark Q4's write peak (applied rows/s at half_peak_batch rows per write): the
        nexmark section's figure from this run, else a short measurement now."""
        hb = self.cfg["half_peak_batch"]
        prev = [r for r in self.sections.get("writes_nexmark", {}).get("peak", [])
                if r["batch"] == hb]
        if prev:
            best = max(r["view"]["applied_rows_per_s"] for r in prev)
            return best, f"nexmark section of this run ({hb} rows per write)"
        cfg = self.cfg
        log("stream: no nexmark peak in this run; measuring a short one")
        rows = write_path.write_peak(
            srv, self.pool, gen=gen, batches=[hb], procs=cfg["write_procs"],
            threads=cfg["write_threads"], seconds=cfg["stream_peak_seconds"])
        return (rows[0]["view"]["applied_rows_per_s"],
                f"measured here: {cfg['stream_peak_seconds']} s, {hb} rows per write, "
                f"{cfg['write_procs'] * cfg['write_threads']} writers")

    def stream(self) -> None:
        """Reads under a stream: each seed view read by key by ``stream_readers`` clients
        while an open-loop writer streams at each of ``stream_rates`` rows/s (Nexmark also
        at half of its write peak)."""
        cfg = self.cfg
        v, x = cfg["visits"], cfg["nexmark"]
        sec: dict[str, Any] = {
            "readers_per_view": cfg["stream_readers"], "read_deadline_s": cfg["stream_deadline"],
            "seconds_per_rate": cfg["stream_seconds"], "writes_per_s": cfg["stream_writes_per_s"],
            "move_fraction": cfg["stream_move_fraction"], "rates": cfg["stream_rates"],
            "phases": [], "checks": {},
        }
        self.sections["stream"] = sec
        phases: list[dict] = sec["phases"]
        cats = [f"c{i}" for i in range(v["categories"])]
        ncats = list(range(ds.CATEGORIES))
        sets = [
            ("visits", self.visits(),
             {"gen": "visits", "products": v["products"], "categories": v["categories"]},
             [("max_visit", cats)]),
            ("nexmark", self.nexmark_data(),
             {"gen": "nexmark", "people": x["people"], "auctions": x["auctions"],
              "categories": ds.CATEGORIES},
             [("avg_winning", ncats), ("hot", [()])]),
        ]
        seed = 7000
        visits_state: dict[str, Any] = {"moved": {}, "unknown": []}
        for name, data, gen, views in sets:
            answers: list[dict] = []
            with InProcServer(data, self.spark) as srv:
                with srv.client() as c:  # every key filled: the stream starts from warm views
                    t0 = time.perf_counter()
                    for view, keys in views:
                        c.lookup_many(view, keys)
                    sec.setdefault("fill_s", {})[name] = round(time.perf_counter() - t0, 2)
                    # Warm includes the join indexes the reads' fills prefetch (one
                    # background index fill, prefetch.py): wait for it to land.
                    while c.stats().get("fills_in_flight", 0):
                        time.sleep(0.1)
                    sec.setdefault("prefetch_s", {})[name] = round(time.perf_counter() - t0, 2)
                rates: list[tuple[float, str | None]] = [(r, None) for r in cfg["stream_rates"]]
                if name == "nexmark":
                    peak, source = self._nexmark_peak(srv, gen)
                    sec["nexmark_peak"] = {"applied_rows_per_s": peak, "source": source}
                    rates.append((round(peak / 2), "half of peak"))
                    rates.sort(key=lambda r: r[0])
                for rate, label in rates:
                    seed += 10
                    extra: dict[str, Any] = {"move_fraction": cfg["stream_move_fraction"]}
                    if name == "visits":
                        extra.update(visits_state)
                    else:  # new people and auctions of each phase get ids of their own
                        extra["id_base"] = 7 * 10**17 + seed * 10**12
                    ph, got, w = stream.run_phase(
                        srv, self.pool, gen=gen, rate=rate, seconds=cfg["stream_seconds"],
                        views=views, readers=cfg["stream_readers"],
                        deadline=cfg["stream_deadline"], writes_per_s=cfg["stream_writes_per_s"],
                        seed=seed, writer_extra=extra, drain_cap=cfg["stream_drain_cap"],
                        label=label)
                    if name == "visits":
                        visits_state = {"moved": w["moved"], "unknown": w["unknown"]}
                    phases.append(ph)
                    answers.extend({**a, "rate": rate} for a in got)
                    self.save()
                # Answers read during the stream, and a few read now, against Spark SQL at
                # their LSN.
                picked = stream.pick_answers(answers, cfg["stream_checks_per_view"])
                sec["checks"][f"{name}_during_stream"] = stream.check_answers(srv, picked)
                after = [(view, k, stream.view_sql(view, k)) for view, keys in views
                         for k in keys[:3]]
                sec["checks"][f"{name}_after"] = write_path.check_views(srv, after)
                self.save()
        sec["goals"] = stream.goals(phases, sec.get("nexmark_peak", {}).get("applied_rows_per_s",
                                                                           0) / 2)

    def subscribe(self) -> None:
        """Write-to-subscriber latency with the server's whole allowance of Subscribe
        streams held, at each of ``sub_rates`` rows/s (subscribe.py)."""
        cfg = self.cfg
        self.sections["subscribe"] = subscribe.latency(
            self._dir("subscribe"), self.spark, self.pool, rates=cfg["sub_rates"],
            seconds=cfg["sub_seconds"], subscriptions=cfg["sub_streams"],
            keys=cfg["sub_keys"])

    def peers(self) -> None:
        """The seed views on Pathway and PostgreSQL beside partialflow (peers.py)."""
        sec = peers.section(self.cfg["peers"], self.work / "peers", self.spark, self.pool)
        self.sections["peers"] = sec
        print(peers.report(sec), flush=True)
