"""The evidence behind capping a tiled fallback at the measured untiled price: every measured tiled point beside
the untiled point of the same request (architecture, op, dtype, platform, size, frames, batch; fused, unsliced).

    python benchmarks/tiled_untiled_check.py

Prints one row per pair: tiled demand / untiled demand and the dry runs' ratio (from the committed structures),
then how many pairs break the rule the estimator assumes (a tiled dry-run peak at most the untiled one, and yet
more demand). On the CPU data of 2026-12-03: 27 pairs, tiled demand 0.08-0.45x untiled, each within 0.03 of
its dry-run ratio, none breaking it.
"""

from __future__ import annotations

import json
from pathlib import Path

from vaemem.fit.coefficients import dry_of, load_dataset

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def main() -> None:
    structures = json.loads((ROOT / "vaemem" / "coefficients.json").read_text())["structures"]
    data = load_dataset([ROOT / "measurements"])
    untiled, tiled = {}, []
    for key, points in data.groups.values():
        for p in points:
            q = p.point
            if q["slicing"] or q["attention"] != "fused":
                continue
            k = (key["architecture"], key["op"], key["dtype"], key["conv_backend"], key["allocator"], q["width"],
                 q["height"], q["frames"], q["batch"])
            dry = dry_of(q, key, structures)
            if q["tile"]:
                tiled.append((k, q["tile"], p.demand_bytes, dry))
            else:
                untiled[k] = (p.demand_bytes, dry)
    pairs = broken = 0
    print("| request | tile | tiled / untiled demand | dry-run ratio |\n|---|---|---|---|")
    for k, tile, demand, dry in sorted(tiled, key=str):
        if k not in untiled:
            continue
        whole, whole_dry = untiled[k]
        ratio = dry[0] / whole_dry[0] if dry and whole_dry else None
        pairs += 1
        broken += ratio is not None and ratio <= 1 and demand > whole
        print(f"| {k[0]} {k[1]} {k[2]} {k[5]}x{k[6]} x {k[7]}, batch {k[8]} | {tile} | {demand / whole:.2f} | "
              + (f"{ratio:.2f} |" if ratio is not None else "- |"))
    print(f"\n{pairs} pairs; {broken} with a tiled dry run at most the untiled one and more demand")


if __name__ == "__main__":
    main()
