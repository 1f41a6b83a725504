"""Checkpoints: what they cost and what they hold.

* bytes and seconds of a full checkpoint against the state's size, and of the next one
  after 1% of the keys changed (it must scale with the churn, not the state);
* recovery time (restart on the same Spark session: storage open, checkpoint load, log
  replay, views installed) at three state sizes;
* write throughput through the visits view with checkpoints at the default interval (10 s)
  and every second (ten times as often) against checkpoints off, alternated so no side gets
  the quieter minute.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from common import InProcServer, LoadPool, drive, log, ratio

COUNTS = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE k = ? GROUP BY k"


def sizes(root: Path, spark: Any, keys: list[int]) -> list[dict]:
    out = []
    for n in keys:
        data = root / f"ckpt_{n}" / "data"
        row: dict[str, Any] = {"keys": n}
        with InProcServer(data, spark, checkpoint_interval=3600) as srv:
            with srv.client(timeout=3600) as c:
                c.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
                for i in range(0, n, 50_000):
                    c.insert("ev", [(k, v) for k in range(i, min(n, i + 50_000)) for v in (1, 2)])
                c.execute(f"CREATE VIEW counts AS {COUNTS}")
                for i in range(0, n, 20_000):
                    c.lookup_many("counts", list(range(i, min(n, i + 20_000))))
                st = c.stats()
                row["state_bytes"] = st["memory_bytes"]
                full = c.checkpoint()
                churn = max(1, n // 100)
                step = n // churn
                c.insert("ev", [(k, 9) for k in range(0, n, step)][:churn])
                inc = c.checkpoint()
            row.update({
                "full_bytes": full["bytes"], "full_s": full["duration_s"],
                "churn_keys": churn, "incremental_bytes": inc["bytes"],
                "incremental_s": inc["duration_s"],
                "incremental_vs_full": ratio(inc["bytes"], full["bytes"]),
            })
            # A crash-like stop (no last checkpoint) after a few more writes: the restart
            # loads the checkpoint and replays them.
            with srv.client() as c:
                for i in range(10):
                    c.insert("ev", [(i, 3)])
            srv.engine.dataflow.executor.checkpointer.enabled = False
        t0 = time.monotonic()
        with InProcServer(data, spark, checkpoint_interval=3600) as srv:
            row["start_s"] = round(time.monotonic() - t0, 2)
            with srv.client() as c:
                rec = c.stats()["checkpoint"]
                t1 = time.monotonic()
                got = c.lookup_many("counts", list(range(0, n, max(1, n // 1000))))
                row["first_reads_s"] = round(time.monotonic() - t1, 3)
                row["first_reads_misses"] = c.stats()["views"]["counts"]["misses"]
                assert all(r.rows for r in got.values())
        row.update({"recovery_s": rec["recovery_s"], "recovered_keys": rec["recovered_keys"],
                    "replayed_writes": rec["replayed_writes"]})
        log(f"checkpoints, {n} keys ({row['state_bytes'] / 2**20:.1f} MiB of state): full "
            f"{row['full_bytes'] / 2**20:.1f} MiB in {row['full_s']} s; after 1% churn "
            f"{row['incremental_bytes'] / 2**10:.1f} KiB ({row['incremental_vs_full']} of "
            f"full) in {row['incremental_s']} s; recovery {row['recovery_s']} s "
            f"({row['recovered_keys']} keys, {row['replayed_writes']} writes replayed)")
        out.append(row)
    return out


def write_cost(data: Path, spark: Any, pool: LoadPool, *, gen: dict, categories: list[str],
               batch: int, procs: int, threads: int, seconds: float, rounds: int) -> list[dict]:
    """Applied rows/s through the visits view: checkpoints every 10 s (the default) and
    every 1 s, each against off; the order rotates every round."""
    sides = [("off", 0.0), ("every 10 s", 10.0), ("every 1 s", 1.0)]
    rates: dict[str, list[float]] = {name: [] for name, _ in sides}
    taken: dict[str, int] = {name: 0 for name, _ in sides}
    for rnd in range(rounds):
        for k, (name, interval) in enumerate(sides[rnd % 3:] + sides[:rnd % 3]):
            with InProcServer(data, spark, checkpoint_interval=interval) as srv:
                with srv.client() as c:
                    c.lookup_many("max_visit", categories)
                op = {"kind": "write", "batch": batch, "suffix": "", **gen}
                r = drive(pool, srv.address, op, procs=procs, threads=threads, seconds=seconds,
                          seed=rnd * 3 + k)
                srv.wait_applied(srv.engine.storage.last_lsn)
                rates[name].append(r["items"] / max(1e-9, time.time() - r["started_at"]))
                if interval:
                    with srv.client() as c:
                        taken[name] += c.stats()["checkpoint"]["taken"]
    off = sum(rates["off"]) / len(rates["off"])
    out = []
    for name, interval in sides[1:]:
        on = sum(rates[name]) / len(rates[name])
        out.append({"batch": batch, "writers": procs * threads, "seconds": seconds,
                    "rounds": rounds, "interval_s": interval, "off_rows_per_s": round(off, 1),
                    "on_rows_per_s": round(on, 1), "on_vs_off": ratio(on, off),
                    "checkpoints_taken": taken[name],
                    "runs": {"off": [round(x, 1) for x in rates["off"]],
                             "on": [round(x, 1) for x in rates[name]]}})
        log(f"checkpoints: writes through max_visit at {batch} rows/write: off {off:.0f}, "
            f"{name} {on:.0f} rows/s -> x{ratio(on, off)} ({taken[name]} checkpoints taken)")
    return out
