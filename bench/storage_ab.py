"""Storage writes, this checkout against a baseline commit, side by side (a benchmark, not a
test).

Runs ``storage_writes.run_writes`` (in-process Storage, acknowledged = durable writes) for
each configuration in alternating child processes, this checkout's code and the baseline's:
the baseline from a ``git worktree`` of ``--baseline`` (default HEAD, so uncommitted changes
are measured against the last commit), imported through a ``partialflow`` link on
PYTHONPATH with this checkout's virtualenv. The benchmark code itself (this file and
storage_writes.py) is this checkout's on both sides.

    python bench/storage_ab.py [--baseline REV] [--rounds 2] [--seconds 3]
                               [--configs n:1:16,y:1000:4]   # table (n: bag, y: keyed):rows:threads

Prints, per configuration, rows/s and CPU us per row (the whole process: every thread,
fsync calls included) of each round of each side, the ratios checkout/baseline of the means,
their geometric means, and the load average before each child. CPU per row is the figure
least moved by other work on the machine; rows/s swings with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALL = [f"{pk}:{batch}:{threads}" for pk in "ny" for batch in (1, 1000) for threads in (1, 4, 16)]


def child(configs: list[str], seconds: float) -> None:
    """In the child: run each configuration with whatever ``partialflow`` PYTHONPATH gives."""
    sys.path.insert(0, str(ROOT / "bench"))
    from storage_writes import run_writes

    base = Path(tempfile.mkdtemp(prefix="pf-storage-ab-"))
    out = {}
    for spec in configs:
        pk, batch, threads = spec.split(":")
        r = run_writes(base, int(threads), int(batch), seconds, pk == "y")
        out[spec] = {"rows/s": r["rows/s"], "cpu": r["cpu_us_per_row"],
                     "load": os.getloadavg()[0]}
    print(json.dumps(out))


def run_side(code: Path | None, configs: list[str], seconds: float) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, __file__, "--child", "--seconds", str(seconds),
           "--configs", ",".join(configs)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--configs", default=",".join(ALL))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    configs = args.configs.split(",")
    if args.child:
        child(configs, args.seconds)
        return
    rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="pf-storage-ab-"))
    tree = tmp / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                   capture_output=True, check=True)
    shim = tmp / "shim"
    shim.mkdir()
    (shim / "partialflow").symlink_to(tree)
    print(f"checkout {head} (with uncommitted changes, if any) against {rev}; "
          f"{args.rounds} rounds a side of {args.seconds:g} s per configuration")
    runs: dict[str, list[dict]] = {"new": [], "base": []}
    try:
        for i in range(args.rounds):
            for side, code in (("new", None), ("base", shim)):
                load = os.getloadavg()[0]
                runs[side].append(run_side(code, configs, args.seconds))
                print(f"  round {i + 1} {side}: load average {load:.1f} at the start",
                      flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                       capture_output=True)
    print(f"\n{'table':>5} {'rows':>5} {'thr':>3} {'rows/s checkout':>22} {'baseline':>22} "
          f"{'x':>5} {'CPU us/row checkout':>20} {'baseline':>14} {'x':>5}")
    logs_r, logs_c = [], []
    for spec in configs:
        pk, batch, threads = spec.split(":")
        nr = [r[spec]["rows/s"] for r in runs["new"]]
        br = [r[spec]["rows/s"] for r in runs["base"]]
        nc = [r[spec]["cpu"] for r in runs["new"]]
        bc = [r[spec]["cpu"] for r in runs["base"]]
        xr = statistics.mean(nr) / statistics.mean(br)
        xc = statistics.mean(nc) / statistics.mean(bc)
        logs_r.append(math.log(xr))
        logs_c.append(math.log(xc))
        print(f"{'keyed' if pk == 'y' else 'bag':>5} {batch:>5} {threads:>3} "
              f"{' / '.join(f'{x:.0f}' for x in nr):>22} {' / '.join(f'{x:.0f}' for x in br):>22} "
              f"{xr:5.2f} {' / '.join(f'{x:.1f}' for x in nc):>20} "
              f"{' / '.join(f'{x:.1f}' for x in bc):>14} {xc:5.2f}")
    print(f"\ngeometric mean of the ratios: rows/s x{math.exp(statistics.mean(logs_r)):.3f}, "
          f"CPU per row x{math.exp(statistics.mean(logs_c)):.3f}; "
          f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
