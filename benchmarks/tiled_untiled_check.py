"""The evidence behind capping a tiled fallback at the measured untiled price: every measured tiled point beside
the untiled point of the same request (architecture, op, dtype, platform, size, frames, batch; fused, unsliced).

    python benchmarks/tiled_untiled_check.py

Prints one row per pair: tiled demand / untiled demand and the dry runs' ratio (from the committed structures),
then how many pairs break the rule the estimator assumes (tiled demand at most the untiled demand, x the dry runs'
ratio where the tiled dry run is above the untiled one: a tile that is the whole image). On the CPU data of
2026-12-05: 37 pairs, none breaking it; where the tiles hold less (34), tiled demand 0.08-0.46x untiled, each
within 0.04 of its dry-run ratio, and 1.00x in the two pairs whose first tile is the whole image (Wan 2.2's fp32
encode at 288 and 512 px in 256 px tiles, campaign 24: 220 and 636 MiB both ways, the tiled dry run 1.0001-1.0005x).
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
        # the cap: the untiled demand where the tiles' dry run is at most the whole image's, that x the dry runs'
        # ratio where it is above (where a tile is the whole image, the estimator's only case then)
        broken += ratio is not None and demand > whole * max(1.0, ratio)
        print(f"| {k[0]} {k[1]} {k[2]} {k[5]}x{k[6]} x {k[7]}, batch {k[8]} | {tile} | {demand / whole:.2f} | "
              + (f"{ratio:.4f} |" if ratio is not None else "- |"))
    print(f"\n{pairs} pairs; {broken} whose tiled demand is above the untiled demand x the dry runs' ratio (or 1 where "
          f"the tiles' dry run is less)")


if __name__ == "__main__":
    main()
