"""One stress run, start to end: set up, load (with faults), recover, verify, report."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from partialflow.client import (
    AlreadyExists,
    Client,
    DeadlineExceeded,
    FailedPrecondition,
    PartialflowError,
    Unavailable,
)
from partialflow.client.stress import workload as wl
from partialflow.client.stress.hooks import TestHooks
from partialflow.client.stress.load import (
    LoadConfig,
    Writer,
    fault_schedule,
    run_faults,
    run_progress,
    run_reader,
    run_writer,
)
from partialflow.client.stress.record import Failure, Journal, Read, Write
from partialflow.client.stress.report import RunInfo, render, summarize
from partialflow.client.stress.subscribers import run_subscriber
from partialflow.client.stress.verify import check_tables, table_check_lsns, verify_reads

_FAULT = re.compile(r"^(fail|hang|slow:\d+(\.\d+)?)$")
_CONNECTION = ("token", "tls_ca", "tls", "tls_server_name")  # Client options the CLI may carry


def _connect(args: argparse.Namespace, timeout: float | None = None) -> Client:
    """Another client like the CLI's (one per thread: separate channels, separate LSN floors)."""
    extra = {k: getattr(args, k) for k in _CONNECTION if getattr(args, k, None) is not None}
    return Client(args.server, timeout=timeout or args.timeout, **extra)


def _check_args(args: argparse.Namespace) -> str | None:
    if args.writers < 1 or args.readers < 1:
        return "--writers and --readers must be at least 1"
    if getattr(args, "subscribers", 0) < 0:
        return "--subscribers must not be negative"
    if getattr(args, "subscription_gap", 10.0) <= 0:
        return "--subscription-gap must be positive"
    if args.duration <= 0 or args.fault_window <= 0:
        return "--duration and --fault-window must be positive"
    if not 0 <= args.evict_rate <= 1:
        return "--evict-rate is a probability, 0..1"
    if args.plant_wrong_answer is not None and args.plant_wrong_answer not in (
        args.views or wl.READ_VIEWS
    ):
        return f"--plant-wrong-answer {args.plant_wrong_answer!r} is not one of the views read"
    bad = [m for m in args.faults if not _FAULT.match(m)]
    if bad:
        return f"unknown fault mode {bad[0]!r}; modes are fail, hang, slow:SECONDS"
    if args.prefix is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,30}$", args.prefix):
        return "--prefix must be a plain identifier (letters, digits, _)"
    return None


def _setup(
    client: Client,
    prefix: str,
    views: list[wl.ViewSpec],
    rng: random.Random,
    journal: Journal,
    created: list[str],
) -> dict[str, list[tuple]]:
    """Create the tables (with their seed rows, recorded as writes) and the views; each
    name goes into ``created`` as soon as it exists, so clean-up drops exactly those."""
    seed = wl.seed_rows(rng)
    for table, (ddl, _) in wl.TABLES.items():
        client.execute(f"CREATE TABLE {prefix}{table} ({ddl})")
        created.append(f"TABLE {prefix}{table}")
        journal.writes.append(
            Write(client.insert(prefix + table, seed[table]), table, "seed", [], seed[table])
        )
    for spec in views:
        sql = f"CREATE VIEW {prefix}{spec.name} AS " + spec.sql.format(p=prefix)
        for attempt in range(3):
            try:
                client.execute(sql)
                break
            except AlreadyExists:
                if attempt == 0:
                    raise
                break  # the try the client gave up on (its --timeout) went through after all
            except (Unavailable, DeadlineExceeded):
                # Loading a view's full state is a Spark job under the server's upquery
                # deadline, which a short --upquery-timeout on a busy machine can miss;
                # the failed view is removed, so trying again is safe.
                if attempt == 2:
                    raise
        created.append(f"VIEW {prefix}{spec.name}")
    return seed


def _cleanup(client: Client, created: list[str]) -> None:
    """Drop what this run created (views before the tables under them), and nothing else:
    with --prefix naming tables that already existed, CREATE fails and they are kept."""
    for what in reversed(created):
        try:
            client.execute(f"DROP {what}")
        except PartialflowError as err:
            print(f"stress: could not drop {what.lower()}: {err}", file=sys.stderr)


def _recover(client: Client, prefix: str, views: list[wl.ViewSpec], journal: Journal) -> list[str]:
    """Evict every key of every view and read them all again, cold, through Spark (two
    views at a time, so fills overlap without all competing at once). After faults this
    shows the server recovered; the reads are verified like the others. Returns the views
    that never answered."""
    readable = [v for v in views if v.oracle is not None]
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="recover") as pool:
        problems = pool.map(
            lambda spec: _recover_view(client, prefix + spec.name, spec, journal), readable
        )
        return [p for p in problems if p]


def _recover_view(
    client: Client, name: str, spec: wl.ViewSpec, journal: Journal, attempts: int = 3
) -> str | None:
    evicted = False
    for attempt in range(1, attempts + 1):
        start = journal.now()
        try:
            if not evicted:  # once: a retry finds the keys the failed try's fills completed
                client.evict(name)
                evicted = True
            t0 = time.perf_counter()
            got = client.lookup_many(name, list(spec.keys))
        except PartialflowError as err:
            journal.add(
                failure=Failure(
                    "recovery", type(err).__name__, str(err), start, journal.now(), spec.name
                )
            )
            if attempt == attempts:
                return f"{spec.name}: {type(err).__name__}: {err} (after {attempts} tries)"
            time.sleep(attempt)
            continue
        ms = (time.perf_counter() - t0) * 1000
        journal.add(
            reads=[
                Read(spec.name, tuple(k), r.lsn, list(r.rows), start, ms, "recovery", -1)
                for k, r in got.items()
            ]
        )
        break
    return None


def _server_figures(stats: dict, prefix: str, views: list[wl.ViewSpec]) -> dict[str, Any]:
    mine = [stats.get("views", {}).get((prefix + v.name).lower(), {}) for v in views]
    return {
        k: sum(int(v.get(k, 0)) for v in mine) for k in ("hits", "misses", "upqueries", "evictions")
    }


def _spark(master: str) -> Any:
    """The verification Spark session (local by default, in this process)."""
    from partialflow.server.spark import spark_session

    return spark_session(master, app_name="partialflow-stress")


def _load(
    client: Client,
    args: argparse.Namespace,
    cfg: LoadConfig,
    prefix: str,
    views: list[wl.ViewSpec],
    seed: dict[str, list[tuple]],
    journal: Journal,
    hooks: TestHooks | None,
) -> float:
    """Run the threads for ``cfg.duration`` seconds (Ctrl-C ends early); returns the time taken."""
    stop = threading.Event()
    rng = random.Random(cfg.seed)
    clients = [_connect(args) for _ in range(cfg.writers + cfg.readers)]
    readable = [v for v in views if v.oracle is not None]
    threads = [
        threading.Thread(
            target=run_writer,
            name=f"writer-{i}",
            daemon=True,
            args=(
                clients[i],
                prefix,
                Writer(i, cfg.writers, seed, random.Random(rng.random())),
                journal,
                stop,
                cfg.write_rate,
            ),
        )
        for i in range(cfg.writers)
    ]
    plant = (
        (args.plant_wrong_answer, hooks.corrupt)
        if hooks is not None and args.plant_wrong_answer
        else None
    )
    threads += [
        threading.Thread(
            target=run_reader,
            name=f"reader-{i}",
            daemon=True,
            args=(
                clients[cfg.writers + i],
                prefix,
                i,
                readable,
                journal,
                stop,
                random.Random(rng.random()),
                cfg.evict_rate,
                plant if i == 0 else None,
            ),
        )
        for i in range(cfg.readers)
    ]
    subscribers = getattr(args, "subscribers", 0) if readable else 0
    subscribe_clients = [_connect(args) for _ in range(subscribers)]
    subscriber_threads = [
        threading.Thread(
            target=run_subscriber,
            name=f"subscriber-{i}",
            daemon=True,
            args=(subscribe_clients[i], prefix, i, readable[i % len(readable)], journal, stop,
                  random.Random(rng.random())),
        )
        for i in range(subscribers)
    ]
    journal.started = time.monotonic()  # report times count from the start of the load
    side = [threading.Thread(target=run_progress, args=(journal, stop), daemon=True)]
    if hooks is not None:
        schedule = fault_schedule(cfg.faults, cfg.duration, cfg.fault_window)
        side.append(
            threading.Thread(
                target=run_faults, args=(hooks.set_faults, schedule, journal, stop), daemon=True
            )
        )
    for t in threads + side + subscriber_threads:
        t.start()
    try:
        stop.wait(cfg.duration)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the load and checking what was recorded", file=sys.stderr)
    stop.set()
    # Writers finish their write (the history must be complete); readers get a moment,
    # and one still blocked in a slow miss is left to finish on its own (see Journal.add).
    grace = time.monotonic() + 5.0
    for t in threads + side:
        t.join(
            timeout=args.timeout + 30
            if t.name.startswith("writer")
            else max(0.0, grace - time.monotonic())
        )
    for c, t in zip(clients, threads, strict=True):
        if not t.is_alive():
            c.close()
    # Subscribers share the readers' grace: a heartbeat comes every second, and then one
    # records its last rows. One still waiting for its snapshot (a fill behind a busy
    # Spark) could keep the run going past "--duration plus up to 5 s" (it was given 10 s
    # more per subscriber, one after the other): closing its channel cancels the stream,
    # and it ends with what it had recorded.
    for t in subscriber_threads:
        t.join(timeout=max(0.0, grace - time.monotonic()))
    for c in subscribe_clients:
        c.close()
    for t in subscriber_threads:
        t.join(timeout=1.0)
    return journal.now()


def run_stress(client: Client, args: argparse.Namespace) -> int:
    """The ``partialflow stress`` command; 0 if everything checked out, 1 otherwise."""
    problem = _check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    try:
        views = wl.select_views(args.views)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    hooks = (
        TestHooks(client, timeout=args.timeout) if args.faults or args.plant_wrong_answer else None
    )
    if hooks is not None:
        hooks.set_faults("")  # refused early (FailedPrecondition) unless the server has hooks on
    tier_hooks, own_limit = None, None
    if getattr(args, "disk_limit", None) is not None:
        tier_hooks = TestHooks(client, timeout=args.timeout)
        try:
            own_limit = tier_hooks.set_disk_limit(args.disk_limit)
        except FailedPrecondition as err:
            print(f"error: --disk-limit: {err}", file=sys.stderr)
            return 1
    tier_before = _tier_figures(client.stats())
    try:
        return _run(client, args, views, hooks, tier_before)
    finally:
        if tier_hooks is not None and own_limit is not None:
            with contextlib.suppress(PartialflowError):
                tier_hooks.set_disk_limit(own_limit)


def _tier_figures(stats: dict[str, Any]) -> dict[str, int] | None:
    """The server's disk tier figures (stats tier_*, without the prefix), None if it runs
    without one."""
    if "tier_limit" not in stats:
        return None
    return {k[5:]: int(stats.get(k, 0)) for k in (
        "tier_limit", "tier_keys", "tier_bytes", "tier_shelved", "tier_unshelved",
        "tier_evictions", "tier_commits", "tier_broken", "tier_read")}


def _tier_delta(before: dict[str, int] | None, after: dict[str, int] | None
                ) -> dict[str, int] | None:
    """What the tier did during the run: its counters' growth, and where it ended."""
    if before is None or after is None:
        return None
    grew = ("shelved", "unshelved", "evictions", "commits", "read")
    return {k: v - before[k] if k in grew else v for k, v in after.items()}


def _run(
    client: Client,
    args: argparse.Namespace,
    views: list[wl.ViewSpec],
    hooks: TestHooks | None,
    tier_before: dict[str, int] | None,
) -> int:
    prefix = (args.prefix or f"stress{secrets.token_hex(3)}_").lower()
    cfg = LoadConfig(
        args.writers,
        args.readers,
        args.duration,
        args.evict_rate,
        args.write_rate,
        args.seed,
        args.faults,
        args.fault_window,
    )
    journal = Journal()
    created: list[str] = []
    phases: dict[str, float] = {}
    try:
        clock = time.monotonic()
        seed = _setup(client, prefix, views, random.Random(args.seed), journal, created)
        phases["setup"], clock = time.monotonic() - clock, time.monotonic()
        print(
            f"stress: prefix {prefix}, {len(views)} views, {cfg.writers} writers, {cfg.readers} "
            "readers, "
            f"{cfg.duration:g} s" + (f", faults {','.join(cfg.faults)}" if cfg.faults else ""),
            file=sys.stderr,
        )
        took = _load(client, args, cfg, prefix, views, seed, journal, hooks)
        phases["load"], clock = time.monotonic() - clock, time.monotonic()
        print("stress: load done; reading every key again, then verifying", file=sys.stderr)
        # Spark starts now, not earlier (its start-up would skew the latencies on a small
        # machine), while the final reads and table checks run on the server.
        starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start")
        spark = starter.submit(_spark, args.spark_master)
        starter.shutdown(wait=False)
        # Recovery is about answering again, not fast: a busy server gets a long deadline.
        with _connect(args, timeout=max(args.timeout, 120.0)) as patient:
            recovery = _recover(patient, prefix, views, journal)
        phases["recovery"], clock = time.monotonic() - clock, time.monotonic()
        lsns = table_check_lsns(
            journal.writes, max(w.lsn for w in journal.writes), random.Random(args.seed)
        )
        # Whole-table snapshot scans can take long on a busy server; they are not the load.
        with _connect(args, timeout=max(args.timeout, 600.0)) as patient:
            lost = check_tables(patient, prefix, journal.writes, lsns)
        phases["table checks"], clock = time.monotonic() - clock, time.monotonic()
        stats = client.stats()
        journal.close()
        verdict = verify_reads(spark.result(), journal.reads, journal.writes, views)
        phases["verification"] = time.monotonic() - clock  # with what Spark start-up is left
        verdict.lost, verdict.table_checks = lost, lsns
    finally:
        if hooks is not None:
            with contextlib.suppress(PartialflowError):  # the fault thread lifted it already
                hooks.set_faults("")
        if not args.keep:
            _cleanup(client, created)
    info = RunInfo(
        args.server,
        prefix,
        args.seed,
        [v.name for v in views if v.oracle is not None],
        took,
        args.miss_ms,
        args.fault_settle if args.fault_settle is not None else args.timeout,
        recovery,
        args.plant_wrong_answer,
        _server_figures(stats, prefix, views),
        stats.get("upquery_ms") or {},
        phases,
        args.read_bound,
        getattr(args, "subscription_gap", 10.0),
        _tier_delta(tier_before, _tier_figures(stats)),
    )
    summary = summarize(journal, verdict, info)
    print(render(summary))
    if args.report_json:
        with open(args.report_json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, default=str)
    return 0 if summary["passed"] else 1
