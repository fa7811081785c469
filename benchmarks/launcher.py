"""Per-point overhead of the fork and spawn launchers, and whether both see the same demand.

    python benchmarks/launcher.py [--model sd15] [--res 256] [--runs 3]

Overhead of a run = its wall time in the parent minus the op itself (imports, model build, process start).
Demand from both launchers must agree within the allocator's run-to-run spread; glibc and glibc-fixed are both
measured so that spread is printed next to it. Prints figures; asserts nothing (not a timed test).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from vaemem.measuring.plumbing.launcher import make_launcher
from vaemem.measuring.point import Point, validate
from vaemem.measuring.parent.runner import measure

MIB = 1024 * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="sd15")
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"{args.model} decode fp32 {args.res}px, {args.runs} fresh processes per launcher and allocator")
    print(f"{'launcher':8} {'allocator':12} {'overhead s/run':>15} {'op s':>7} {'demand MiB per run':>30} {'spread':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for launcher in ("fork", "spawn"):
            for alloc in ("glibc", "glibc-fixed"):
                point = validate(Point(args.model, "decode", "fp32", args.res, args.res, allocator=alloc))
                launch = make_launcher(launcher)
                t0 = time.perf_counter()
                recs = measure([point], Path(tmp, f"{launcher}-{alloc}.jsonl"), rig="bench", runs=args.runs,
                               launcher_factory=lambda n, launch=launch: launch)
                total = time.perf_counter() - t0
                ok = [r for r in recs if r["status"] == "ok"]
                overhead = statistics.median(r["run_wall_s"] - r["op_wall_s"] for r in ok)
                demand = [r["demand_bytes"] / MIB for r in ok]
                spread = (max(demand) - min(demand)) / min(demand)
                print(f"{launcher:8} {alloc:12} {overhead:15.2f} {statistics.median(r['op_wall_s'] for r in ok):7.2f} "
                      f"{' '.join(f'{d:.1f}' for d in demand):>30} {spread:7.1%}   (sweep wall {total:.1f} s, "
                      f"helper start included for fork)")


if __name__ == "__main__":
    main()
